package natsserver_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/messages"
)

// TestNATSReplySubjectCannotWriteBuckets: a client certificate sends every
// request it may send — a discovery request (answered by the coordinator)
// and each JetStream API request of its role (answered by the server) —
// with a reply subject that names a key of the metadata, blocks or lease
// bucket. No answer reaches those subjects, and every bucket is as it was:
// a privileged connection never answers an untrusted reply subject. On
// the embedded server and on a nats-server started from
// deploy/nats-server-secure.conf.
func TestNATSReplySubjectCannotWriteBuckets(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		srv, dir := secureServer(t)
		replySubjectAttack(t, srv.ClientURL(), dir)
	})
	t.Run("deploy config", func(t *testing.T) {
		url, dir := deployedSecureServer(t)
		replySubjectAttack(t, url, dir)
	})
}

func replySubjectAttack(t *testing.T, url, dir string) {
	ctx := context.Background()
	coord := roleConnURL(t, url, dir, "coordinator")
	lc := bus.DefaultLeaseConfig()
	if _, err := coord.Leases(ctx, lc); err != nil {
		t.Fatal(err)
	}
	admin := roleConnURL(t, url, dir, "admin")
	ameta, err := admin.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ablocks, err := admin.BlockStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ablocks.Put(ctx, "f1.0", []byte("block")); err != nil {
		t.Fatal(err)
	}
	if err := ameta.Publish(ctx, &messages.TableMeta{Name: "t", Generation: 1,
		Tablets: []*messages.TabletMeta{{Ref: &messages.TabletRef{Table: "t", Generation: 1}}}}, 0); err != nil {
		t.Fatal(err)
	}
	lease := &messages.ClusterInfo{MemberId: "m1", CoordinatorAddress: "127.0.0.1:8090", RouterId: "scanplane-router", Incarnation: "i"}
	stop, err := coord.ServeDiscovery(func() []*messages.ClusterInfo { return []*messages.ClusterInfo{lease} })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	cfg := bus.DefaultConfig()
	buckets := []string{cfg.MetaBucket, cfg.BlocksBucket, lc.Bucket}
	// The admin (allowed everything) watches every bucket key's subject:
	// a message there is a write.
	var mu sync.Mutex
	var written []string
	watch, err := admin.NATS().Subscribe("$KV.>", func(m *nats.Msg) {
		mu.Lock()
		written = append(written, m.Subject)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Unsubscribe()
	if err := admin.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	seqs := func() map[string]uint64 {
		out := map[string]uint64{}
		for _, b := range buckets {
			st, err := admin.JetStream().Stream(ctx, "KV_"+b)
			if err != nil {
				t.Fatal(err)
			}
			out[b] = st.CachedInfo().State.LastSeq
		}
		return out
	}
	before := seqs()

	targets := []string{
		"$KV." + cfg.MetaBucket + ".tables.t.current",
		"$KV." + cfg.BlocksBucket + ".f1.0",
		"$KV." + lc.Bucket + ".m1",
	}
	metaStream, blocksStream := "KV_"+cfg.MetaBucket, "KV_"+cfg.BlocksBucket
	requests := []string{
		bus.DiscoverSubject,
		"$JS.API.STREAM.INFO." + metaStream,
		"$JS.API.STREAM.INFO." + blocksStream,
		"$JS.API.STREAM.INFO.KV_" + lc.Bucket,
		"$JS.API.STREAM.MSG.GET." + metaStream,
		"$JS.API.DIRECT.GET." + metaStream,
		"$JS.API.DIRECT.GET." + metaStream + ".$KV." + cfg.MetaBucket + ".tables.t.current",
		"$JS.API.CONSUMER.INFO." + metaStream + ".x",
		"$JS.API.CONSUMER.DELETE." + metaStream + ".x",
	}
	raw, err := nats.Connect(url, nats.Secure(roleTLS(t, dir, "client")), nats.NoReconnect(),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, req := range requests {
		for _, reply := range targets {
			if err := raw.PublishRequest(req, reply, []byte(`{"last_by_subj":"$KV.`+cfg.MetaBucket+`.tables.t.current","seq":1}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := raw.Flush(); err != nil {
		t.Fatal(err)
	}
	// An honest discovery and an honest JetStream request after the
	// attack: their answers come after every answer to the attack.
	cl := roleConnURL(t, url, dir, "client")
	if got, err := cl.Discover(ctx, 5*time.Second); err != nil || len(got) != 1 {
		t.Fatalf("honest discovery after the attack: %v, %v", got, err)
	}
	cmeta, err := cl.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if gen, err := cmeta.Current(ctx, "t"); err != nil || gen != 1 {
		t.Errorf("table t after the attack: generation %d, %v; want 1", gen, err)
	}
	if err := admin.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := append([]string(nil), written...)
	mu.Unlock()
	if len(got) != 0 {
		t.Errorf("answers published to bucket keys: %v", got)
	}
	if after := seqs(); !equalSeqs(before, after) {
		t.Errorf("bucket streams changed: before %v, after %v", before, after)
	}
	if b, err := ablocks.Get(ctx, "f1.0"); err != nil || string(b) != "block" {
		t.Errorf("block after the attack: %q, %v", b, err)
	}
	if gen, err := ameta.Current(ctx, "t"); err != nil || gen != 1 {
		t.Errorf("table t after the attack (admin): generation %d, %v", gen, err)
	}
}

func equalSeqs(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// deployedSecureServer starts a nats-server from
// deploy/nats-server-secure.conf as one standalone node: its secrets and
// store in temporary directories, listening on a free loopback port,
// without the cluster block (its routes name other machines). It returns
// the client URL and the secrets directory.
func deployedSecureServer(t *testing.T) (url, dir string) {
	t.Helper()
	data, err := os.ReadFile("../../deploy/nats-server-secure.conf")
	if err != nil {
		t.Fatal(err)
	}
	conf := string(data)
	i := strings.Index(conf, "\ncluster {")
	if i < 0 {
		t.Fatal("deploy/nats-server-secure.conf: no cluster block")
	}
	conf = conf[:i+1]
	dir = filepath.Join(t.TempDir(), "secrets")
	if err := secrets.Init(dir, secrets.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	for old, repl := range map[string]string{
		"/etc/scanplane/secrets":         dir,
		"/var/lib/scanplane/nats":        t.TempDir(),
		"listen: 0.0.0.0:4222":           "listen: 127.0.0.1:-1",
		"server_name: $NATS_SERVER_NAME": "server_name: deploy-secure",
	} {
		if !strings.Contains(conf, old) {
			t.Fatalf("deploy/nats-server-secure.conf: no %q", old)
		}
		conf = strings.ReplaceAll(conf, old, repl)
	}
	path := filepath.Join(t.TempDir(), "nats-server.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	o.NoSigs = true
	srv, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("nats-server from deploy/nats-server-secure.conf not ready within 30s")
	}
	return srv.ClientURL(), dir
}
