package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

// killedScanBound is how long a full scan started 2 s after a coordinator
// was killed may take here: a scan that waits for a forwarded request
// nobody answers would take its whole 60 s timeout. (The figures of a
// quiet machine are in MEASUREMENTS.md, "Coordinator loss".)
const killedScanBound = 30 * time.Second

// TestScansAfterCoordinatorKill is `scanctl up`'s cluster (three
// coordinators under supervision, three hosts of two servers, 100 000
// rows in 8 tablets): each coordinator in turn is SIGKILLed and, 2 s
// later, three full scans run one after another, each from a new client
// that finds the coordinators through NATS (as `scanctl scan` does). Every
// scan returns exactly the table's rows, well within its timeout; then
// the supervisor's restart of the coordinator is waited for.
func TestScansAfterCoordinatorKill(t *testing.T) {
	clustertest.SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cl := clustertest.Start(t, ctx, localcluster.Config{Coordinators: 3, Hosts: 3, ServersPerHost: 2,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 90 * time.Second})
	superviseCtx, stopSupervise := context.WithCancel(ctx)
	supervised := make(chan error, 1)
	go func() { supervised <- cl.Supervise(superviseCtx, localcluster.SuperviseConfig{}) }()
	defer func() { stopSupervise(); <-supervised }()

	truth := tablets.GenerateRows(100000)
	ingest(t, cl.NATSURL(), truth, 8)
	for i := range cl.Coordinators() {
		if err := cl.KillCoordinator(i); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		// The scenario's wait: scans start 2 s after the kill.
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		for k := range 3 {
			start := time.Now()
			sctx, scancel := context.WithTimeout(ctx, 60*time.Second)
			c := clustertest.Client(t, sctx, cl.NATSURL(), func(c *client.Config) { c.StallTimeout = time.Second })
			started := time.Since(start)
			wrong, failed := clustertest.CheckScan(sctx, c, table, truth, 0, len(truth), client.ScanOptions{})
			took := time.Since(start)
			scancel()
			c.Close()
			if wrong != nil {
				t.Fatalf("coordinator %d killed %v before: scan %d returned wrong rows: %v", i, start.Sub(killed).Round(time.Millisecond), k, wrong)
			}
			if failed != nil {
				t.Fatalf("coordinator %d killed %v before: scan %d failed after %v: %v", i, start.Sub(killed).Round(time.Millisecond), k, took.Round(time.Millisecond), failed)
			}
			t.Logf("coordinator %d killed, scan %d started %v later: %d rows in %v (client ready after %v)", i, k, start.Sub(killed).Round(time.Millisecond),
				len(truth), took.Round(time.Millisecond), started.Round(time.Millisecond))
			if took > killedScanBound {
				t.Fatalf("coordinator %d killed: scan %d took %v", i, k, took.Round(time.Millisecond))
			}
		}
		if err := cl.WaitCoordinatorBack(ctx, i, 6, 90*time.Second); err != nil {
			t.Fatalf("coordinator %d after the supervisor's restart: %v", i, err)
		}
	}
}
