package cliutil

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
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
	// LogBurst server error lines (a failed TLS handshake, a refused
	// connection) are logged per LogEvery; the rest are counted and their
	// number logged at the end of the interval.
	LogBurst int
	LogEvery time.Duration
}

// DefaultHTTPLimits are the limits of every --http endpoint.
var DefaultHTTPLimits = HTTPLimits{HeaderTimeout: 5 * time.Second, IdleTimeout: 30 * time.Second, MaxConns: 256,
	LogBurst: 5, LogEvery: 10 * time.Second}

// Validate names the first bad field.
func (l HTTPLimits) Validate() error {
	switch {
	case l.HeaderTimeout <= 0:
		return fmt.Errorf("cliutil: HTTPLimits.HeaderTimeout %v must be > 0", l.HeaderTimeout)
	case l.IdleTimeout <= 0:
		return fmt.Errorf("cliutil: HTTPLimits.IdleTimeout %v must be > 0", l.IdleTimeout)
	case l.MaxConns < 1:
		return fmt.Errorf("cliutil: HTTPLimits.MaxConns %d must be >= 1", l.MaxConns)
	case l.LogBurst < 1:
		return fmt.Errorf("cliutil: HTTPLimits.LogBurst %d must be >= 1", l.LogBurst)
	case l.LogEvery <= 0:
		return fmt.Errorf("cliutil: HTTPLimits.LogEvery %v must be > 0", l.LogEvery)
	}
	return nil
}

// logThrottle passes burst lines per interval to emit and counts the
// rest; at the end of an interval with lines held back it calls
// suppressed with their number.
type logThrottle struct {
	every      time.Duration
	burst      int
	emit       func(string)
	suppressed func(n int, every time.Duration)

	mu      sync.Mutex
	until   time.Time // end of the current interval
	passed  int       // lines passed in it
	held    int       // lines held back since the last report
	timer   *time.Timer
	stopped bool
}

func newLogThrottle(burst int, every time.Duration, emit func(string), suppressed func(int, time.Duration)) *logThrottle {
	return &logThrottle{every: every, burst: burst, emit: emit, suppressed: suppressed}
}

// Write takes one line (the log.Logger of an http.Server writes a line
// per call).
func (t *logThrottle) Write(p []byte) (int, error) {
	t.line(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (t *logThrottle) line(s string) {
	now := time.Now()
	t.mu.Lock()
	if t.stopped {
		t.mu.Unlock()
		return
	}
	if !now.Before(t.until) {
		t.until, t.passed = now.Add(t.every), 0
	}
	if t.passed < t.burst {
		t.passed++
		t.mu.Unlock()
		t.emit(s)
		return
	}
	t.held++
	if t.timer == nil {
		t.timer = time.AfterFunc(t.until.Sub(now), t.report)
	}
	t.mu.Unlock()
}

// report logs the number of lines held back.
func (t *logThrottle) report() {
	t.mu.Lock()
	n := t.held
	t.held, t.timer = 0, nil
	t.mu.Unlock()
	if n > 0 {
		t.suppressed(n, t.every)
	}
}

// stop reports what is held back and passes nothing more.
func (t *logThrottle) stop() {
	t.mu.Lock()
	if t.timer != nil {
		t.timer.Stop()
	}
	t.stopped = true
	t.mu.Unlock()
	t.report()
}

// capListener closes every connection accepted while max are open.
type capListener struct {
	net.Listener
	max      int64
	open     atomic.Int64
	refused  atomic.Uint64
	onRefuse func(addr string, open int64)
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if n := l.open.Add(1); n > l.max {
			l.open.Add(-1)
			l.refused.Add(1)
			addr := c.RemoteAddr().String()
			c.Close()
			if l.onRefuse != nil {
				l.onRefuse(addr, n-1)
			}
			continue
		}
		return &capConn{Conn: c, l: l}, nil
	}
}

// capConn gives its slot back at its first Close.
type capConn struct {
	net.Conn
	l    *capListener
	once sync.Once
}

func (c *capConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}
