package cliutil_test

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/secrets"
)

// serve serves a page on a new loopback port within lim, stopped when t
// ends, and returns its address.
func serve(t *testing.T, sec *cliutil.HTTPSecurity, log *slog.Logger, lim cliutil.HTTPLimits) (addr string, stop func()) {
	t.Helper()
	if err := lim.Validate(); err != nil {
		t.Fatal(err)
	}
	l, err := cliutil.ListenHTTP("http", "127.0.0.1:0", sec)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	s := cliutil.ServeListenerLimits(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }), sec, log, lim)
	stop = func() { once.Do(s) }
	t.Cleanup(stop)
	return l.Addr().String(), stop
}

// get sends one keep-alive request on c and reads the answer.
func get(c net.Conn, br *bufio.Reader) error {
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return err
}

// closedWithin reports whether the server closes c within d (a read
// ends in EOF or a reset).
func closedWithin(c net.Conn, br *bufio.Reader, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := br.ReadByte()
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

// TestHTTPIdleConnectionsClosed: a kept-alive connection that sends no
// further request is closed after IdleTimeout, and one that never sends
// a request after HeaderTimeout.
func TestHTTPIdleConnectionsClosed(t *testing.T) {
	lim := cliutil.DefaultHTTPLimits
	lim.IdleTimeout, lim.HeaderTimeout = 300*time.Millisecond, 300*time.Millisecond
	addr, _ := serve(t, nil, slog.New(slog.DiscardHandler), lim)
	const n = 20
	var conns []net.Conn
	var readers []*bufio.Reader
	t0 := time.Now()
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		if i%2 == 0 { // half kept alive after one request, half silent
			if err := get(c, br); err != nil {
				t.Fatal(err)
			}
		}
		conns, readers = append(conns, c), append(readers, br)
	}
	for i, c := range conns {
		if !closedWithin(c, readers[i], 10*time.Second) {
			t.Fatalf("idle connection %d still open 10s later", i)
		}
	}
	if d := time.Since(t0); d < lim.IdleTimeout {
		t.Errorf("idle connections closed after %v, before IdleTimeout %v", d, lim.IdleTimeout)
	}
}

// TestHTTPConnectionCap: with MaxConns open, a further connection is
// closed at once; when one closes, a new one is served.
func TestHTTPConnectionCap(t *testing.T) {
	lim := cliutil.DefaultHTTPLimits
	lim.MaxConns = 8
	addr, _ := serve(t, nil, slog.New(slog.DiscardHandler), lim)
	var held []net.Conn
	for range lim.MaxConns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := get(c, bufio.NewReader(c)); err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	for i := range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		if err := get(c, br); err == nil {
			t.Fatalf("connection %d beyond MaxConns %d was served", lim.MaxConns+i+1, lim.MaxConns)
		}
		c.Close()
	}
	held[0].Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		err = get(c, bufio.NewReader(c))
		c.Close()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection served 10s after one of %d closed: %v", lim.MaxConns, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHTTPConnectionsPerSource: a source (an IP address) with
// MaxConnsPerSource connections open gets its next one closed at once,
// while another source's connection is served.
func TestHTTPConnectionsPerSource(t *testing.T) {
	lim := cliutil.DefaultHTTPLimits
	lim.MaxConnsPerSource = 4
	addr, _ := serve(t, nil, slog.New(slog.DiscardHandler), lim)
	dial := func(local net.Addr) (net.Conn, error) {
		d := &net.Dialer{LocalAddr: local, Timeout: 10 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, get(c, bufio.NewReader(c))
	}
	other := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}
	for i := range lim.MaxConnsPerSource {
		if _, err := dial(other); err != nil {
			t.Fatalf("connection %d of %d from 127.0.0.2: %v", i+1, lim.MaxConnsPerSource, err)
		}
	}
	if _, err := dial(other); err == nil {
		t.Fatalf("connection %d from 127.0.0.2 served, want it closed (MaxConnsPerSource %d)", lim.MaxConnsPerSource+1, lim.MaxConnsPerSource)
	}
	if _, err := dial(nil); err != nil {
		t.Fatalf("a connection from 127.0.0.1 beside the full source: %v", err)
	}
}

// lines is a slog handler's output, one entry per record.
type lines struct {
	mu  sync.Mutex
	got []string
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, string(p))
	return len(p), nil
}

// TestHTTPFailedHandshakesLogRateLimited: a burst of failed TLS
// handshakes logs LogBurst lines and then one with the number held back.
func TestHTTPFailedHandshakesLogRateLimited(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	if err := secrets.Init(dir, secrets.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	sec, err := cliutil.LoadHTTPSecurity(dir, "coordinator", "")
	if err != nil {
		t.Fatal(err)
	}
	var out lines
	lim := cliutil.DefaultHTTPLimits
	lim.LogBurst, lim.LogEvery = 3, time.Hour
	addr, stop := serve(t, sec, slog.New(slog.NewTextHandler(&out, nil)), lim)
	const n = 40
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("\x16\x03\x01\x00\x05hello")) // a TLS record that is no ClientHello
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.Copy(io.Discard, c) // until the server closes it, after logging
		c.Close()
	}
	stop() // reports what is held back
	out.mu.Lock()
	defer out.mu.Unlock()
	hs := 0
	for _, l := range out.got {
		if strings.Contains(l, "TLS handshake error") {
			hs++
		}
	}
	if hs != lim.LogBurst || len(out.got) != lim.LogBurst+1 || !strings.Contains(out.got[len(out.got)-1], "37 more server errors") {
		t.Fatalf("%d failed handshakes logged %d lines (%d handshake errors), want %d and one saying 37 more:\n%s", n, len(out.got), hs, lim.LogBurst, strings.Join(out.got, ""))
	}
}
