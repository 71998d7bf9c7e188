package remoting

import (
	"crypto/tls"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/connlimittest"
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

// TestRemoteIdleConnectionsClosed: a connection that never finishes its
// handshake is closed after HandshakeTimeout, one that opens no stream
// after IdleTimeout.
func TestRemoteIdleConnectionsClosed(t *testing.T) {
	lim := DefaultRemoteLimits
	lim.HandshakeTimeout, lim.IdleTimeout = 300*time.Millisecond, 300*time.Millisecond
	addr, _ := limitedRemote(t, lim, nil, DiscardLogger())
	connlimittest.IdleClosed(t, addr, 20, func(c net.Conn) error {
		_, err := c.Write([]byte(h2Preface))
		return err
	})
}

// TestRemoteConnectionCap: with MaxConns open, a further connection is
// closed at once and counted (conn_limit); when one closes, a new one is
// kept.
func TestRemoteConnectionCap(t *testing.T) {
	lim := DefaultRemoteLimits
	lim.HandshakeTimeout, lim.MaxConns, lim.PeerSlots = time.Hour, 8, 0
	addr, guard := limitedRemote(t, lim, nil, DiscardLogger())
	connlimittest.Cap(t, lim.MaxConns, 4, hold(addr, nil), func() {
		if n := guard.RefusedBy(ReasonConnLimit); n != 4 {
			t.Errorf("refused %d connections over the cap, want 4", n)
		}
	})
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
	var out testutil.SyncBuffer
	lim := DefaultRemoteLimits
	lim.LogBurst, lim.LogEvery = 3, 3*time.Second
	addr, guard := limitedRemote(t, lim, &cliutil.HTTPSecurity{TLS: cfg}, slog.New(slog.NewTextHandler(&out, nil)))
	const n = 40
	connlimittest.FailedHandshakes(t, addr, n)
	testutil.Eventually(t, 30*time.Second, "the line with the number of lines held back", func() bool {
		l := out.Lines()
		return len(l) > 0 && strings.Contains(l[len(l)-1], "more refused connections and TLS handshakes not logged")
	})
	connlimittest.RateLimitedLog(t, out.Lines(), n, lim.LogBurst, "remote: TLS handshake refused")
	if got := guard.RefusedBy(ReasonHandshake); got != n {
		t.Errorf("counted %d failed handshakes, want %d", got, n)
	}
}

// hold is connlimittest.Hold for addr with TLS cfg (nil: plaintext): a
// connection that sent its HTTP/2 preface and got the server's first
// bytes (its settings, sent once the connection's handshake is done and
// it holds a slot).
func hold(addr string, tlsCfg *tls.Config) connlimittest.Hold {
	return func(t *testing.T, local net.Addr) (net.Conn, error) {
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
}

// TestRemoteConnectionsPerSource: a source (an IP address) with
// MaxConnsPerSource connections open gets its next one closed at once and
// counted (source_limit), while another source's connection is kept.
func TestRemoteConnectionsPerSource(t *testing.T) {
	lim := DefaultRemoteLimits
	lim.HandshakeTimeout, lim.MaxConnsPerSource = time.Hour, 4
	addr, guard := limitedRemote(t, lim, nil, DiscardLogger())
	connlimittest.PerSource(t, lim.MaxConnsPerSource, hold(addr, nil))
	if n := guard.RefusedBy(ReasonSourceLimit); n != 1 {
		t.Errorf("refused %d connections over the source's cap, want 1", n)
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
		if _, err := hold(addr, roleCfg("client"))(t, nil); err != nil {
			t.Fatalf("client connection %d: %v", i+1, err)
		}
	}
	if _, err := hold(addr, roleCfg("client"))(t, nil); err == nil {
		t.Fatal("a client connection took a peer slot")
	}
	if n := guard.RefusedBy(ReasonConnLimit); n != 1 {
		t.Errorf("refused %d client connections, want 1", n)
	}
	for _, role := range []string{"coordinator", "scanserver"} {
		if _, err := hold(addr, roleCfg(role))(t, nil); err != nil {
			t.Fatalf("a %s connection with the peer slots free: %v", role, err)
		}
	}
	if _, err := hold(addr, roleCfg("coordinator"))(t, nil); err == nil {
		t.Fatal("a coordinator connection kept with every slot taken")
	}
	if n := guard.RefusedBy(ReasonConnLimit); n != 2 {
		t.Errorf("refused %d connections, want 2", n)
	}
}
