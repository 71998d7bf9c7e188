package e2e

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

// fillTo writes a file into dir until at most leave bytes are free.
func fillTo(t *testing.T, dir string, leave int64) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		if int64(st.Bavail)*int64(st.Bsize) <= leave+int64(len(buf)) {
			return p
		}
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
}

// metric reads one sample of the coordinator's /metrics ("" = absent).
func metric(t *testing.T, cl *localcluster.Cluster, name string) string {
	t.Helper()
	resp, err := cl.HTTPClient().Get(cl.HTTPURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	return ""
}

// TestFullDiskIngestFailsAndClusterRecovers: the coordinator's data
// directory on a 64 MiB disk that something else fills. An ingest that
// does not fit fails with one line; scans of the table already there
// go on; /metrics says the store is out of space; once the space is
// freed, without a restart, the same ingest succeeds and leaves no
// object of the failed one.
func TestFullDiskIngestFailsAndClusterRecovers(t *testing.T) {
	clustertest.SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	disk := testutil.Tmpfs(t, 64<<20)
	cl := clustertest.Start(t, ctx, localcluster.Config{Hosts: 1, ServersPerHost: 1, DataDir: disk,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 60 * time.Second})
	truth := tablets.GenerateRows(20000)
	ingest(t, cl.NATSURL(), truth, 2)
	c := clustertest.Client(t, ctx, cl.NATSURL(), func(cfg *client.Config) { cfg.StallTimeout = time.Second })
	if wrong, failed := clustertest.CheckScan(ctx, c, table, truth, 0, len(truth), client.ScanOptions{}); wrong != nil || failed != nil {
		t.Fatalf("scan before: %v %v", wrong, failed)
	}

	filler := fillTo(t, disk, 4<<20)
	conn := clustertest.Connect(t, ctx, cl.NATSURL(), nil)
	store, meta := clustertest.Stores(t, ctx, conn)
	big := tablets.GenerateRows(200000)
	icfg := tablets.DefaultIngestConfig()
	icfg.Tablets = 4
	_, err := tablets.Ingest(ctx, store, meta, "big", big, icfg)
	if err == nil {
		t.Fatal("an ingest larger than the disk's free space succeeded")
	}
	t.Logf("ingest on a full disk: %v", err)
	if strings.Count(err.Error(), "\n") != 0 {
		t.Errorf("ingest error has several lines: %q", err)
	}
	if v := metric(t, cl, "scanplane_nats_store_out_of_space"); v != "1" {
		t.Errorf("scanplane_nats_store_out_of_space %q while out of space, want 1", v)
	}
	if wrong, failed := clustertest.CheckScan(ctx, c, table, truth, 0, len(truth), client.ScanOptions{}); wrong != nil || failed != nil {
		t.Errorf("scan while the disk is full: %v %v", wrong, failed)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	testutil.Eventually(t, 60*time.Second, "the store to leave out of space after the space was freed", func() bool {
		return metric(t, cl, "scanplane_nats_store_out_of_space") == "0"
	})
	t.Logf("store back %v after the space was freed", time.Since(freed).Round(time.Millisecond))
	if _, err := tablets.Ingest(ctx, store, meta, "big", big, icfg); err != nil {
		t.Fatalf("ingest after the space was freed: %v", err)
	}
	t.Logf("ingest done %v after the space was freed", time.Since(freed).Round(time.Millisecond))
	if wrong, failed := clustertest.CheckScan(ctx, c, "big", big, 0, len(big), client.ScanOptions{}); wrong != nil || failed != nil {
		t.Fatalf("scan of the new table: %v %v", wrong, failed)
	}
	keys, err := store.TableKeys(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	tm, err := meta.Get(ctx, "big", 1)
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, tab := range tm.GetTablets() {
		for _, f := range tab.GetFiles() {
			named[tablets.IndexKey(f.GetId())] = true
			for b := range int(f.GetBlocks()) {
				named[tablets.BlockKey(f.GetId(), b)] = true
			}
		}
	}
	orphans := 0
	for _, k := range keys {
		if !named[k] {
			orphans++
		}
	}
	if orphans != 0 {
		t.Errorf("%d objects of the failed ingest left of %d", orphans, len(keys))
	}
	if v := metric(t, cl, "scanplane_nats_store_restarts_total"); v != "1" {
		t.Errorf("scanplane_nats_store_restarts_total %q, want 1", v)
	}
}
