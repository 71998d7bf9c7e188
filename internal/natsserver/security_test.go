package natsserver_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/natsserver"
	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/messages"
)

// TestNATSTLSRefusesWithoutCertificate: the secured embedded server
// accepts only TLS connections presenting a certificate the cluster CA
// signed whose subject is one of the roles'.
func TestNATSTLSRefusesWithoutCertificate(t *testing.T) {
	srv, dir := secureServer(t)
	url := srv.ClientURL()
	other := filepath.Join(t.TempDir(), "other")
	if err := secrets.Init(other, secrets.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	// A certificate of the cluster's CA whose subject names no role.
	ca, caKey := loadCA(t, dir)
	now := time.Now()
	der, key, err := secrets.NewCert(ca, caKey, secrets.CertSpec{CommonName: "intruder", Role: "intruder",
		IPs: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	unknown := t.TempDir()
	if err := secrets.WriteCertFiles(filepath.Join(unknown, "x.crt"), filepath.Join(unknown, "x.key"), der, key); err != nil {
		t.Fatal(err)
	}
	unknownCert, err := tls.LoadX509KeyPair(filepath.Join(unknown, "x.crt"), filepath.Join(unknown, "x.key"))
	if err != nil {
		t.Fatal(err)
	}
	caOnly := roleTLS(t, dir, "client").Clone()
	caOnly.Certificates = nil
	otherCA := roleTLS(t, other, "client").Clone()
	otherCA.RootCAs = caOnly.RootCAs // trusts the real server, presents another CA's certificate
	unknownTLS := caOnly.Clone()
	unknownTLS.Certificates = []tls.Certificate{unknownCert}

	for _, tc := range []struct {
		name string
		opts []nats.Option
		want string
	}{
		// nats.go upgrades to TLS when the server asks for it, and
		// then knows no CA to trust the server by.
		{"plain", nil, "tls"},
		{"TLS without a certificate", []nats.Option{nats.Secure(caOnly)}, ""},
		{"another CA's certificate", []nats.Option{nats.Secure(otherCA)}, ""},
		{"the CA's certificate of no role", []nats.Option{nats.Secure(unknownTLS)}, "authorization violation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := nats.Connect(url, append(tc.opts, nats.Timeout(5*time.Second), nats.NoReconnect())...)
			if err == nil {
				// TLS 1.3: the server checks the client certificate after
				// the client's handshake is done; the refusal shows on
				// the first round trip.
				err = nc.Flush()
				nc.Close()
			}
			if err == nil {
				t.Fatal("connected")
			}
			if !strings.Contains(strings.ToLower(err.Error()), tc.want) {
				t.Fatalf("err %q, want %q", err, tc.want)
			}
			t.Logf("refused: %v", err)
		})
	}
	// bus.Connect without TLS names the cause.
	cfg := bus.DefaultConfig()
	cfg.URL = url
	if c, err := bus.Connect(context.Background(), cfg); err == nil {
		c.Close()
		t.Fatal("bus.Connect without TLS connected")
	} else if !errors.Is(err, bus.ErrTLSRequired) {
		t.Fatalf("bus.Connect without TLS: %v, want ErrTLSRequired", err)
	}
}

// TestNATSRolePermissions runs every role over real TLS connections: each
// does its own work, and what a role may not do is refused by the NATS
// server (a permissions violation), not filtered by a subscriber.
func TestNATSRolePermissions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, dir := secureServer(t)
	coord := roleConn(t, srv, dir, "coordinator")
	if _, err := coord.MetaStore(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := coord.Leases(ctx, bus.DefaultLeaseConfig()); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var hbs []*messages.Heartbeat
	sub, err := coord.SubscribeHeartbeats(func(h *messages.Heartbeat) { mu.Lock(); hbs = append(hbs, h); mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := coord.NATS().Flush(); err != nil {
		t.Fatal(err)
	}

	// admin (ingest) writes a block and a table.
	admin := roleConn(t, srv, dir, "admin")
	ablocks, err := admin.BlockStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ablocks.Put(ctx, "f1.0", []byte("block")); err != nil {
		t.Fatal(err)
	}
	ameta, err := admin.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ameta.Publish(ctx, &messages.TableMeta{Name: "t", Generation: 1,
		Tablets: []*messages.TabletMeta{{Ref: &messages.TabletRef{Table: "t", Generation: 1}}}}, 0); err != nil {
		t.Fatal(err)
	}

	// scanserver: reads blocks and metadata, publishes heartbeats.
	ss := roleConn(t, srv, dir, "scanserver")
	sblocks, err := ss.BlockStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := sblocks.Get(ctx, "f1.0"); err != nil || string(b) != "block" {
		t.Fatalf("scanserver block get: %q, %v", b, err)
	}
	smeta, err := ss.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := smeta.Get(ctx, "t", 1); err != nil || m.GetGeneration() != 1 {
		t.Fatalf("scanserver meta get: %v, %v", m, err)
	}
	if err := ss.PublishHeartbeat(&messages.Heartbeat{Host: "h1", Server: "s1"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the scan server's heartbeat", func() bool { mu.Lock(); defer mu.Unlock(); return len(hbs) == 1 })
	if err := sblocks.Put(ctx, "f2.0", []byte("forged")); err == nil {
		t.Fatal("scanserver wrote a block")
	}
	if err := smeta.Publish(ctx, &messages.TableMeta{Name: "t", Generation: 2,
		Tablets: []*messages.TabletMeta{{Ref: &messages.TabletRef{Table: "t", Generation: 2}}}}, 1); err == nil {
		t.Fatal("scanserver published a table generation")
	}

	// client: reads metadata and leases; cannot write them, cannot
	// publish a heartbeat, cannot read a block.
	cl := roleConn(t, srv, dir, "client")
	cmeta, err := cl.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if gen, err := cmeta.Current(ctx, "t"); err != nil || gen != 1 {
		t.Fatalf("client current generation: %d, %v", gen, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	watched := make(chan string, 1)
	go func() {
		_ = cmeta.Watch(wctx, func(table string, gen uint64) {
			select {
			case watched <- table:
			default:
			}
		})
	}()
	select {
	case <-watched:
	case <-wctx.Done():
		t.Fatal("the client's metadata watch saw no table")
	}
	cancel()
	if _, err := cl.Leases(ctx, bus.DefaultLeaseConfig()); err != nil {
		t.Fatalf("client leases: %v", err)
	}
	// The client asks the coordinators who is there (core NATS).
	lease := &messages.ClusterInfo{MemberId: "m1", CoordinatorAddress: "127.0.0.1:8090", RouterId: "scanplane-router", Incarnation: "i"}
	stopDiscovery, err := coord.ServeDiscovery(func() []*messages.ClusterInfo { return []*messages.ClusterInfo{lease} })
	if err != nil {
		t.Fatal(err)
	}
	if got, err := cl.Discover(ctx, 5*time.Second); err != nil || len(got) != 1 {
		t.Fatalf("client discovery: %v, %v", got, err)
	}
	stopDiscovery()
	if err := cmeta.Publish(ctx, &messages.TableMeta{Name: "t", Generation: 2,
		Tablets: []*messages.TabletMeta{{Ref: &messages.TabletRef{Table: "t", Generation: 2}}}}, 1); err == nil {
		t.Fatal("client published a table generation")
	}
	// Not even the blocks bucket's stream info, which would list the
	// block keys.
	if _, err := cl.BlockStore(ctx); err == nil {
		t.Fatal("client opened the blocks bucket")
	}
	// Nothing the refused writes tried is there.
	if gen, err := ameta.Current(ctx, "t"); err != nil || gen != 1 {
		t.Fatalf("current generation after refused writes: %d, %v; want 1", gen, err)
	}
	if _, err := ablocks.Get(ctx, "f2.0"); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("forged block: %v, want ErrNotFound", err)
	}

	// A forged heartbeat with the client's certificate: the server
	// refuses it (the publisher gets a permissions violation) and the
	// coordinator never sees it.
	forger, refused := rawConn(t, srv, dir, "client")
	publishRefused(t, forger, refused, bus.HeartbeatSubject("h1", "s1"), []byte("forged"))
	// The server dropped the forged message before answering; a real
	// heartbeat sent now is the next one the coordinator gets.
	if err := ss.PublishHeartbeat(&messages.Heartbeat{Host: "h1", Server: "s1", QueueLen: 7}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the second real heartbeat", func() bool { mu.Lock(); defer mu.Unlock(); return len(hbs) >= 2 })
	mu.Lock()
	defer mu.Unlock()
	if len(hbs) != 2 || hbs[1].GetQueueLen() != 7 {
		t.Fatalf("coordinator got %d heartbeats (%v), want the scan server's 2", len(hbs), hbs)
	}
	if d := coord.DecodeErrors(); d != 0 {
		t.Fatalf("coordinator got %d undecodable messages (the forged one?)", d)
	}
}

// loadCA reads the CA certificate of a secrets directory and the CA's
// key from beside it (secrets.DefaultCADir).
func loadCA(t *testing.T, dir string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	read := func(name string) []byte {
		path := filepath.Join(dir, name)
		if name == "ca.key" {
			path = filepath.Join(secrets.DefaultCADir(dir), name)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := pem.Decode(data)
		if b == nil {
			t.Fatalf("%s: no PEM block", name)
		}
		return b.Bytes
	}
	ca, err := x509.ParseCertificate(read("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	k, err := x509.ParsePKCS8PrivateKey(read("ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		t.Fatalf("ca.key is a %T", k)
	}
	return ca, key
}

func TestServerConfigTLSUsersValidate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	if err := secrets.Init(dir, secrets.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	good := roleTLS(t, dir, "coordinator")
	noVerify := good.Clone()
	noVerify.ClientAuth = tls.NoClientCert
	for _, tc := range []struct {
		name string
		mod  func(*natsserver.ServerConfig)
		want string
	}{
		{"users without TLS", func(c *natsserver.ServerConfig) { c.Users = []natsserver.CertUser{{Subject: "CN=x", Role: "client"}} }, "ServerConfig.Users needs ServerConfig.TLS"},
		{"no client verification", func(c *natsserver.ServerConfig) { c.TLS = noVerify }, "must require and verify client certificates"},
		{"unknown role", func(c *natsserver.ServerConfig) {
			c.TLS, c.Users = good, []natsserver.CertUser{{Subject: "CN=x", Role: "root"}}
		}, `ServerConfig.Users[0].Role: natsserver: unknown role "root"`},
		{"empty subject", func(c *natsserver.ServerConfig) { c.TLS, c.Users = good, []natsserver.CertUser{{Role: "client"}} }, "ServerConfig.Users[0].Subject is empty"},
		{"twice", func(c *natsserver.ServerConfig) {
			c.TLS, c.Users = good, []natsserver.CertUser{{Subject: "CN=x", Role: "client"}, {Subject: "CN=x", Role: "admin"}}
		}, `ServerConfig.Users[1].Subject "CN=x" is listed twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := natsserver.DefaultServerConfig()
			tc.mod(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want %q", err, tc.want)
			}
			if errors.Is(err, natsserver.ErrUnknownRole) != (tc.name == "unknown role") {
				t.Fatalf("errors.Is(ErrUnknownRole) wrong for %v", err)
			}
		})
	}
	c := natsserver.DefaultServerConfig()
	c.TLS, c.Users = good, []natsserver.CertUser{{Subject: secrets.RoleSubject("client"), Role: "client"}}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `no coordinator or admin user "`+secrets.RoleSubject("coordinator")+`"`) {
		t.Fatalf("Validate without the server's own user: %v", err)
	}
	c.Users = append(c.Users, natsserver.CertUser{Subject: secrets.RoleSubject("coordinator"), Role: "coordinator"})
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestNATSTLSRoutes: three secured nodes form a JetStream cluster over
// TLS routes (each node presenting the coordinator certificate, verifying
// the others' against the CA); a heartbeat a scan server publishes on one
// node reaches a coordinator subscribed on another; the route port
// refuses a TLS connection without a certificate.
func TestNATSTLSRoutes(t *testing.T) {
	t.Parallel()
	tc, dir := secureCluster(t)
	for i, n := range tc.nodes {
		if r := n.Server().NumRoutes(); r < 2 {
			t.Fatalf("node %d has %d routes, want 2", i, r)
		}
	}
	got := heartbeats(t, roleConn(t, tc.nodes[0], dir, "coordinator"))
	ss := roleConn(t, tc.nodes[2], dir, "scanserver")
	// Interest crosses the routes asynchronously: publish until one
	// heartbeat is seen.
	testutil.Eventually(t, 10*time.Second, "a heartbeat across the TLS routes", func() bool {
		if err := ss.PublishHeartbeat(&messages.Heartbeat{Host: "h3", Server: "s"}); err != nil {
			t.Fatal(err)
		}
		select {
		case h := <-got:
			if h.GetHost() != "h3" {
				t.Fatalf("heartbeat %v", h)
			}
			return true
		default:
			return false
		}
	})
	noCert := roleTLS(t, dir, "coordinator").Clone()
	noCert.Certificates = nil
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", tc.nodes[0].ClusterAddr(), noCert)
	if err == nil {
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Fatalf("route port without a certificate: %v, want a refusal (certificate required)", err)
	}
}

// TestNATSPerHostScanServer: with per-host scan server certificates
// (secrets init --server-hosts) mapped as the coordinator maps them, the
// certificate of host h1 may publish h1's heartbeats and busy signals but
// not h2's (a permissions violation from the server), and the generic
// scanserver certificate is not a user any more.
func TestNATSPerHostScanServer(t *testing.T) {
	srv, dir := secureServer(t, "h1", "h2")
	hosts, err := secrets.ServerHosts(dir)
	if err != nil || len(hosts) != 2 || hosts[0] != "h1" || hosts[1] != "h2" {
		t.Fatalf("ServerHosts = %q, %v; want [h1 h2]", hosts, err)
	}
	if r := secrets.ServerTLSRole(dir, "h1"); r != "scanserver.h1" {
		t.Fatalf("ServerTLSRole(h1) = %q", r)
	}
	if r := secrets.ServerTLSRole(dir, "h3"); r != "scanserver" {
		t.Fatalf("ServerTLSRole(h3) = %q", r)
	}
	got := heartbeats(t, roleConn(t, srv, dir, "coordinator"))
	nc, refused := rawConn(t, srv, dir, secrets.ServerRole("h1"))
	publishRefused(t, nc, refused, bus.HeartbeatSubject("h2", "s"), []byte("forged"))
	// Its own host's heartbeat goes through (and is the first the
	// coordinator gets: the forged one was dropped before the error).
	h1 := roleConn(t, srv, dir, secrets.ServerRole("h1"))
	if err := h1.PublishHeartbeat(&messages.Heartbeat{Host: "h1", Server: "s"}); err != nil {
		t.Fatal(err)
	}
	if err := h1.PublishSignal(bus.SignalBusy, &messages.LoadSignal{Host: "h1", Server: "s"}); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-got:
		if h.GetHost() != "h1" {
			t.Fatalf("coordinator got a heartbeat of %q first, want h1's", h.GetHost())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("h1's own heartbeat did not arrive")
	}
	if err := h1.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := h1.NATS().LastError(); err != nil {
		t.Fatalf("h1's own heartbeat and busy signal: %v", err)
	}
	// The generic scan server certificate maps to no user now.
	gen, err := nats.Connect(srv.ClientURL(), nats.Secure(roleTLS(t, dir, "scanserver")), nats.NoReconnect())
	if err == nil {
		err = gen.Flush()
		gen.Close()
	}
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		t.Fatalf("scanserver.crt with per-host certificates: %v, want an authorization violation", err)
	}
}
