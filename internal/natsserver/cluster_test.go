package natsserver_test

// A three-node embedded NATS cluster with JetStream replicas 3: buckets
// survive the loss of one node, a restarted node rejoins, and the loss of
// two nodes makes store operations fail with ErrUnavailable within
// OpTimeout.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/freeport"
	"github.com/scanplane/scanplane/internal/natsserver"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/messages"
)

// freeAddrs picks n route addresses on 127.0.0.1 below the kernel's
// ephemeral range (freeport.PickN); every node of a test cluster needs
// every node's route port before the first one starts.
func freeAddrs(t testing.TB, n int) []string {
	t.Helper()
	addrs, err := freeport.PickN("127.0.0.1", n)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// testCluster is n embedded servers routed to each other.
type testCluster struct {
	t     testing.TB
	cfgs  []natsserver.ServerConfig
	nodes []*natsserver.EmbeddedServer // nil while a node is down
}

// newCluster configures n nodes; routes(i, addrs) lists the routes of
// node i given every node's route address. No node is started.
func newCluster(t testing.TB, n int, routes func(i int, addrs []string) []string) *testCluster {
	t.Helper()
	addrs := freeAddrs(t, n)
	tc := &testCluster{t: t}
	for i := range n {
		cfg := natsserver.DefaultServerConfig()
		cfg.Port, cfg.StoreDir = -1, t.TempDir()
		cfg.Name = fmt.Sprintf("n%d", i+1)
		cfg.ClusterListen = addrs[i]
		for _, a := range routes(i, addrs) {
			cfg.Routes = append(cfg.Routes, "nats-route://"+a)
		}
		tc.cfgs = append(tc.cfgs, cfg)
		tc.nodes = append(tc.nodes, nil)
	}
	t.Cleanup(func() {
		for i := range tc.nodes {
			tc.stop(i)
		}
	})
	return tc
}

// skipLongClusterTest leaves a test out of -short: a three-node cluster
// that loses and regains nodes, which takes seconds of elections. The
// full run (.ci/run) keeps it.
func skipLongClusterTest(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("three nodes losing and regaining members: left out of -short")
	}
}

// startCluster starts n nodes, each routed to all, and waits until their
// JetStream has a metadata leader. All of them must start: nats-server
// elects the first leader of a new cluster only once every node its
// routes name is up (empty logs never form a quorum of a subset).
func startCluster(t *testing.T, n int) *testCluster {
	t.Helper()
	tc := newCluster(t, n, func(_ int, addrs []string) []string { return addrs })
	tc.startAndWait(0, n)
	return tc
}

// startAndWait starts nodes from..to-1 and waits for their JetStream.
func (tc *testCluster) startAndWait(from, to int) {
	tc.t.Helper()
	for i := from; i < to; i++ {
		tc.start(i)
	}
	for i := from; i < to; i++ {
		if err := tc.nodes[i].WaitJetStream(ctxFor(tc.t, 30*time.Second)); err != nil {
			tc.t.Fatalf("node %d: %v", i, err)
		}
	}
}

func (tc *testCluster) start(i int) {
	tc.t.Helper()
	srv, err := natsserver.StartServer(tc.cfgs[i])
	if err != nil {
		tc.t.Fatalf("start node %d: %v", i, err)
	}
	tc.nodes[i] = srv
}

func (tc *testCluster) stop(i int) {
	if tc.nodes[i] != nil {
		tc.nodes[i].Close()
		tc.nodes[i] = nil
	}
}

// url lists the client URLs of the given nodes, comma separated.
func (tc *testCluster) url(idx ...int) string {
	var us []string
	for _, i := range idx {
		us = append(us, tc.nodes[i].ClientURL())
	}
	return strings.Join(us, ",")
}

// kvStreamInfo returns the info of a bucket's stream.
func kvStreamInfo(ctx context.Context, c *bus.Conn, bucket string) (*jetstream.StreamInfo, error) {
	st, err := c.JetStream().Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, err
	}
	return st.Info(ctx)
}

// notLeading returns the index of the first node of tc that does not
// lead the stream info describes.
func (tc *testCluster) notLeading(info *jetstream.StreamInfo) int {
	tc.t.Helper()
	if info.Cluster == nil || info.Cluster.Leader == "" {
		tc.t.Fatalf("stream %s has no leader", info.Config.Name)
	}
	for i, cfg := range tc.cfgs {
		if cfg.Name != info.Cluster.Leader {
			return i
		}
	}
	tc.t.Fatalf("every node is named %s, the leader of stream %s", info.Cluster.Leader, info.Config.Name)
	return -1
}

// currentReplicas counts the leader and the current, online followers of
// a bucket's stream.
func currentReplicas(info *jetstream.StreamInfo) int {
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return 0
	}
	n := 1
	for _, p := range info.Cluster.Replicas {
		if p.Current && !p.Offline {
			n++
		}
	}
	return n
}

// retry calls f until it succeeds or d passes, and returns the time to the
// first success or the last error. Operations on a bucket whose stream
// leader was on a node that died fail until the survivors elect a new one.
func retry(d time.Duration, f func(ctx context.Context) error) (time.Duration, error) {
	start := time.Now()
	err := testutil.PollErr(d, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return f(ctx)
	})
	return time.Since(start), err
}

func tableGen(name string, gen uint64) *messages.TableMeta {
	return &messages.TableMeta{
		Name: name, Generation: gen,
		Tablets: []*messages.TabletMeta{{Ref: &messages.TabletRef{Table: name, Generation: gen, Index: 0}}},
	}
}

// TestClusterReplicas3 runs three embedded nodes with both buckets at
// replicas 3: losing one node (the one a connection is attached to
// included) loses neither reads nor writes, a node restarted with its name
// and store dir rejoins every replica group, and with two of three nodes
// down, operations fail with ErrUnavailable within OpTimeout.
func TestClusterReplicas3(t *testing.T) {
	skipLongClusterTest(t)
	t.Parallel()
	const opTimeout = 2 * time.Second
	start := time.Now()
	tc := startCluster(t, 3)
	t.Logf("cluster formed in %s", time.Since(start))
	mod := func(urls ...int) func(*bus.Config) {
		return func(cfg *bus.Config) { cfg.URL, cfg.Replicas, cfg.OpTimeout = tc.url(urls...), 3, opTimeout }
	}
	c0 := dial(t, tc.nodes[0], mod(0))    // attached to node 0, which will die
	c2 := dial(t, tc.nodes[2], mod(2, 1)) // attached to node 2
	ctx := ctxFor(t, 60*time.Second)
	bs0, err := c0.BlockStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ms0, err := c0.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bs2, err := c2.BlockStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ms2, err := c2.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := bus.DefaultConfig()
	for _, b := range []string{cfg.BlocksBucket, cfg.MetaBucket} {
		info, err := kvStreamInfo(ctx, c2, b)
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.Replicas != 3 {
			t.Fatalf("bucket %s: %d replicas, want 3", b, info.Config.Replicas)
		}
	}
	if err := bs0.Put(ctx, "f/1", []byte("block one")); err != nil {
		t.Fatal(err)
	}
	if err := ms0.Publish(ctx, tableGen("t", 1), 0); err != nil {
		t.Fatal(err)
	}

	// Table watches through both connections.
	var seen [2]atomic.Uint64
	for i, ms := range []*bus.MetaStore{ms0, ms2} {
		if err := ms.Watch(ctx, func(table string, gen uint64) {
			if table == "t" {
				seen[i].Store(gen)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}

	// One node down: the one c0 is attached to.
	tc.stop(0)
	for _, c := range []struct {
		name string
		bs   *bus.BlockStore
		ms   *bus.MetaStore
	}{{"conn of the dead node", bs0, ms0}, {"conn of a live node", bs2, ms2}} {
		took, err := retry(20*time.Second, func(ctx context.Context) error {
			got, err := c.bs.Get(ctx, "f/1")
			if err != nil {
				return err
			}
			if string(got) != "block one" {
				return fmt.Errorf("block f/1 = %q", got)
			}
			return c.bs.Put(ctx, "f/2-"+c.name, []byte("written with a node down"))
		})
		if err != nil {
			t.Fatalf("%s, one node down: blocks: %v", c.name, err)
		}
		t.Logf("%s, one node down: block read+write after %s", c.name, took)
	}
	took, err := retry(20*time.Second, func(ctx context.Context) error {
		g, err := ms0.Current(ctx, "t")
		if err != nil {
			return err
		}
		if g == 1 {
			return ms0.Publish(ctx, tableGen("t", 2), 1)
		}
		if g != 2 {
			return fmt.Errorf("table t at generation %d", g)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("one node down: metadata: %v", err)
	}
	t.Logf("one node down: metadata read+publish after %s", took)
	published := time.Now()
	// A read through another node may be served by a replica that has
	// not applied the publish yet (KV direct gets read any replica): it
	// must see generation 2 soon, not at once.
	took, err = retry(10*time.Second, func(ctx context.Context) error {
		g, err := ms2.Current(ctx, "t")
		if err == nil && g != 2 {
			err = fmt.Errorf("generation %d", g)
		}
		return err
	})
	if err != nil {
		t.Fatalf("one node down: generation through the other conn: %v; want 2", err)
	}
	t.Logf("one node down: generation 2 through the other conn after %s", took)
	for i, name := range []string{"conn of the dead node", "conn of a live node"} {
		_, err := retry(30*time.Second, func(context.Context) error {
			if g := seen[i].Load(); g != 2 {
				return fmt.Errorf("watch saw generation %d", g)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("one node down: table watch of the %s: %v", name, err)
		}
		t.Logf("one node down: table watch of the %s saw generation 2 within %s of the publish", name, time.Since(published).Round(time.Millisecond))
	}

	// The node restarts with its name and store dir and rejoins both
	// replica groups.
	tc.start(0)
	took, err = retry(30*time.Second, func(ctx context.Context) error {
		for _, b := range []string{cfg.BlocksBucket, cfg.MetaBucket} {
			info, err := kvStreamInfo(ctx, c2, b)
			if err != nil {
				return err
			}
			if n := currentReplicas(info); n != 3 {
				return fmt.Errorf("bucket %s: %d current replicas (%+v)", b, n, info.Cluster)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("restarted node did not rejoin: %v", err)
	}
	t.Logf("restarted node current in both buckets after %s", took)

	// Two of three down: c0 is left with node 0 alone, which has no quorum.
	// Writes fail with ErrUnavailable within OpTimeout. Reads may still be
	// answered (a KV get is a direct get, which a lone replica serves,
	// possibly stale) or fail the same way; they never hang.
	tc.stop(1)
	tc.stop(2)
	for _, op := range []struct {
		name  string
		write bool
		f     func(ctx context.Context) error
	}{
		{"block put", true, func(ctx context.Context) error { return bs0.Put(ctx, "f/3", []byte("x")) }},
		{"publish", true, func(ctx context.Context) error { return ms0.Publish(ctx, tableGen("t", 3), 2) }},
		{"block get", false, func(ctx context.Context) error { _, err := bs0.Get(ctx, "f/1"); return err }},
		{"current", false, func(ctx context.Context) error { _, err := ms0.Current(ctx, "t"); return err }},
	} {
		opStart := time.Now()
		err := op.f(ctxFor(t, time.Minute))
		took := time.Since(opStart)
		if !errors.Is(err, bus.ErrUnavailable) && (op.write || err != nil) {
			t.Errorf("two nodes down: %s: %v, want ErrUnavailable", op.name, err)
		}
		if took > opTimeout+3*time.Second {
			t.Errorf("two nodes down: %s took %s, OpTimeout is %s", op.name, took, opTimeout)
		}
		t.Logf("two nodes down: %s returned after %s: %v", op.name, took.Round(time.Millisecond), err)
	}
}

// TestClusterBucketReplicas: while a cluster has two nodes of the three
// it will have, a replicas-3 bucket cannot be placed; opening it retries
// until the third node joins, or fails after BucketWait with
// ErrUnavailable naming the bucket and the replicas. Replicas 0 follows
// the metadata bucket; an existing bucket with fewer replicas is raised,
// never lowered.
func TestClusterBucketReplicas(t *testing.T) {
	t.Parallel()
	// Nodes 0 and 1 route to each other and form a cluster of two; node 2
	// routes to both and joins later.
	tc := newCluster(t, 3, func(i int, addrs []string) []string {
		switch i {
		case 0:
			return addrs[1:2]
		case 1:
			return addrs[0:1]
		}
		return addrs[0:2]
	})
	tc.startAndWait(0, 2)
	mod := func(replicas int, wait time.Duration, bucket string) func(*bus.Config) {
		return func(cfg *bus.Config) {
			cfg.URL, cfg.Replicas, cfg.BucketWait, cfg.OpTimeout = tc.url(0, 1), replicas, wait, 3*time.Second
			cfg.MetaBucket, cfg.BlocksBucket = "meta-"+bucket, "blocks-"+bucket
		}
	}
	ctx := ctxFor(t, 2*time.Minute)

	// Two nodes: one attempt, then a short BucketWait, both fail.
	_, err := dial(t, tc.nodes[0], mod(3, 0, "a")).MetaStore(ctx)
	if !errors.Is(err, bus.ErrUnavailable) || !strings.Contains(err.Error(), "meta-a with 3 replicas") {
		t.Fatalf("R3 bucket on 2 of 3 nodes, one attempt: %v; want ErrUnavailable naming the bucket and replicas", err)
	}
	t.Logf("one attempt: %v", err)
	begin := time.Now()
	_, err = dial(t, tc.nodes[0], mod(3, time.Second, "a")).MetaStore(ctx)
	if !errors.Is(err, bus.ErrUnavailable) || !strings.Contains(err.Error(), "meta-a with 3 replicas: not ready after") {
		t.Fatalf("R3 bucket on 2 of 3 nodes, BucketWait 1s: %v; want ErrUnavailable, not ready after", err)
	}
	if took := time.Since(begin); took > 10*time.Second {
		t.Errorf("BucketWait 1s: gave up after %s", took)
	}
	t.Logf("BucketWait 1s: %v", err)

	// With a long BucketWait the open waits for the third node.
	done := make(chan error, 1)
	c := dial(t, tc.nodes[0], mod(3, time.Minute, "a"))
	go func() { _, err := c.MetaStore(ctx); done <- err }()
	tc.start(2)
	if err := <-done; err != nil {
		t.Fatalf("R3 bucket after the third node started: %v", err)
	}
	replicasOf := func(c *bus.Conn, bucket string) int {
		t.Helper()
		info, err := kvStreamInfo(ctx, c, bucket)
		if err != nil {
			t.Fatalf("stream info of %s: %v", bucket, err)
		}
		return info.Config.Replicas
	}
	if r := replicasOf(c, "meta-a"); r != 3 {
		t.Fatalf("meta-a: %d replicas, want 3", r)
	}

	// Auto follows the metadata bucket.
	auto := dial(t, tc.nodes[1], mod(0, time.Minute, "a"))
	if _, err := auto.BlockStore(ctx); err != nil {
		t.Fatal(err)
	}
	if r := replicasOf(auto, "blocks-a"); r != 3 {
		t.Fatalf("auto blocks bucket next to an R3 metadata bucket: %d replicas, want 3", r)
	}
	// Auto without a metadata bucket: 1.
	if _, err := dial(t, tc.nodes[1], mod(0, time.Minute, "b")).BlockStore(ctx); err != nil {
		t.Fatal(err)
	}
	if r := replicasOf(auto, "blocks-b"); r != 1 {
		t.Fatalf("auto blocks bucket alone: %d replicas, want 1", r)
	}
	// Replicas 3 raises the R1 bucket; auto then follows the blocks bucket
	// for the metadata bucket.
	if _, err := dial(t, tc.nodes[0], mod(3, time.Minute, "b")).BlockStore(ctx); err != nil {
		t.Fatal(err)
	}
	if r := replicasOf(auto, "blocks-b"); r != 3 {
		t.Fatalf("R1 blocks bucket opened with Replicas 3: %d replicas, want 3", r)
	}
	if _, err := dial(t, tc.nodes[1], mod(0, time.Minute, "b")).MetaStore(ctx); err != nil {
		t.Fatal(err)
	}
	if r := replicasOf(auto, "meta-b"); r != 3 {
		t.Fatalf("auto metadata bucket next to an R3 blocks bucket: %d replicas, want 3", r)
	}
	// Replicas 1 never lowers.
	if _, err := dial(t, tc.nodes[1], mod(1, time.Minute, "b")).BlockStore(ctx); err != nil {
		t.Fatal(err)
	}
	if r := replicasOf(auto, "blocks-b"); r != 3 {
		t.Fatalf("R3 blocks bucket opened with Replicas 1: %d replicas, want 3 (never lowered)", r)
	}
	// The raised bucket works: a block written is read back through a
	// connection to another node.
	bs, err := dial(t, tc.nodes[2], mod(0, time.Minute, "b")).BlockStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := bs.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := bs.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("Get after raise: %q, %v", v, err)
	}
}

// TestDeployNATSConfig: deploy/nats-server.conf parses, takes its server
// name from NATS_SERVER_NAME (and refuses to start without it, rather than
// give every node the same name), and names the cluster as the embedded
// server does.
func TestDeployNATSConfig(t *testing.T) {
	const path = "../../deploy/nats-server.conf"
	t.Setenv("NATS_SERVER_NAME", "n2")
	o, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if o.ServerName != "n2" || o.Cluster.Name != natsserver.DefaultServerConfig().ClusterName || len(o.Routes) != 3 || !o.JetStream {
		t.Errorf("%s: server_name %q, cluster %q, %d routes, JetStream %v", path, o.ServerName, o.Cluster.Name, len(o.Routes), o.JetStream)
	}
	os.Unsetenv("NATS_SERVER_NAME")
	if _, err := server.ProcessConfigFile(path); err == nil || !strings.Contains(err.Error(), "NATS_SERVER_NAME") {
		t.Errorf("%s without NATS_SERVER_NAME: %v, want an error naming it", path, err)
	}
}
