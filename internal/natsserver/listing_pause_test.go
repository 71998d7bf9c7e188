package natsserver_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/scanplane/scanplane/bus"
)

// TestListingsWithANodePaused: a connection on a node that runs lists
// a table's manifests and the tables, in a bucket at replicas 3, again
// and again while another node is SIGSTOPped. JetStream puts a
// listing's watcher (an ephemeral consumer) on any replica, the stopped
// node's too, where it delivers nothing: the listing makes another one
// (bus's listEntries) and every listing answers, complete.
func TestListingsWithANodePaused(t *testing.T) {
	t.Parallel()
	nodes, cfgs := startProcCluster(t, 3)
	conn := procDial(t, nodes[0].url, nodes[1].url)
	ctx := ctxFor(t, 3*time.Minute)
	var meta *bus.MetaStore
	if _, err := retry(60*time.Second, func(ctx context.Context) (err error) {
		meta, err = conn.MetaStore(ctx)
		return err
	}); err != nil {
		t.Fatalf("meta bucket: %v", err)
	}
	for i := range 2 {
		d := sha256.Sum256([]byte{byte(i)})
		if _, err := retry(60*time.Second, func(ctx context.Context) error { return meta.PutManifest(ctx, "t", 1, d, []byte("manifest")) }); err != nil {
			t.Fatalf("put manifest: %v", err)
		}
	}
	if _, err := retry(60*time.Second, func(ctx context.Context) error {
		if err := meta.Publish(ctx, tableGen("t", 1), 0); err != nil && !errors.Is(err, bus.ErrConflict) {
			return err // a conflict: an earlier try that timed out was applied
		}
		return nil
	}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	waitReplicasCurrent(t, conn, bus.DefaultConfig().MetaBucket)
	on := conn.NATS().ConnectedServerName()
	const paused = 2 // the connection knows only the other two
	pauseNode(t, nodes[paused])
	// If the stopped node led JetStream's meta group, the listings wait
	// for the next leader.
	waitMetaLeader(t, conn, cfgs[paused].Name)
	t.Logf("connection on %s; %s paused", on, cfgs[paused].Name)
	slow := 0
	for i := range 20 {
		start := time.Now()
		ids, err := meta.Manifests(ctx, "t")
		if err != nil || len(ids) != 2 {
			t.Fatalf("listing %d of the manifests with node %s stopped: %d manifests, %v after %v; want 2",
				i, cfgs[paused].Name, len(ids), err, time.Since(start).Round(time.Millisecond))
		}
		tables, err := meta.Tables(ctx)
		if err != nil || !slices.Equal(tables, []string{"t"}) {
			t.Fatalf("listing %d of the tables with node %s stopped: %q, %v after %v; want [t]",
				i, cfgs[paused].Name, tables, err, time.Since(start).Round(time.Millisecond))
		}
		if time.Since(start) > time.Second {
			slow++
		}
	}
	t.Logf("20 listings of each answered; %d pairs took over a second (a watcher on the stopped node)", slow)
}
