package natsserver_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/natsserver"
	"github.com/scanplane/scanplane/internal/testutil"
)

// TestReadLeavesPausedNode: a connection that knows three nodes lists a
// table's blocks and reads one, in a bucket at replicas 3 whose every
// replica holds them, while its own node is SIGSTOPped (and stays
// stopped). The listing that gets nothing
// checks the node, finds it silent, and moves the connection to another
// node, where the listing (a watcher whose consumer may again land on
// the stopped node's replica, and is then made again) and the read are
// answered: both succeed, the connection left one node, and it is on
// another. Without the check the connection stays on the stopped node
// until nats.go's pings give up on it.
func TestReadLeavesPausedNode(t *testing.T) {
	t.Parallel()
	nodes, cfgs := startProcCluster(t, 3)
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = n.url
	}
	conn := procDial(t, urls...)
	ctx := ctxFor(t, 3*time.Minute)
	var blocks *bus.BlockStore
	if _, err := retry(60*time.Second, func(ctx context.Context) (err error) {
		blocks, err = conn.BlockStore(ctx)
		return err
	}); err != nil {
		t.Fatalf("blocks bucket: %v", err)
	}
	want := bytes.Repeat([]byte("block"), 1000)
	if _, err := retry(60*time.Second, func(ctx context.Context) error { return blocks.Put(ctx, "t.k", want) }); err != nil {
		t.Fatalf("put: %v", err)
	}
	// Every replica holds the block before the node stops: a listing's
	// consumer on a replica that has not applied the put yet lists
	// nothing, which is not what this test is about. A second put, of
	// another table, carries the first one's commit to every replica that
	// receives it.
	if _, err := retry(60*time.Second, func(ctx context.Context) error { return blocks.Put(ctx, "u.k", want) }); err != nil {
		t.Fatalf("put: %v", err)
	}
	waitReplicasCurrent(t, conn, bus.DefaultConfig().BlocksBucket)
	on := conn.NATS().ConnectedServerName()
	paused := slices.IndexFunc(cfgs, func(c natsserver.ServerConfig) bool { return c.Name == on })
	if paused < 0 {
		t.Fatalf("connected to %q, none of the nodes", on)
	}
	pauseNode(t, nodes[paused])
	stopped := time.Now()
	keys, err := blocks.TableKeys(ctx, "t")
	if err != nil || !slices.Equal(keys, []string{"t.k"}) {
		t.Fatalf("listing with node %s stopped: %q, %v; want [t.k]", on, keys, err)
	}
	t.Logf("listing answered %v after node %s stopped", time.Since(stopped).Round(time.Millisecond), on)
	got, err := blocks.Get(ctx, "t.k")
	if err != nil {
		t.Fatalf("read with node %s stopped: %v", on, err)
	}
	t.Logf("read answered %v after node %s stopped; connection on %s", time.Since(stopped).Round(time.Millisecond), on, conn.NATS().ConnectedServerName())
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want %d", len(got), len(want))
	}
	if n := conn.NodesLeft(); n != 1 {
		t.Errorf("the connection left %d nodes, want 1 (the stopped one)", n)
	}
	if now := conn.NATS().ConnectedServerName(); now == on || strings.TrimSpace(now) == "" {
		t.Errorf("the connection is on %q after the read, want another node than the stopped %s", now, on)
	}
}

// TestIdleConnectionLeavesPausedNode: a connection that knows three
// nodes and reads nothing (a scan server that only publishes heartbeats)
// leaves its node for another within a few seconds of the node's
// SIGSTOP: its node check (bus.Config.NodeCheck) finds the node silent.
// nats.go's own pings would take PingsOut+1 intervals of PingInterval,
// 6 s at least.
func TestIdleConnectionLeavesPausedNode(t *testing.T) {
	t.Parallel()
	nodes, cfgs := startProcCluster(t, 3)
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = n.url
	}
	cfg := bus.DefaultConfig()
	cfg.URL, cfg.Name, cfg.NodeCheck = strings.Join(urls, ","), t.Name(), 250*time.Millisecond
	conn, err := bus.Connect(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(conn.Close)
	on := conn.NATS().ConnectedServerName()
	paused := slices.IndexFunc(cfgs, func(c natsserver.ServerConfig) bool { return c.Name == on })
	if paused < 0 {
		t.Fatalf("connected to %q, none of the nodes", on)
	}
	pauseNode(t, nodes[paused])
	stopped := time.Now()
	bound := bus.PingInterval*bus.PingsOut - time.Second
	moved := func() bool {
		nc := conn.NATS()
		return nc.IsConnected() && nc.ConnectedServerName() != on
	}
	if !testutil.Poll(bound, moved) {
		t.Fatalf("the connection is still on %q (connected: %v) %v after node %s stopped, want another node within %v",
			conn.NATS().ConnectedServerName(), conn.NATS().IsConnected(), time.Since(stopped).Round(time.Millisecond), on, bound)
	}
	t.Logf("left node %s for %s %v after it stopped", on, conn.NATS().ConnectedServerName(), time.Since(stopped).Round(time.Millisecond))
	if n := conn.NodesLeft(); n != 1 {
		t.Errorf("the connection left %d nodes for not answering a check, want 1 (the stopped one)", n)
	}
}
