package remoting

import (
	"bufio"
	"crypto/tls"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/scanplane/scanplane/internal/cliutil"
)

// limitedRemote starts an actor system whose remote has limits lim and
// TLS cfg (nil: plaintext), logging on log; it stops when t ends. It
// returns the address and the Guard.
func limitedRemote(t *testing.T, lim RemoteLimits, cfg *cliutil.HTTPSecurity, log *slog.Logger) (string, *Guard) {
	t.Helper()
	if err := lim.Validate(); err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return DiscardLogger() }))
	guard := NewGuard(log, sys)
	var tlsCfg *tls.Config
	if cfg != nil {
		tlsCfg = cfg.TLS
	}
	opts := remoteTLSOptions(tlsCfg, log, guard, lim)
	r := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0, opts...))
	r.Start()
	t.Cleanup(func() { r.Shutdown(false); sys.Shutdown() })
	return sys.Address(), guard
}

// h2Preface is an HTTP/2 client preface and an empty SETTINGS frame: a
// connection that opens no stream.
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"

// closedWithin reports whether the server closes c within d: reads (and
// discards what the server sends) end in EOF or a reset.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	br := bufio.NewReader(c)
	for {
		if _, err := br.ReadByte(); err != nil {
			ne, ok := err.(net.Error)
			return !(ok && ne.Timeout())
		}
	}
}

// TestRemoteIdleConnectionsClosed: a connection that never finishes its
// handshake is closed after HandshakeTimeout, one that opens no stream
// after IdleTimeout.
func TestRemoteIdleConnectionsClosed(t *testing.T) {
	lim := DefaultRemoteLimits
	lim.HandshakeTimeout, lim.IdleTimeout = 300*time.Millisecond, 300*time.Millisecond
	addr, _ := limitedRemote(t, lim, nil, DiscardLogger())
	const n = 20
	var conns []net.Conn
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if i%2 == 0 {
			if _, err := c.Write([]byte(h2Preface)); err != nil {
				t.Fatal(err)
			}
		}
		conns = append(conns, c)
	}
	for i, c := range conns {
		if !closedWithin(c, 10*time.Second) {
			t.Fatalf("idle connection %d (preface sent: %v) still open 10s later", i, i%2 == 0)
		}
	}
}

// TestRemoteConnectionCap: with MaxConns open, a further connection is
// closed at once and counted (conn_limit); when one closes, a new one is
// kept.
func TestRemoteConnectionCap(t *testing.T) {
	lim := DefaultRemoteLimits
	lim.HandshakeTimeout, lim.MaxConns = time.Hour, 8
	addr, guard := limitedRemote(t, lim, nil, DiscardLogger())
	var held []net.Conn
	for range lim.MaxConns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// The server writes its HTTP/2 settings once the connection's
		// handshake is done: the connection holds a slot from then on.
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			t.Fatalf("connection %d of %d: %v", len(held)+1, lim.MaxConns, err)
		}
		_ = c.SetReadDeadline(time.Time{})
		held = append(held, c)
	}
	for i := range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if !closedWithin(c, 5*time.Second) {
			t.Fatalf("connection %d beyond MaxConns %d kept open", lim.MaxConns+i+1, lim.MaxConns)
		}
		c.Close()
	}
	if n := guard.RefusedBy(ReasonConnLimit); n != 4 {
		t.Errorf("refused %d connections over the cap, want 4", n)
	}
	held[0].Close()
	waitFor(t, "a connection kept after one closed", func() bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return !closedWithin(c, 200*time.Millisecond)
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// logLines collects a text handler's records.
type logLines struct {
	mu  sync.Mutex
	got []string
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, string(p))
	return len(p), nil
}

func (l *logLines) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...)
}

// TestRemoteFailedHandshakesLogRateLimited: a burst of failed TLS
// handshakes on the remote logs LogBurst lines and then one with the
// number held back; every one is counted (handshake).
func TestRemoteFailedHandshakesLogRateLimited(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	if err := cliutil.InitSecrets(dir, cliutil.SecretsOptions{ServerHosts: []string{"h1"}}); err != nil {
		t.Fatal(err)
	}
	cfg, err := cliutil.RemoteTLS(dir, "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	var out logLines
	lim := DefaultRemoteLimits
	lim.LogBurst, lim.LogEvery = 3, 3*time.Second
	addr, guard := limitedRemote(t, lim, &cliutil.HTTPSecurity{TLS: cfg}, slog.New(slog.NewTextHandler(&out, nil)))
	const n = 40
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("\x16\x03\x01\x00\x05hello")) // a TLS record that is no ClientHello
		closedWithin(c, 10*time.Second)
		c.Close()
	}
	waitFor(t, "line with the number of lines held back", func() bool {
		l := out.lines()
		return len(l) > 0 && strings.Contains(l[len(l)-1], "more refused connections and TLS handshakes not logged")
	})
	l := out.lines()
	hs := 0
	for _, s := range l {
		if strings.Contains(s, "remote: TLS handshake refused") {
			hs++
		}
	}
	if hs != lim.LogBurst || len(l) != lim.LogBurst+1 || !strings.Contains(l[len(l)-1], "37 more") {
		t.Fatalf("%d failed handshakes logged %d lines (%d handshake lines), want %d and one saying 37 more:\n%s", n, len(l), hs, lim.LogBurst, strings.Join(l, ""))
	}
	if got := guard.RefusedBy(ReasonHandshake); got != n {
		t.Errorf("counted %d failed handshakes, want %d", got, n)
	}
}
