package e2e

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	scanplanev1 "github.com/scanplane/scanplane/api/scanplane/v1"
	"github.com/scanplane/scanplane/api/scanplane/v1/scanplanev1connect"
	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/tablets"
)

// heldRelay is a scanplane.v1 server between an API client and a real
// coordinator that relays each Scan as it is, recording of each request
// the manifests it lists as held (ScanRequest.held_manifests) and the
// manifests its responses carried.
type heldRelay struct {
	scanplanev1connect.UnimplementedScanServiceHandler
	up scanplanev1connect.ScanServiceClient

	mu    sync.Mutex
	held  [][][sha256.Size]byte
	sent  [][][sha256.Size]byte
	bytes []int // of the manifests sent, per request
}

func (g *heldRelay) Scan(ctx context.Context, req *connect.Request[scanplanev1.ScanRequest], st *connect.ServerStream[scanplanev1.ScanResponse]) error {
	var held, sent [][sha256.Size]byte
	n := 0
	for _, d := range req.Msg.GetHeldManifests() {
		held = append(held, [sha256.Size]byte(d))
	}
	defer func() {
		g.mu.Lock()
		g.held, g.sent, g.bytes = append(g.held, held), append(g.sent, sent), append(g.bytes, n)
		g.mu.Unlock()
	}()
	up, err := g.up.Scan(ctx, connect.NewRequest(req.Msg))
	if err != nil {
		return err
	}
	defer up.Close()
	for up.Receive() {
		for _, m := range up.Msg().GetManifests() {
			sent = append(sent, sha256.Sum256(m))
			n += len(m)
		}
		if err := st.Send(up.Msg()); err != nil {
			return err
		}
	}
	return up.Err()
}

// last returns what the last request listed as held and was sent, and
// the bytes of the manifests sent.
func (g *heldRelay) last() (held, sent [][sha256.Size]byte, bytes int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held[len(g.held)-1], g.sent[len(g.sent)-1], g.bytes[len(g.bytes)-1]
}

// TestAPIClientHoldsManifests: on a table whose file lists are in
// manifests, the Go API client's first scan lists no manifest as held
// and gets each the record names once; its second scan lists them all
// as held and gets none: with every manifest deleted from the metadata
// store in between, it still returns the table exactly, so the
// coordinator fetched none of them again (its own client and the scan
// server keep the file lists they loaded). A new client, holding none,
// fails with ErrStaleGeneration naming a missing manifest: the
// coordinator must fetch what a client does not hold.
func TestAPIClientHoldsManifests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, meta, truth, rec := manifestTable(t, ctx, 1, "heldapi")
	names := map[[sha256.Size]byte]bool{}
	for _, id := range tablets.RecordManifests(rec) {
		names[id.Digest] = true
	}

	relay := &heldRelay{up: scanplanev1connect.NewScanServiceClient(h2c(), "http://"+cl.HTTPAddr(), connect.WithGRPC())}
	addr := serveAPI(t, relay)
	newAPI := func() *client.API {
		cfg := client.DefaultConfig()
		cfg.API = []string{addr}
		a, err := client.NewAPI(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		return a
	}
	scan := func(a *client.API) ([]tablets.Entry, error) {
		var out []tablets.Entry
		for row, err := range a.All(ctx, "heldapi", client.Range{}, client.ScanOptions{}) {
			if err != nil {
				return out, err
			}
			out = append(out, tablets.Entry{Key: row.Key, Value: row.Value})
		}
		return out, nil
	}
	// every reports whether ds are the record's manifests, each once.
	every := func(ds [][sha256.Size]byte) bool {
		seen := map[[sha256.Size]byte]bool{}
		for _, d := range ds {
			if !names[d] || seen[d] {
				return false
			}
			seen[d] = true
		}
		return len(seen) == len(names)
	}

	a := newAPI()
	rows, err := scan(a)
	if err == nil {
		err = sameRows(rows, truth)
	}
	if err != nil {
		t.Fatalf("first scan: %v", err)
	}
	held, sent, n := relay.last()
	if len(held) != 0 || !every(sent) {
		t.Fatalf("first scan: %d manifests held, %d sent; want none held and the record's %d sent once each", len(held), len(sent), len(names))
	}
	t.Logf("first scan: %d manifests held, %d sent (%d bytes)", len(held), len(sent), n)

	for d := range names {
		if err := meta.DeleteManifest(ctx, "heldapi", rec.GetGeneration(), d); err != nil {
			t.Fatal(err)
		}
	}
	rows, err = scan(a)
	if err == nil {
		err = sameRows(rows, truth)
	}
	if err != nil {
		t.Fatalf("second scan, the manifests deleted from the store: %v", err)
	}
	held, sent, n = relay.last()
	if !every(held) || len(sent) != 0 {
		t.Fatalf("second scan: %d manifests held, %d sent; want the record's %d held and none sent", len(held), len(sent), len(names))
	}
	t.Logf("second scan: %d manifests held, %d sent (%d bytes)", len(held), len(sent), n)

	rows, err = scan(newAPI())
	if !errors.Is(err, client.ErrStaleGeneration) || len(rows) > 0 || !strings.Contains(err.Error(), "manifest") {
		t.Fatalf("a new client, the manifests deleted: %d rows, %v; want no row and ErrStaleGeneration naming a missing manifest", len(rows), err)
	}
	t.Logf("a new client, the manifests deleted: %v", err)
}
