package cliutil

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/scanplane/scanplane/internal/netlimit"
)

// HTTPLimits bound the connections of an HTTP endpoint and the log lines
// its failures cost.
type HTTPLimits struct {
	// HeaderTimeout bounds the TLS handshake and the reading of each
	// request's header.
	HeaderTimeout time.Duration
	// IdleTimeout closes a kept-alive connection that sends no request
	// for this long.
	IdleTimeout time.Duration
	// MaxConns: connections open at once; one accepted beyond it is
	// closed at once.
	MaxConns int
	// MaxConnsPerSource: connections open at once from one source (IP
	// address); one beyond it is closed at once, so one source cannot
	// take the slots of others.
	MaxConnsPerSource int
	// LogBurst server error lines (a failed TLS handshake, a refused
	// connection) are logged per LogEvery; the rest are counted and their
	// number logged at the end of the interval.
	LogBurst int
	LogEvery time.Duration
}

// DefaultHTTPLimits are the limits of every --http endpoint.
var DefaultHTTPLimits = HTTPLimits{HeaderTimeout: 5 * time.Second, IdleTimeout: 30 * time.Second, MaxConns: 256,
	MaxConnsPerSource: 32, LogBurst: 5, LogEvery: 10 * time.Second}

// Validate names the first bad field.
func (l HTTPLimits) Validate() error {
	switch {
	case l.HeaderTimeout <= 0:
		return fmt.Errorf("cliutil: HTTPLimits.HeaderTimeout %v must be > 0", l.HeaderTimeout)
	case l.IdleTimeout <= 0:
		return fmt.Errorf("cliutil: HTTPLimits.IdleTimeout %v must be > 0", l.IdleTimeout)
	case l.MaxConns < 1:
		return fmt.Errorf("cliutil: HTTPLimits.MaxConns %d must be >= 1", l.MaxConns)
	case l.MaxConnsPerSource < 1:
		return fmt.Errorf("cliutil: HTTPLimits.MaxConnsPerSource %d must be >= 1", l.MaxConnsPerSource)
	case l.LogBurst < 1:
		return fmt.Errorf("cliutil: HTTPLimits.LogBurst %d must be >= 1", l.LogBurst)
	case l.LogEvery <= 0:
		return fmt.Errorf("cliutil: HTTPLimits.LogEvery %v must be > 0", l.LogEvery)
	}
	return nil
}

// logThrottle writes an http.Server's error lines through a
// netlimit.Throttle.
type logThrottle struct {
	th   *netlimit.Throttle
	emit func(string)
}

func newLogThrottle(burst int, every time.Duration, emit func(string), suppressed func(int, time.Duration)) *logThrottle {
	return &logThrottle{th: netlimit.NewThrottle(burst, every, suppressed), emit: emit}
}

// Write takes one line (the log.Logger of an http.Server writes a line
// per call).
func (t *logThrottle) Write(p []byte) (int, error) {
	t.line(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (t *logThrottle) line(s string) {
	if t.th.Allow() {
		t.emit(s)
	}
}

// stop reports what is held back and passes nothing more.
func (t *logThrottle) stop() { t.th.Stop() }

// capListener closes every connection accepted while max are open, or
// while its source has sources' maximum open.
type capListener struct {
	net.Listener
	slots    *netlimit.Slots
	sources  *netlimit.Sources
	onRefuse func(addr string, open int64, fromSource bool)
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := netlimit.SourceOf(c.RemoteAddr())
		if open, ok := l.sources.Take(src); !ok {
			l.refuse(c, int64(open), true)
			continue
		}
		if open, ok := l.slots.Take(); !ok {
			l.sources.Release(src)
			l.refuse(c, open, false)
			continue
		}
		return netlimit.OnClose(c, func() { l.slots.Release(); l.sources.Release(src) }), nil
	}
}

func (l *capListener) refuse(c net.Conn, open int64, fromSource bool) {
	addr := c.RemoteAddr().String()
	c.Close()
	if l.onRefuse != nil {
		l.onRefuse(addr, open, fromSource)
	}
}
