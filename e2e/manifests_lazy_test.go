package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

// A scan of one tablet of a table whose file lists are in manifests
// reads that tablet's manifests and no other: with every other tablet's
// manifests deleted from the metadata bucket, a new client scans the
// first tablet's rows exactly through a coordinator that had not read the
// table before, and a scan of another tablet fails naming its missing
// manifest.
func TestScanLoadsOnlyItsTabletsManifests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl := clustertest.Start(t, ctx, localcluster.Config{Coordinators: 1, Hosts: 1, ServersPerHost: 1, Heartbeat: 200 * time.Millisecond})
	conn := clustertest.Connect(t, ctx, cl.NATSURL(), nil)
	_, meta := clustertest.Stores(t, ctx, conn)
	truth := tablets.GenerateRows(20000)
	icfg := tablets.DefaultIngestConfig()
	icfg.Tablets, icfg.BlockSize, icfg.InlineFileBytes = 4, 256, -1
	tm := clustertest.IngestOn(t, ctx, conn, "lazy", truth, icfg)
	rec, err := meta.Record(ctx, "lazy", tm.GetGeneration())
	if err != nil {
		t.Fatal(err)
	}
	deleted := 0
	for i, tab := range rec.GetTablets() {
		if len(tab.GetManifests()) == 0 || len(tab.GetFiles()) > 0 {
			t.Fatalf("tablet %d keeps %d files inline, %d manifests; want manifests only", i, len(tab.GetFiles()), len(tab.GetManifests()))
		}
		if i == 0 {
			continue
		}
		for _, m := range tab.GetManifests() {
			if err := meta.DeleteManifest(ctx, "lazy", rec.GetGeneration(), [32]byte(m.GetDigest())); err != nil {
				t.Fatal(err)
			}
			deleted++
		}
	}
	// The first tablet's rows: those below the first split point.
	end := 0
	for end < len(truth) && string(truth[end].Key) < string(rec.GetSplitPoints()[0]) {
		end++
	}
	c := clustertest.Client(t, ctx, cl.NATSURL(), nil)
	if wrong, failed := clustertest.CheckScan(ctx, c, "lazy", truth, 0, end, client.ScanOptions{}); wrong != nil || failed != nil {
		t.Fatalf("scan of tablet 0 with the other tablets' %d manifests deleted: %v %v", deleted, wrong, failed)
	}
	_, failed := clustertest.CheckScan(ctx, c, "lazy", truth, end, len(truth), client.ScanOptions{})
	if failed == nil || !strings.Contains(failed.Error(), "tablet 1 manifest g1.m") {
		t.Fatalf("scan of tablets 1-3 without their manifests: %v; want an error naming tablet 1's manifest", failed)
	}
	t.Logf("tablet 0: %d rows; the others: %v", end, failed)
}
