package bus_test

// A three-node embedded NATS cluster with JetStream replicas 3: buckets
// survive the loss of one node, a restarted node rejoins, and the loss of
// two nodes makes store operations fail with ErrUnavailable within
// OpTimeout.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/messages"
)

// freeAddrs reserves n route addresses on 127.0.0.1 by listening on port 0
// and closing; every node of a test cluster needs every node's route port
// before the first one starts.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().String())
	}
	return addrs
}

// testCluster is n embedded servers routed to each other.
type testCluster struct {
	t     *testing.T
	cfgs  []bus.ServerConfig
	nodes []*bus.EmbeddedServer // nil while a node is down
}

func startCluster(t *testing.T, n int) *testCluster {
	t.Helper()
	addrs := freeAddrs(t, n)
	var routes []string
	for _, a := range addrs {
		routes = append(routes, "nats-route://"+a)
	}
	tc := &testCluster{t: t}
	for i := range n {
		cfg := bus.DefaultServerConfig()
		cfg.Port, cfg.StoreDir = -1, t.TempDir()
		cfg.Name = fmt.Sprintf("n%d", i+1)
		cfg.ClusterListen, cfg.Routes = addrs[i], routes
		tc.cfgs = append(tc.cfgs, cfg)
		tc.nodes = append(tc.nodes, nil)
	}
	t.Cleanup(func() {
		for i := range tc.nodes {
			tc.stop(i)
		}
	})
	for i := range n {
		tc.start(i)
	}
	for i := range n {
		if err := tc.nodes[i].WaitJetStream(ctxFor(t, 30*time.Second)); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
	return tc
}

func (tc *testCluster) start(i int) {
	tc.t.Helper()
	srv, err := bus.StartServer(tc.cfgs[i])
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
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := f(ctx)
		cancel()
		if err == nil {
			return time.Since(start), nil
		}
		if time.Since(start) > d {
			return time.Since(start), err
		}
		time.Sleep(100 * time.Millisecond) // pacing between attempts, not a wait for a condition
	}
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
	if g, err := ms2.Current(ctx, "t"); err != nil || g != 2 {
		t.Fatalf("one node down: generation through the other conn = %d, %v; want 2", g, err)
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
