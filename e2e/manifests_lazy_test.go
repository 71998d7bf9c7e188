package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	scanplanev1 "github.com/scanplane/scanplane/api/scanplane/v1"
	"github.com/scanplane/scanplane/api/scanplane/v1/scanplanev1connect"
	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// manifestTable starts a cluster of one coordinator and one host of
// servers scan servers and ingests table: 20 000 generated rows (truth)
// in 4 tablets of 256-byte blocks whose file lists are all in manifests.
// It returns the cluster, its metadata store and the record as stored.
func manifestTable(t *testing.T, ctx context.Context, servers int, table string) (*localcluster.Cluster, *bus.MetaStore, []tablets.Entry, *messages.TableMeta) {
	t.Helper()
	cl := clustertest.Start(t, ctx, localcluster.Config{Coordinators: 1, Hosts: 1, ServersPerHost: servers, Heartbeat: 200 * time.Millisecond})
	conn := clustertest.Connect(t, ctx, cl.NATSURL(), nil)
	_, meta := clustertest.Stores(t, ctx, conn)
	truth := tablets.GenerateRows(20000)
	icfg := tablets.DefaultIngestConfig()
	icfg.Tablets, icfg.BlockSize, icfg.InlineFileBytes = 4, 256, -1
	tm := clustertest.IngestOn(t, ctx, conn, table, truth, icfg)
	rec, err := meta.Record(ctx, table, tm.GetGeneration())
	if err != nil {
		t.Fatal(err)
	}
	return cl, meta, truth, rec
}

// A scan of one tablet of a table whose file lists are in manifests
// reads that tablet's manifests and no other: with every other tablet's
// manifests deleted from the metadata bucket, a new client scans the
// first tablet's rows exactly through a coordinator that had not read the
// table before, and a scan of another tablet fails naming its missing
// manifest.
func TestScanLoadsOnlyItsTabletsManifests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, meta, truth, rec := manifestTable(t, ctx, 1, "lazy")
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

// manifestRelay is a scanplane.v1 server between an API client and a
// real coordinator that relays each Scan, flipping a byte of the first
// manifest (ScanResponse.manifests) when tamper is set.
type manifestRelay struct {
	scanplanev1connect.UnimplementedScanServiceHandler
	up     scanplanev1connect.ScanServiceClient
	tamper bool
}

func (g *manifestRelay) Scan(ctx context.Context, req *connect.Request[scanplanev1.ScanRequest], st *connect.ServerStream[scanplanev1.ScanResponse]) error {
	up, err := g.up.Scan(ctx, connect.NewRequest(req.Msg))
	if err != nil {
		return err
	}
	defer up.Close()
	done := false
	for up.Receive() {
		m := up.Msg()
		if g.tamper && !done && len(m.GetManifests()) > 0 {
			b := bytes.Clone(m.Manifests[0])
			b[len(b)/2] ^= 1
			m.Manifests[0], done = b, true
		}
		if err := st.Send(m); err != nil {
			return err
		}
	}
	return up.Err()
}

// The public API on a table whose file lists are in manifests: a scan
// with proofs carries the small record and every manifest of the
// tablets it reads, once each, in messages the gRPC limit admits; the
// Go API client checks the rows against them (or against the record
// and manifests it reads from NATS with APIReadMeta) and returns the
// table exactly; a manifest changed on the way fails the scan with
// ErrBadProof before any row of its tablet is handed over.
func TestAPIScansManifestTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, _, truth, rec := manifestTable(t, ctx, 2, "lazyapi")
	want := map[[32]byte]bool{}
	for _, id := range tablets.RecordManifests(rec) {
		want[id.Digest] = true
	}

	// The raw stream: the record as stored, every manifest once.
	up := scanplanev1connect.NewScanServiceClient(h2c(), "http://"+cl.HTTPAddr(), connect.WithGRPC())
	st, err := up.Scan(ctx, connect.NewRequest(&scanplanev1.ScanRequest{Table: "lazyapi", Proofs: true}))
	if err != nil {
		t.Fatal(err)
	}
	got := map[[32]byte]int{}
	var record []byte
	for st.Receive() {
		m := st.Msg()
		if m.GetTableRecord() != nil {
			record = m.GetTableRecord()
		}
		for _, d := range m.GetManifests() {
			got[sha256.Sum256(d)]++
			if len(m.GetRows()) > 0 || len(m.GetProofs()) > 0 {
				t.Fatal("a message carries manifests with rows or proofs")
			}
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	st.Close()
	var r messages.TableMeta
	if err := proto.Unmarshal(record, &r); err != nil || !proto.Equal(&r, rec) {
		t.Fatalf("table_record of %d bytes is not the record as stored (%v)", len(record), err)
	}
	for d := range want {
		if got[d] != 1 {
			t.Fatalf("manifest %x sent %d times, want once", d[:4], got[d])
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d manifests sent, the record names %d", len(got), len(want))
	}

	scan := func(addr string, readMeta bool, rng client.Range) ([]tablets.Entry, error) {
		cfg := client.DefaultConfig()
		cfg.API, cfg.NATSURL, cfg.APIReadMeta = []string{addr}, cl.NATSURL(), readMeta
		a, err := client.NewAPI(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		var out []tablets.Entry
		for row, err := range a.All(ctx, "lazyapi", rng, client.ScanOptions{}) {
			if err != nil {
				return out, err
			}
			out = append(out, tablets.Entry{Key: row.Key, Value: row.Value})
		}
		return out, nil
	}
	for _, readMeta := range []bool{false, true} {
		for _, r := range [][2]int{{0, len(truth)}, {7000, 12345}} {
			rng := client.KeyRange(truth[r[0]].Key, nil)
			if r[1] < len(truth) {
				rng = client.KeyRange(truth[r[0]].Key, truth[r[1]].Key)
			}
			rows, err := scan(cl.HTTPAddr(), readMeta, rng)
			if err != nil {
				t.Fatalf("APIReadMeta %v, rows [%d, %d): %v", readMeta, r[0], r[1], err)
			}
			if err := sameRows(rows, truth[r[0]:r[1]]); err != nil {
				t.Fatalf("APIReadMeta %v, rows [%d, %d): %v", readMeta, r[0], r[1], err)
			}
		}
	}

	rows, err := scan(serveAPI(t, &manifestRelay{up: up, tamper: true}), false, client.Range{})
	if !errors.Is(err, tablets.ErrBadProof) || len(rows) > 0 {
		t.Fatalf("a changed manifest: %d rows, %v; want no row and %v", len(rows), err, tablets.ErrBadProof)
	}
	t.Logf("a changed manifest: %v", err)
}
