package loadtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
	"github.com/scanplane/scanplane/tablets"
)

// homeHosts returns each tablet's selection key (as the coordinator
// builds it) and its rendezvous home among hosts.
func homeHosts(tm *messages.TableMeta, hosts []string) []string {
	var out []string
	for _, tab := range tm.GetTablets() {
		key := selection.Tablet{Table: tm.GetName(), PrevEndRow: tab.GetRef().GetPrevEndRow(), EndRow: tab.GetRef().GetEndRow()}
		home := hosts[0]
		for _, h := range hosts[1:] {
			if selection.CompareRendezvousHashes(selection.RendezvousHash(key, h, ""), selection.RendezvousHash(key, home, "")) > 0 {
				home = h
			}
		}
		out = append(out, fmt.Sprintf("%q %x %x -> %s", key.Table, key.PrevEndRow, key.EndRow, home))
	}
	return out
}

// TestUnverifiedScansTheSameTablets: on one cluster, a verified run, an
// unverified one and a verified one again. The unverified run scans the
// same table name, as a generation without block roots (a scan that does
// not allow unverified rows is refused it), whose tablets have the
// verified generation's selection keys and home hosts; the verified run
// after it makes the verified generation current again (no re-ingest)
// and scans it, every scan verified (none allows unverified rows, and
// none failed).
func TestUnverifiedScansTheSameTablets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl := clustertest.Start(t, ctx, localcluster.Config{Coordinators: 1, Hosts: 1, ServersPerHost: 2, Heartbeat: 200 * time.Millisecond})
	cfg := DefaultConfig()
	cfg.NATS, cfg.Rows, cfg.Tablets, cfg.Clients, cfg.Rate = cl.NATSURL(), 5000, 4, 4, 100
	cfg.Duration, cfg.Warmup = time.Second, 500*time.Millisecond
	cfg.Policies, cfg.Faults = []string{PolicyCurrent}, []string{FaultNone}
	hosts := []string{"host1", "host2", "host3", "host4", "host5"}

	c := clustertest.Client(t, ctx, cl.NATSURL(), nil)
	rng := tablets.Range{End: tablets.RowKey(10)}
	// verifiedScan: a scan of the table that does not allow unverified
	// rows; nil when it returned the right rows.
	verifiedScan := func() error {
		var tally Tally
		for row, err := range c.All(ctx, cfg.Table, rng, client.ScanOptions{}) {
			if err != nil {
				return err
			}
			tally.Add(row.Key, row.Value)
		}
		return NewVerifier(10).Check(0, 10, tally)
	}
	run := func(unverified bool) {
		t.Helper()
		cfg := cfg
		cfg.Unverified = unverified
		rep, err := Run(ctx, cfg)
		if err != nil {
			t.Fatalf("Run (unverified %v): %v", unverified, err)
		}
		if rep.Workload.Unverified != unverified || len(rep.Results) != 1 {
			t.Fatalf("workload %+v, %d results", rep.Workload, len(rep.Results))
		}
		if r := rep.Results[0]; r.Scans == 0 || r.Wrong != 0 || r.Errors != 0 {
			t.Fatalf("unverified %v: scans %d, wrong %d, errors %d (%+v)", unverified, r.Scans, r.Wrong, r.Errors, r.ErrorSamples)
		}
	}
	tg, err := startTarget(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.close()
	meta, err := tg.conn.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	current := func() *messages.TableMeta {
		t.Helper()
		gen, err := meta.Current(ctx, cfg.Table)
		if err != nil {
			t.Fatal(err)
		}
		tm, err := meta.Get(ctx, cfg.Table, gen)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}

	run(false)
	verified := current()
	if !hasBlockRoots(verified) {
		t.Fatalf("verified run: generation %d has no block roots", verified.GetGeneration())
	}
	want := homeHosts(verified, hosts)

	run(true)
	// What the unverified workload scans: the same table name, unverified
	// rows allowed, its current generation without roots.
	utg, err := startTarget(ctx, func() Config { c := cfg; c.Unverified = true; return c }())
	if err != nil {
		t.Fatal(err)
	}
	defer utg.close()
	if _, err := utg.ensureTable(ctx); err != nil {
		t.Fatal(err)
	}
	if utg.scanTable != cfg.Table || !utg.scanOpts.AllowUnverified {
		t.Fatalf("the unverified workload scans %q with %+v, want %q with unverified rows allowed", utg.scanTable, utg.scanOpts, cfg.Table)
	}
	unverified := current()
	if hasBlockRoots(unverified) || unverified.GetGeneration() <= verified.GetGeneration() {
		t.Fatalf("unverified run scans generation %d (roots %v), verified run %d", unverified.GetGeneration(), hasBlockRoots(unverified), verified.GetGeneration())
	}
	if got := homeHosts(unverified, hosts); !slices.Equal(got, want) {
		t.Fatalf("unverified tablets' keys and homes\n%q\nwant the verified run's\n%q", got, want)
	}
	if err := verifiedScan(); !errors.Is(err, client.ErrUnverified) {
		t.Fatalf("scan of generation %d without AllowUnverified: %v, want ErrUnverified", unverified.GetGeneration(), err)
	}
	// The older unverified generation was deleted; the verified ones kept.
	if gens, err := meta.Generations(ctx, cfg.Table); err != nil || len(gens) != 2 {
		t.Fatalf("generations %v (%v), want the verified and the current unverified one", gens, err)
	}

	run(false)
	again := current()
	if !hasBlockRoots(again) || again.GetGeneration() != verified.GetGeneration() {
		t.Fatalf("verified run after an unverified one scans generation %d (roots %v), want verified generation %d made current again",
			again.GetGeneration(), hasBlockRoots(again), verified.GetGeneration())
	}
	if got := homeHosts(again, hosts); !slices.Equal(got, want) {
		t.Fatalf("verified-again tablets' keys and homes\n%q\nwant\n%q", got, want)
	}
	if err := verifiedScan(); err != nil {
		t.Fatalf("verified scan after the unverified run: %v", err)
	}
}
