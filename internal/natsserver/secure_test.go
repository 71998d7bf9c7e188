package natsserver_test

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/natsserver"
	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/messages"
)

// The secured setups the tests share: a secrets directory, servers and
// clusters that map its certificates to users as the coordinator does
// with --secrets, and connections by role.

// newSecrets makes a secrets directory (secrets init), with per-host scan
// server certificates for hosts if any.
func newSecrets(t *testing.T, hosts ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "secrets")
	if err := secrets.Init(dir, secrets.InitOptions{ServerHosts: hosts}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// secure sets cfg's TLS (the coordinator's certificate of dir) and its
// users: every role; with per-host certificates (hosts), every role but
// the generic scan server and one scan-server user per host.
func secure(t *testing.T, cfg *natsserver.ServerConfig, dir string, hosts []string) {
	t.Helper()
	cfg.TLS = roleTLS(t, dir, "coordinator")
	for _, r := range secrets.Roles {
		if len(hosts) == 0 || r != "scanserver" {
			cfg.Users = append(cfg.Users, natsserver.CertUser{Subject: secrets.RoleSubject(r), Role: r})
		}
	}
	for _, h := range hosts {
		cfg.Users = append(cfg.Users, natsserver.CertUser{Subject: secrets.HostSubject(h), Role: natsserver.RoleScanServer, Host: h})
	}
}

// secureServer is an embedded server secured by a new secrets directory
// (with per-host scan server certificates for hosts, if any); it returns
// the server and the directory.
func secureServer(t *testing.T, hosts ...string) (*natsserver.EmbeddedServer, string) {
	t.Helper()
	dir := newSecrets(t, hosts...)
	cfg := natsserver.DefaultServerConfig()
	cfg.Port, cfg.StoreDir = -1, t.TempDir()
	secure(t, &cfg, dir, hosts)
	srv, err := natsserver.StartServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv, dir
}

// secureCluster is three routed nodes secured by one new secrets
// directory, started and with a JetStream leader; it returns the cluster
// and the directory.
func secureCluster(t *testing.T) (*testCluster, string) {
	t.Helper()
	dir := newSecrets(t)
	tc := newCluster(t, 3, func(_ int, addrs []string) []string { return addrs })
	for i := range tc.cfgs {
		secure(t, &tc.cfgs[i], dir, nil)
	}
	tc.startAndWait(0, 3)
	return tc, dir
}

func roleTLS(t *testing.T, dir, role string) *tls.Config {
	t.Helper()
	c, err := cliutil.RemoteTLS(dir, role)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// roleConn connects with role's certificate through bus.Connect.
func roleConn(t *testing.T, srv *natsserver.EmbeddedServer, dir, role string) *bus.Conn {
	t.Helper()
	return roleConnURL(t, srv.ClientURL(), dir, role)
}

// roleConnURL connects to url with role's certificate through bus.Connect.
func roleConnURL(t *testing.T, url, dir, role string) *bus.Conn {
	t.Helper()
	return roleConnLog(t, url, dir, role, nil)
}

// roleConnLog is roleConnURL with the connection's log going to log
// (nil: discarded).
func roleConnLog(t *testing.T, url, dir, role string, log *slog.Logger) *bus.Conn {
	t.Helper()
	cfg := bus.DefaultConfig()
	cfg.URL, cfg.Name, cfg.TLS, cfg.Logger = url, role, roleTLS(t, dir, role), log
	cfg.OpTimeout, cfg.BucketWait = 2*time.Second, 0
	cfg.ReadOnly = role == "client" || role == "scanserver"
	c, err := bus.Connect(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Connect as %s: %v", role, err)
	}
	t.Cleanup(c.Close)
	return c
}

// rawConn connects to srv with role's certificate through nats.go alone
// (closed with t); the asynchronous errors the server sends it, such as
// permissions violations, arrive on errs.
func rawConn(t *testing.T, srv *natsserver.EmbeddedServer, dir, role string) (nc *nats.Conn, errs <-chan error) {
	t.Helper()
	ch := make(chan error, 8)
	nc, err := nats.Connect(srv.ClientURL(), nats.Secure(roleTLS(t, dir, role)), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case ch <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, ch
}

// publishRefused publishes data on subject through nc and waits
// (bounded) for the server's permissions violation naming subject on errs.
func publishRefused(t *testing.T, nc *nats.Conn, errs <-chan error, subject string, data []byte) {
	t.Helper()
	if err := nc.Publish(subject, data); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), `"`+subject+`"`) {
			t.Fatalf("publish %s: %v, want a permissions violation", subject, err)
		}
		t.Logf("publish %s refused: %v", subject, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("publish %s: no permissions violation", subject)
	}
}

// heartbeats subscribes c to every heartbeat (until t ends) and returns
// them as they arrive; those beyond a full buffer are dropped.
func heartbeats(t *testing.T, c *bus.Conn) <-chan *messages.Heartbeat {
	t.Helper()
	got := make(chan *messages.Heartbeat, 64)
	sub, err := c.SubscribeHeartbeats(func(h *messages.Heartbeat) {
		select {
		case got <- h:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	if err := c.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	return got
}
