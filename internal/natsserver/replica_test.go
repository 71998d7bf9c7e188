package natsserver_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/testutil"
)

// TestBlockStoreCorruptReplicaReadElsewhere: bytes flipped in the block
// files of one replica (not the leader) of the blocks bucket of a
// three-node cluster, read through a client connected to that node,
// whose direct gets its own replica answers (the nodes keep direct gets
// local: LocalDirectGets). Every Get still returns the value, read
// again from the leader, instead of ErrCorrupt.
func TestBlockStoreCorruptReplicaReadElsewhere(t *testing.T) {
	skipLongClusterTest(t)
	t.Parallel()
	tc := localCluster(t)
	bucket := bus.DefaultConfig().BlocksBucket
	conn := dial(t, tc.nodes[0], func(c *bus.Config) { c.Replicas = 3 })
	bs, err := conn.BlockStore(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := putRandomBlocks(t, bs, 240, 3)
	info, err := kvStreamInfo(ctxFor(t, 30*time.Second), conn, bucket)
	if err != nil {
		t.Fatal(err)
	}
	victim := tc.notLeading(info)
	// Restart the victim so that it reads blocks from disk, not from the
	// cache it keeps of blocks written recently, and wait until its
	// replica is current again.
	tc.stop(victim)
	tc.startAndWait(victim, victim+1)
	testutil.EventuallyErr(t, 30*time.Second, "3 current replicas after the restart", func() error {
		info, err := kvStreamInfo(ctxFor(t, 30*time.Second), conn, bucket)
		if err != nil {
			return err
		}
		if n := currentReplicas(info); n != 3 {
			return fmt.Errorf("%d current", n)
		}
		return nil
	})
	waitDirectGets(t, tc)
	files := blockFiles(t, tc.cfgs[victim].StoreDir, bucket)
	t.Logf("%d block files", len(files))
	for _, f := range files {
		flipBytes(t, f, 64, 0.05, 0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85, 0.95)
	}
	// A server keeps the blocks it read or recovered in memory until
	// 10 s after their last use (nats-server's cache buffer expiration),
	// and nothing shows when it let them go: wait that out, so that the
	// reads below load the damaged bytes from disk.
	<-time.After(11 * time.Second)
	vconn := dial(t, tc.nodes[victim], func(c *bus.Config) { c.Replicas = 3 })
	vbs, err := vconn.BlockStore(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ok, corrupt, _, slowest := readBack(t, vbs, want, false)
	t.Logf("replica on %s damaged (%d block files, 10×64 bytes each), leader %s: %d keys intact, %d ErrCorrupt; slowest Get %v",
		tc.cfgs[victim].Name, len(files), info.Cluster.Leader, ok, corrupt, slowest)
	if corrupt != 0 {
		t.Fatalf("%d of %d Gets ErrCorrupt with two good replicas", corrupt, len(want))
	}
}
