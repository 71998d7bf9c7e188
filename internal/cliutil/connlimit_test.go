package cliutil_test

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/connlimittest"
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

// hold is connlimittest.Hold for addr: a connection whose request was
// answered.
func hold(addr string) connlimittest.Hold {
	return func(t *testing.T, local net.Addr) (net.Conn, error) {
		d := &net.Dialer{LocalAddr: local, Timeout: 10 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, get(c, bufio.NewReader(c))
	}
}

// TestHTTPIdleConnectionsClosed: a kept-alive connection that sends no
// further request is closed after IdleTimeout, and one that never sends
// a request after HeaderTimeout.
func TestHTTPIdleConnectionsClosed(t *testing.T) {
	lim := cliutil.DefaultHTTPLimits
	lim.IdleTimeout, lim.HeaderTimeout = 300*time.Millisecond, 300*time.Millisecond
	addr, _ := serve(t, nil, slog.New(slog.DiscardHandler), lim)
	t0 := time.Now()
	connlimittest.IdleClosed(t, addr, 20, func(c net.Conn) error { return get(c, bufio.NewReader(c)) })
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
	connlimittest.Cap(t, lim.MaxConns, 4, hold(addr), nil)
}

// TestHTTPConnectionsPerSource: a source (an IP address) with
// MaxConnsPerSource connections open gets its next one closed at once,
// while another source's connection is served.
func TestHTTPConnectionsPerSource(t *testing.T) {
	lim := cliutil.DefaultHTTPLimits
	lim.MaxConnsPerSource = 4
	addr, _ := serve(t, nil, slog.New(slog.DiscardHandler), lim)
	connlimittest.PerSource(t, lim.MaxConnsPerSource, hold(addr))
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
	var out testutil.SyncBuffer
	lim := cliutil.DefaultHTTPLimits
	lim.LogBurst, lim.LogEvery = 3, time.Hour
	addr, stop := serve(t, sec, slog.New(slog.NewTextHandler(&out, nil)), lim)
	const n = 40
	connlimittest.FailedHandshakes(t, addr, n)
	stop() // reports what is held back
	connlimittest.RateLimitedLog(t, out.Lines(), n, lim.LogBurst, "TLS handshake error")
}
