// Package connlimittest checks a server's connection limits the same way
// for every listener that has them (the HTTP endpoints, the actor
// remote): idle connections closed, a cap on connections, a cap per
// source address, and failed TLS handshakes logged at a limited rate.
// Only _test.go files import it. Its functions run on the test's
// goroutine and close every connection they open by the end of the test.
package connlimittest

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil"
)

// Hold dials the server under test from local (nil: any address) and
// does what makes the server hold the connection (a request answered, a
// handshake done). It returns the connection and nil when the server
// holds it, or the error seen when the server closed it instead. It
// closes the connection when t ends.
type Hold func(t *testing.T, local net.Addr) (net.Conn, error)

// ClosedWithin reports whether the server closes c within d: reads (and
// discards what the server sends) end in EOF or a reset.
func ClosedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	br := bufio.NewReader(c)
	for {
		if _, err := br.ReadByte(); err != nil {
			ne, ok := err.(net.Error)
			return !ok || !ne.Timeout()
		}
	}
}

// IdleClosed opens n connections to addr, primes every other one (the
// first included) with prime, which leaves it idle after a first
// exchange, leaves the others silent, and requires the server to close
// each within 10s.
func IdleClosed(t *testing.T, addr string, n int, prime func(net.Conn) error) {
	t.Helper()
	conns := make([]net.Conn, n)
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if i%2 == 0 {
			if err := prime(c); err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
		}
		conns[i] = c
	}
	for i, c := range conns {
		if !ClosedWithin(c, 10*time.Second) {
			t.Fatalf("idle connection %d (primed: %v) still open 10s later", i, i%2 == 0)
		}
	}
}

// Cap checks a cap of max connections: max connections are held, each of
// the next over is refused, then refused runs (nil: nothing; a check of
// the server's counters), then one held connection closes and a new one
// is held within 30s.
func Cap(t *testing.T, max, over int, hold Hold, refused func()) {
	t.Helper()
	var held []net.Conn
	for i := range max {
		c, err := hold(t, nil)
		if err != nil {
			t.Fatalf("connection %d of %d: %v", i+1, max, err)
		}
		held = append(held, c)
	}
	for i := range over {
		if _, err := hold(t, nil); err == nil {
			t.Fatalf("connection %d beyond the cap of %d held", max+i+1, max)
		}
	}
	if refused != nil {
		refused()
	}
	held[0].Close()
	testutil.EventuallyErr(t, 30*time.Second, fmt.Sprintf("a connection held after one of %d closed", max), func() error {
		c, err := hold(t, nil)
		if c != nil {
			c.Close()
		}
		return err
	})
}

// PerSource checks a cap of max connections per source address: max
// connections from 127.0.0.2 are held, the next one is refused, and one
// from 127.0.0.1 beside them is held.
func PerSource(t *testing.T, max int, hold Hold) {
	t.Helper()
	other := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}
	for i := range max {
		if _, err := hold(t, other); err != nil {
			t.Fatalf("connection %d of %d from 127.0.0.2: %v", i+1, max, err)
		}
	}
	if _, err := hold(t, other); err == nil {
		t.Fatalf("connection %d from 127.0.0.2 held, want it refused (cap per source %d)", max+1, max)
	}
	if _, err := hold(t, nil); err != nil {
		t.Fatalf("a connection from 127.0.0.1 beside the full source: %v", err)
	}
}

// badHello is a TLS handshake record that is no ClientHello.
const badHello = "\x16\x03\x01\x00\x05hello"

// FailedHandshakes opens n connections to addr, sends each a TLS record
// that is no ClientHello and requires the server to close it within 10s.
func FailedHandshakes(t *testing.T, addr string, n int) {
	t.Helper()
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte(badHello)) // a server quick to close may reset the write
		closed := ClosedWithin(c, 10*time.Second)
		c.Close()
		if !closed {
			t.Fatalf("connection %d with a bad TLS handshake still open 10s later", i+1)
		}
	}
}

// RateLimitedLog checks the log lines of n failures of which burst are
// logged: burst lines containing each, then one line saying how many
// more were not logged ("<n-burst> more"), and nothing else.
func RateLimitedLog(t *testing.T, lines []string, n, burst int, each string) {
	t.Helper()
	got := 0
	for _, l := range lines {
		if strings.Contains(l, each) {
			got++
		}
	}
	more := fmt.Sprintf("%d more", n-burst)
	if got != burst || len(lines) != burst+1 || !strings.Contains(lines[len(lines)-1], more) {
		t.Fatalf("%d failures logged %d lines (%d saying %q), want %d and one saying %q:\n%s",
			n, len(lines), got, each, burst, more, strings.Join(lines, ""))
	}
}
