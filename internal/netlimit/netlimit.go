// Package netlimit bounds what a listener costs a process: how many
// connections it holds open at once (Slots) and how many log lines its
// failures write (Throttle). The HTTP endpoints (internal/cliutil) and the
// actor remote (internal/remoting) both use it. Everything here is safe
// for concurrent use.
package netlimit

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Slots counts the connections open against a maximum.
type Slots struct {
	max  int64
	open atomic.Int64
}

// NewSlots returns Slots for at most max connections (max >= 1).
func NewSlots(max int) *Slots { return &Slots{max: int64(max)} }

// Take takes a slot for a new connection: false (and the number open)
// when max are open already, and the connection must be closed.
func (s *Slots) Take() (open int64, ok bool) {
	if n := s.open.Add(1); n > s.max {
		s.open.Add(-1)
		return n - 1, false
	}
	return 0, true
}

// Release gives back a slot: at the connection's close (see OnClose), or
// when it did not open after all (a failed handshake).
func (s *Slots) Release() { s.open.Add(-1) }

// Open is the number of slots taken.
func (s *Slots) Open() int64 { return s.open.Load() }

// Sources counts the connections open per source (the remote IP
// address) against a maximum per source, so that one source cannot take
// every slot of a listener.
type Sources struct {
	max  int
	mu   sync.Mutex
	open map[string]int
}

// NewSources returns Sources for at most max connections per source
// (max >= 1).
func NewSources(max int) *Sources { return &Sources{max: max, open: map[string]int{}} }

// SourceOf is the source of a connection from addr: its IP address, or
// the whole address when it has no IP (a pipe, a Unix socket).
func SourceOf(addr net.Addr) string {
	if ta, ok := addr.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	if host, _, err := net.SplitHostPort(addr.String()); err == nil {
		return host
	}
	return addr.String()
}

// Take takes a slot of source: false (and the number open) when max of
// its connections are open already.
func (s *Sources) Take(source string) (open int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.open[source]
	if n >= s.max {
		return n, false
	}
	s.open[source] = n + 1
	return n + 1, true
}

// Release gives back a slot of source.
func (s *Sources) Release(source string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[source] <= 1 {
		delete(s.open, source)
		return
	}
	s.open[source]--
}

// Open is the number of source's slots taken.
func (s *Sources) Open(source string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open[source]
}

// OnClose returns c, which calls release at its first Close.
func OnClose(c net.Conn, release func()) net.Conn { return &releasingConn{Conn: c, release: release} }

type releasingConn struct {
	net.Conn
	release func()
	once    sync.Once
}

func (c *releasingConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// Throttle lets burst lines through per interval and counts the rest; at
// the end of an interval in which it held lines back, it calls
// suppressed with their number.
type Throttle struct {
	every      time.Duration
	burst      int
	suppressed func(held int, every time.Duration)

	mu      sync.Mutex
	until   time.Time // end of the current interval
	passed  int       // lines let through in it
	held    int       // lines held back since the last report
	timer   *time.Timer
	stopped bool
}

// NewThrottle returns a Throttle of burst lines per every (both > 0).
func NewThrottle(burst int, every time.Duration, suppressed func(held int, every time.Duration)) *Throttle {
	return &Throttle{every: every, burst: burst, suppressed: suppressed}
}

// Allow says whether to log a line now; a line it refuses is counted.
// After Stop it refuses every line without counting it.
func (t *Throttle) Allow() bool {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	if !now.Before(t.until) {
		t.until, t.passed = now.Add(t.every), 0
	}
	if t.passed < t.burst {
		t.passed++
		return true
	}
	t.held++
	if t.timer == nil {
		t.timer = time.AfterFunc(t.until.Sub(now), t.report)
	}
	return false
}

func (t *Throttle) report() {
	t.mu.Lock()
	n := t.held
	t.held, t.timer = 0, nil
	t.mu.Unlock()
	if n > 0 {
		t.suppressed(n, t.every)
	}
}

// Stop reports what is held back and lets nothing more through.
func (t *Throttle) Stop() {
	t.mu.Lock()
	if t.timer != nil {
		t.timer.Stop()
	}
	t.stopped = true
	t.mu.Unlock()
	t.report()
}
