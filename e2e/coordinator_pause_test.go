package e2e

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

// TestPausedCoordinatorCostsOneIdleTimeout: a client that discovers a
// cluster of three coordinators sends each tablet's request to its
// owner. One coordinator is SIGSTOPped; the client then scans, one after
// another, the tablets that coordinator owns. The first request waits
// out IdleTimeout and goes elsewhere; the silence it heard marks the
// coordinator lost for the whole client, so every later tablet goes
// straight to a live coordinator (one resend in all, not one per
// tablet; the lease, which outlives the test, plays no part). Every scan
// returns exactly its tablet's rows.
func TestPausedCoordinatorCostsOneIdleTimeout(t *testing.T) {
	clustertest.SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Leases outlive the test's scans: the client learns of the pause
	// from the silence alone, not from the lease expiring.
	cl := clustertest.Start(t, ctx, localcluster.Config{Coordinators: 3, Hosts: 2, ServersPerHost: 1,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 60 * time.Second, CoordinatorArgs: []string{"--lease-ttl", "30s"}})
	truth := tablets.GenerateRows(12000)
	meta := ingest(t, cl.NATSURL(), truth, 12)
	c := clustertest.Client(t, ctx, cl.NATSURL(), nil)
	coords := cl.CoordinatorAddrs()
	testutil.Eventually(t, 30*time.Second, "the client sees three live coordinators", func() bool {
		addrs, lost := c.Coordinators()
		return len(addrs) == 3 && !slices.ContainsFunc(lost, func(w string) bool { return w != "" })
	})
	if wrong, failed := clustertest.CheckScan(ctx, c, table, truth, 0, len(truth), client.ScanOptions{}); wrong != nil || failed != nil {
		t.Fatalf("scan before the pause: %v %v", wrong, failed)
	}

	// The tablets each coordinator owns, as rows [a, b) of truth.
	type span struct{ a, b int }
	owned := map[string][]span{}
	at := 0
	for i, tm := range meta.GetTablets() {
		n := int(tm.GetRows())
		o := tablets.Owner(coords, tablets.Identity(table, meta.GetGeneration(), uint32(i)))
		owned[o] = append(owned[o], span{at, at + n})
		at += n
	}
	victim := slices.MaxFunc(coords, func(x, y string) int { return len(owned[x]) - len(owned[y]) })
	if len(owned[victim]) < 2 {
		t.Fatalf("coordinator %s owns %d tablets; the test needs two", victim, len(owned[victim]))
	}
	vi := slices.Index(coords, victim)
	if err := cl.SignalCoordinator(vi, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cl.SignalCoordinator(vi, syscall.SIGCONT) }()

	resends := 0
	var took []string
	for _, sp := range owned[victim] {
		start := time.Now()
		rng := tablets.Range{Start: truth[sp.a].Key}
		if sp.b < len(truth) {
			rng.End = truth[sp.b].Key
		}
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
		rows := c.Scan(sctx, table, rng, client.ScanOptions{})
		i := sp.a
		for rows.Next() {
			r := rows.Row()
			if i >= sp.b || !bytes.Equal(r.Key, truth[i].Key) || !bytes.Equal(r.Value, truth[i].Value) {
				t.Fatalf("scan %s: wrong row %d: %q", rng, i-sp.a, r.Key)
			}
			i++
		}
		err := rows.Err()
		st := rows.Stats()
		rows.Close()
		scancel()
		if err != nil || i != sp.b {
			t.Fatalf("scan %s with %s paused: %d of %d rows: %v", rng, victim, i-sp.a, sp.b-sp.a, err)
		}
		resends += st.Requests - st.Tablets
		took = append(took, fmt.Sprintf("%v (%d requests)", time.Since(start).Round(time.Millisecond), st.Requests))
	}
	addrs, lost := c.Coordinators()
	why := "(not in the client's list)"
	if i := slices.Index(addrs, victim); i >= 0 {
		why = lost[i]
	}
	t.Logf("%d tablets of paused %s scanned one after another: %s; client says it is lost: %q",
		len(owned[victim]), victim, strings.Join(took, ", "), why)
	if resends != 1 {
		t.Errorf("%d requests sent again over %d tablets of the paused coordinator, want 1 (the first waits out IdleTimeout; the rest know it is silent)",
			resends, len(owned[victim]))
	}
	if !strings.Contains(why, "no answer") {
		t.Errorf("the client says of the paused coordinator %s %q, want it lost for giving no answer", victim, why)
	}
}

// TestClientNATSNodePaused: a client connected to one coordinator's NATS
// node (it learns the others from the node) scans a table it has not read
// before while that coordinator, and so the node, is SIGSTOPped. The read
// of the table's record gets no answer there; the client's connection
// finds the node silent and moves to another, where the record is read;
// the tablets the stopped coordinator owns go to a live coordinator after
// IdleTimeout. The scan returns exactly the table's rows; the time it took
// is logged.
func TestClientNATSNodePaused(t *testing.T) {
	clustertest.SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := clustertest.Start(t, ctx, localcluster.Config{Coordinators: 3, Hosts: 2, ServersPerHost: 1,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 60 * time.Second})
	urls := cl.NATSURLs()
	const victim = 1
	var others []string
	for i, u := range urls {
		if i != victim {
			others = append(others, u)
		}
	}
	c := clustertest.Client(t, ctx, urls[victim], nil)
	warm := tablets.GenerateRows(2000)
	clustertest.Ingest(t, ctx, strings.Join(others, ","), nil, "warm", warm, 3)
	if wrong, failed := clustertest.CheckScan(ctx, c, "warm", warm, 0, len(warm), client.ScanOptions{}); wrong != nil || failed != nil {
		t.Fatalf("scan before the pause: %v %v", wrong, failed)
	}
	if err := cl.SignalCoordinator(victim, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cl.SignalCoordinator(victim, syscall.SIGCONT) }()
	truth := tablets.GenerateRows(12000)
	clustertest.Ingest(t, ctx, strings.Join(others, ","), nil, "fresh", truth, 6)
	start := time.Now()
	sctx, scancel := context.WithTimeout(ctx, 60*time.Second)
	defer scancel()
	if wrong, failed := clustertest.CheckScan(sctx, c, "fresh", truth, 0, len(truth), client.ScanOptions{}); wrong != nil || failed != nil {
		t.Fatalf("scan of a new table with the client's NATS node stopped: %v %v", wrong, failed)
	}
	t.Logf("a new table scanned %v after the scan started, the client's NATS node (coordinator %d) stopped", time.Since(start).Round(time.Millisecond), victim)
}
