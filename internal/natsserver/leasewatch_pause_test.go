package natsserver_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/messages"
)

// TestLeaseWatchesWithANodePaused: lease watches set up on a node that
// runs while another node is SIGSTOPped all see the leases, also one
// announced after they started. JetStream puts a watcher's consumer on
// any replica, the stopped node's too, where it delivers nothing: a
// watch whose first values do not come within the lease TTL sets up
// another watcher.
func TestLeaseWatchesWithANodePaused(t *testing.T) {
	t.Parallel()
	nodes, cfgs := startProcCluster(t, 3)
	conn := procDial(t, nodes[0].url, nodes[1].url)
	ctx := ctxFor(t, 3*time.Minute)
	cfg := bus.DefaultLeaseConfig()
	var store *bus.LeaseStore
	if _, err := retry(60*time.Second, func(ctx context.Context) (err error) {
		store, err = conn.Leases(ctx, cfg)
		return err
	}); err != nil {
		t.Fatalf("lease bucket: %v", err)
	}
	announce := func(id string) {
		t.Helper()
		var l *bus.Lease
		if _, err := retry(60*time.Second, func(ctx context.Context) (err error) {
			l, err = store.Announce(ctx, &messages.ClusterInfo{MemberId: id, CoordinatorAddress: "127.0.0.1:1001",
				RouterId: "router", Incarnation: "inc-" + id})
			return err
		}); err != nil {
			t.Fatalf("announce %s: %v", id, err)
		}
		t.Cleanup(func() { _ = l.Close() })
	}
	announce("member-a")
	waitReplicasCurrent(t, conn, cfg.Bucket)
	const paused = 2 // the connection knows only the other two
	pauseNode(t, nodes[paused])
	waitMetaLeader(t, conn, cfgs[paused].Name)
	views := make([]*leaseView, 8)
	for i := range views {
		views[i] = &leaseView{}
		if _, err := retry(60*time.Second, func(context.Context) error { return store.Watch(ctx, views[i].fn) }); err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
	}
	announce("member-b")
	start := time.Now()
	for i, v := range views {
		testutil.Eventually(t, 20*time.Second, fmt.Sprintf("watch %d sees both leases with node %s stopped", i, cfgs[paused].Name), func() bool {
			return slices.Equal(v.last(), []string{"member-a", "member-b"})
		})
	}
	t.Logf("%d watches saw both leases %v after the second was announced", len(views), time.Since(start).Round(time.Millisecond))
}
