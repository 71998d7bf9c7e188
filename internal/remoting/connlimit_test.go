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
	"github.com/scanplane/scanplane/internal/secrets"
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
	lim.HandshakeTimeout, lim.MaxConns, lim.PeerSlots = time.Hour, 8, 0
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
	if err := secrets.Init(dir, secrets.InitOptions{ServerHosts: []string{"h1"}}); err != nil {
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

// heldOpen dials addr from local (nil: any) and waits for the server's
// first bytes (its HTTP/2 settings, sent once the connection's handshake
// is done and it holds a slot): nil when they came, the read's error when
// the server closed the connection instead.
func heldOpen(t *testing.T, addr string, local net.Addr, tlsCfg *tls.Config) (net.Conn, error) {
	t.Helper()
	d := &net.Dialer{LocalAddr: local, Timeout: 10 * time.Second}
	var c net.Conn
	var err error
	if tlsCfg != nil {
		c, err = tls.DialWithDialer(d, "tcp", addr, tlsCfg)
	} else {
		c, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte(h2Preface)); err != nil {
		return c, err
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = c.Read(make([]byte, 1))
	_ = c.SetReadDeadline(time.Time{})
	return c, err
}

// TestRemoteConnectionsPerSource: a source (an IP address) with
// MaxConnsPerSource connections open gets its next one closed at once and
// counted (source_limit), while another source's connection is kept.
func TestRemoteConnectionsPerSource(t *testing.T) {
	lim := DefaultRemoteLimits
	lim.HandshakeTimeout, lim.MaxConnsPerSource = time.Hour, 4
	addr, guard := limitedRemote(t, lim, nil, DiscardLogger())
	other := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}
	for i := range lim.MaxConnsPerSource {
		if _, err := heldOpen(t, addr, other, nil); err != nil {
			t.Fatalf("connection %d of %d from 127.0.0.2: %v", i+1, lim.MaxConnsPerSource, err)
		}
	}
	if _, err := heldOpen(t, addr, other, nil); err == nil {
		t.Fatalf("connection %d from 127.0.0.2 kept, want it closed (MaxConnsPerSource %d)", lim.MaxConnsPerSource+1, lim.MaxConnsPerSource)
	}
	if n := guard.RefusedBy(ReasonSourceLimit); n != 1 {
		t.Errorf("refused %d connections over the source's cap, want 1", n)
	}
	if _, err := heldOpen(t, addr, nil, nil); err != nil {
		t.Fatalf("a connection from 127.0.0.1 beside the full source: %v", err)
	}
}

// TestRemotePeerSlots: with MaxConns-PeerSlots connections open, a client
// certificate's connection is closed after its handshake and counted
// (conn_limit), while a coordinator's and a scan server's take the peer
// slots; with those taken too, every connection is refused.
func TestRemotePeerSlots(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	if err := secrets.Init(dir, secrets.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	roleCfg := func(role string) *tls.Config {
		cfg, err := cliutil.RemoteTLS(dir, role)
		if err != nil {
			t.Fatal(err)
		}
		cfg = cfg.Clone()
		cfg.ServerName = "127.0.0.1"
		cfg.NextProtos = []string{"h2"}
		return cfg
	}
	lim := DefaultRemoteLimits
	lim.HandshakeTimeout, lim.MaxConns, lim.PeerSlots = time.Hour, 4, 2
	addr, guard := limitedRemote(t, lim, &cliutil.HTTPSecurity{TLS: roleCfg("coordinator")}, DiscardLogger())
	for i := range lim.MaxConns - lim.PeerSlots {
		if _, err := heldOpen(t, addr, nil, roleCfg("client")); err != nil {
			t.Fatalf("client connection %d: %v", i+1, err)
		}
	}
	if _, err := heldOpen(t, addr, nil, roleCfg("client")); err == nil {
		t.Fatal("a client connection took a peer slot")
	}
	if n := guard.RefusedBy(ReasonConnLimit); n != 1 {
		t.Errorf("refused %d client connections, want 1", n)
	}
	for _, role := range []string{"coordinator", "scanserver"} {
		if _, err := heldOpen(t, addr, nil, roleCfg(role)); err != nil {
			t.Fatalf("a %s connection with the peer slots free: %v", role, err)
		}
	}
	if _, err := heldOpen(t, addr, nil, roleCfg("coordinator")); err == nil {
		t.Fatal("a coordinator connection kept with every slot taken")
	}
	if n := guard.RefusedBy(ReasonConnLimit); n != 2 {
		t.Errorf("refused %d connections, want 2", n)
	}
}
