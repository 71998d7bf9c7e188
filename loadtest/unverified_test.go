package loadtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

// TestUnverifiedScansACopyWithoutRoots: with Config.Unverified the load
// test scans a copy of its table that has no block roots (a scan that
// does not allow unverified rows is refused it), with every row right
// and no error, so its scans were the unverified ones.
func TestUnverifiedScansACopyWithoutRoots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := clustertest.Start(t, ctx, localcluster.Config{Coordinators: 1, Hosts: 1, ServersPerHost: 2, Heartbeat: 200 * time.Millisecond})
	cfg := DefaultConfig()
	cfg.NATS, cfg.Rows, cfg.Tablets, cfg.Clients, cfg.Rate = cl.NATSURL(), 5000, 4, 4, 100
	cfg.Duration, cfg.Warmup = time.Second, 500*time.Millisecond
	cfg.Policies, cfg.Faults = []string{PolicyCurrent}, []string{FaultNone}
	cfg.Unverified = true
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !rep.Workload.Unverified || len(rep.Results) != 1 {
		t.Fatalf("workload %+v, %d results", rep.Workload, len(rep.Results))
	}
	if r := rep.Results[0]; r.Scans == 0 || r.Wrong != 0 || r.Errors != 0 {
		t.Fatalf("scans %d, wrong %d, errors %d (%+v)", r.Scans, r.Wrong, r.Errors, r.ErrorSamples)
	}
	c := clustertest.Client(t, ctx, cl.NATSURL(), nil)
	rng := tablets.Range{End: tablets.RowKey(10)}
	refused := func(table string) {
		t.Helper()
		for _, err := range c.All(ctx, table, rng, client.ScanOptions{}) {
			if !errors.Is(err, client.ErrUnverified) {
				t.Fatalf("scan of %s without AllowUnverified: %v, want ErrUnverified", table, err)
			}
			return
		}
		t.Fatalf("scan of %s without AllowUnverified yielded nothing", table)
	}
	refused(cfg.Table + "-unverified")
	// What the workload's scans read: that copy, unverified rows allowed.
	tg, err := startTarget(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.close()
	if _, err := tg.ensureTable(ctx); err != nil {
		t.Fatal(err)
	}
	if !tg.scanOpts.AllowUnverified {
		t.Fatalf("the workload scans %s with %+v, want unverified rows allowed", tg.scanTable, tg.scanOpts)
	}
	refused(tg.scanTable)
}
