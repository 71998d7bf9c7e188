package natsserver_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/natsserver"
	"github.com/scanplane/scanplane/internal/testutil"
)

// localCluster starts three nodes that keep the blocks bucket's direct
// gets on their own replica (ServerConfig.LocalDirectGets).
func localCluster(t *testing.T) *testCluster {
	t.Helper()
	tc := newCluster(t, 3, func(_ int, addrs []string) []string { return addrs })
	for i := range tc.cfgs {
		tc.cfgs[i].LocalDirectGets = []string{"KV_" + bus.DefaultConfig().BlocksBucket}
	}
	tc.startAndWait(0, 3)
	return tc
}

// waitDirectGets waits until every node's replica of the blocks bucket
// takes direct gets: a follower subscribes to them once it is nearly
// current.
func waitDirectGets(t testing.TB, tc *testCluster) {
	t.Helper()
	stream := "KV_" + bus.DefaultConfig().BlocksBucket
	testutil.EventuallyErr(t, 30*time.Second, "every replica takes direct gets", func() error {
		for i, n := range tc.nodes {
			if !n.ServesDirectGets(stream) {
				return fmt.Errorf("not %s", tc.cfgs[i].Name)
			}
		}
		return nil
	})
}

// TestDirectGetsStayOnTheNode: on nodes with LocalDirectGets, block reads
// of a client (Get and GetMany, both direct gets) are answered by the
// replica of the node it is connected to: the node receives none of the
// blocks over its routes. Without it a direct get goes to a replica
// picked at random, and two reads in three come back over a route.
func TestDirectGetsStayOnTheNode(t *testing.T) {
	t.Parallel()
	tc := localCluster(t)
	writer := dial(t, tc.nodes[0], func(c *bus.Config) { c.Replicas = 3 })
	bs, err := writer.BlockStore(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := putRandomBlocks(t, bs, 4, 7)
	reader := dial(t, tc.nodes[1], nil)
	rbs, err := reader.BlockStore(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	waitDirectGets(t, tc)
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	const rounds = 10
	before := tc.nodes[1].RouteInBytes()
	for range rounds {
		for k, data := range want {
			got, err := rbs.Get(ctxFor(t, 30*time.Second), k)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("Get %s: %d bytes, %v", k, len(got), err)
			}
		}
		got, err := rbs.GetMany(ctxFor(t, 30*time.Second), keys)
		if err != nil || len(got) != len(keys) {
			t.Fatalf("GetMany: %d of %d, %v", len(got), len(keys), err)
		}
	}
	routed := tc.nodes[1].RouteInBytes() - before
	const block = 48 << 10
	t.Logf("%d blocks read, %d bytes received over the routes meanwhile", 2*rounds*len(want), routed)
	// The routes carry the cluster's own traffic meanwhile (heartbeats,
	// beacons): far less than a block.
	if routed > 2*block {
		t.Errorf("the node received %d bytes over its routes while its client read %d blocks of %d bytes: answers came from other replicas",
			routed, 2*rounds*len(want), block)
	}
}

// TestBlockGetWithoutLocalReplica: a client of a node that holds no
// replica of the blocks bucket (one replica, on another node) gets no
// answer to a direct get there when the nodes keep direct gets local;
// Get reads the block from the stream's leader instead, and a key that
// does not exist is still ErrNotFound.
func TestBlockGetWithoutLocalReplica(t *testing.T) {
	t.Parallel()
	tc := localCluster(t)
	writer := dial(t, tc.nodes[0], func(c *bus.Config) { c.Replicas = 1 })
	bs, err := writer.BlockStore(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := putRandomBlocks(t, bs, 3, 9)
	info, err := kvStreamInfo(ctxFor(t, 30*time.Second), writer, bus.DefaultConfig().BlocksBucket)
	if err != nil {
		t.Fatal(err)
	}
	other := tc.notLeading(info)
	reader := dial(t, tc.nodes[other], nil)
	rbs, err := reader.BlockStore(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	subj := fmt.Sprintf("$JS.API.DIRECT.GET.KV_%s.$KV.%[1]s.t.g1.t0.cafe.b0", bus.DefaultConfig().BlocksBucket)
	if _, err := reader.NATS().Request(subj, nil, 5*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("direct get on %s, which holds no replica (the one is on %s): %v, want no responders", tc.cfgs[other].Name, info.Cluster.Leader, err)
	}
	for k, data := range want {
		got, err := rbs.Get(ctxFor(t, 30*time.Second), k)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get %s through %s: %d bytes, %v; want the block from the stream's leader", k, tc.cfgs[other].Name, len(got), err)
		}
	}
	if _, err := rbs.Get(ctxFor(t, 30*time.Second), "t.g1.t0.cafe.b99"); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("Get of a key never put: %v, want ErrNotFound", err)
	}
}

// TestBlockGetCorruptWithoutLocalReplica: a block damaged on disk on the
// only replica, read through a node that holds none while the nodes keep
// direct gets local. The direct gets that Get tries after the leader's
// read failed find no replica to answer; Get reports ErrCorrupt, not
// the store as unavailable.
func TestBlockGetCorruptWithoutLocalReplica(t *testing.T) {
	skipLongClusterTest(t)
	t.Parallel()
	tc := localCluster(t)
	bucket := bus.DefaultConfig().BlocksBucket
	writer := dial(t, tc.nodes[0], func(c *bus.Config) { c.Replicas = 1 })
	bs, err := writer.BlockStore(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := putRandomBlocks(t, bs, 120, 11)
	info, err := kvStreamInfo(ctxFor(t, 30*time.Second), writer, bucket)
	if err != nil {
		t.Fatal(err)
	}
	other := tc.notLeading(info)
	holder := slices.IndexFunc(tc.cfgs, func(c natsserver.ServerConfig) bool { return c.Name == info.Cluster.Leader })
	// Restart the holder so that it reads blocks from disk, not from the
	// cache it keeps of blocks written recently.
	tc.stop(holder)
	tc.startAndWait(holder, holder+1)
	reader := dial(t, tc.nodes[other], nil)
	testutil.EventuallyErr(t, 30*time.Second, "the blocks' stream led again", func() error {
		info, err := kvStreamInfo(ctxFor(t, 30*time.Second), reader, bucket)
		if err != nil {
			return err
		}
		if info.Cluster == nil || info.Cluster.Leader != tc.cfgs[holder].Name {
			return fmt.Errorf("cluster %+v", info.Cluster)
		}
		return nil
	})
	rbs, err := reader.BlockStore(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range blockFiles(t, tc.cfgs[holder].StoreDir, bucket) {
		flipBytes(t, f, 8, 0.3, 0.7)
	}
	ok, corrupt, _, slowest := readBack(t, rbs, want, false)
	t.Logf("through %s, the one replica on %s damaged: %d keys intact, %d ErrCorrupt; slowest Get %v",
		tc.cfgs[other].Name, tc.cfgs[holder].Name, ok, corrupt, slowest)
	if corrupt == 0 {
		t.Fatal("no Get reported the damage")
	}
}
