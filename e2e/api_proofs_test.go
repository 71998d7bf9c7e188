package e2e

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	scanplanev1 "github.com/scanplane/scanplane/api/scanplane/v1"
	"github.com/scanplane/scanplane/api/scanplane/v1/scanplanev1connect"
	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

// A lie a lyingGateway tells about the row at its target index.
type apiLie int

const (
	lieNone          apiLie = iota
	lieForge                // the row's value is altered
	lieDrop                 // the row is left out (its RowProof counts one row fewer)
	lieAdd                  // a made-up row follows it (its RowProof counts one more)
	lieSwap                 // it and the next row swap places
	lieStrip                // every message goes without its proofs
	lieTruncate             // the stream ends with OK before the row
	lieRecordOld            // the first message names an older generation, with its real record
	lieRecordOldOnce        // lieRecordOld in the first request only: a coordinator behind the current generation, then caught up
)

func (l apiLie) String() string {
	return [...]string{"honest", "forged", "missing", "extra", "reordered", "no-proofs", "truncated", "old-generation", "coordinator-behind"}[l]
}

// lyingGateway is a scanplane.v1 server in the test process between the
// API client and a real coordinator: it forwards each Scan to the
// coordinator's public API and relays the messages, tampered as lie says
// at the transport (the proofs the coordinator sent are kept, adjusted
// where a smarter liar would adjust them).
type lyingGateway struct {
	scanplanev1connect.UnimplementedScanServiceHandler
	up     scanplanev1connect.ScanServiceClient
	lie    apiLie
	target int // the row of the scan the lie is about
	old    *scanplanev1.ScanResponse
	// resumed counts RowProofs that restart a piece mid-way (the
	// coordinator's client resumed it on another scan server).
	resumed atomic.Int64
	// requests counts the Scan calls relayed.
	requests atomic.Int64
}

func (g *lyingGateway) Scan(ctx context.Context, req *connect.Request[scanplanev1.ScanRequest], st *connect.ServerStream[scanplanev1.ScanResponse]) error {
	up, err := g.up.Scan(ctx, connect.NewRequest(req.Msg))
	if err != nil {
		return err
	}
	defer up.Close()
	pos, cov, adj := 0, 0, 0 // the next row's index, rows covered by RowProofs, what the lie changed
	first := true
	oldRecord := g.lie == lieRecordOld || g.lie == lieRecordOldOnce && g.requests.Add(1) == 1
	var prev *scanplanev1.RowProof
	for up.Receive() {
		m := up.Msg()
		if first && oldRecord {
			m.Generation, m.TableRecord = g.old.GetGeneration(), g.old.GetTableRecord()
		}
		first = false
		rows, packed := m.GetRows(), len(m.GetPackedRows()) > 0
		if packed { // the lie is told in the encoding the client asked for
			es, err := tablets.UnpackRows(m.GetPackedRows(), 0)
			if err != nil {
				return err
			}
			for _, e := range es {
				rows = append(rows, &scanplanev1.Row{Key: e.Key, Value: e.Value})
			}
		}
		n := len(rows)
		if i := g.target - pos; i >= 0 && i < len(rows) {
			switch g.lie {
			case lieForge:
				rows[i] = &scanplanev1.Row{Key: rows[i].GetKey(), Value: append(bytes.Clone(rows[i].GetValue()), 'x')}
			case lieDrop:
				rows, adj = slices.Delete(rows, i, i+1), -1
			case lieAdd:
				fake := &scanplanev1.Row{Key: append(bytes.Clone(rows[i].GetKey()), 0), Value: []byte("made up")}
				rows, adj = slices.Insert(rows, i+1, fake), 1
			case lieSwap:
				j := i + 1
				if j == len(rows) {
					j = i - 1
				}
				rows[i], rows[j] = rows[j], rows[i]
			case lieTruncate:
				return nil
			}
		}
		pos += n
		m.Rows = rows
		if packed {
			m.Rows, m.PackedRows = nil, nil
			for _, r := range rows {
				m.PackedRows = tablets.AppendPackedRow(m.PackedRows, r.GetKey(), r.GetValue())
			}
		}
		for _, rp := range m.GetProofs() {
			if rp.GetRestart() && prev != nil && prev.GetTablet() == rp.GetTablet() && !prev.GetFinished() {
				g.resumed.Add(1)
			}
			prev = rp
			n := int(rp.GetRows())
			if g.target >= cov && g.target < cov+n {
				rp.Rows = uint32(n + adj)
			}
			cov += n
		}
		if g.lie == lieStrip {
			m.Proofs = nil
		}
		if err := st.Send(m); err != nil {
			return err
		}
	}
	return up.Err()
}

// start serves g over h2c on a loopback port until t ends and returns
// its address.
func (g *lyingGateway) start(t *testing.T) string {
	t.Helper()
	return serveAPI(t, g)
}

// serveAPI serves h as a scanplane.v1 server over h2c on a loopback
// port until t ends and returns its address.
func serveAPI(t *testing.T, h scanplanev1connect.ScanServiceHandler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(scanplanev1connect.NewScanServiceHandler(h))
	srv := httptest.NewUnstartedServer(mux)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// TestAPIClientCatchesLyingGateway: the rows of a real cluster's public
// API pass through a gateway that tampers with them at the transport: a
// forged value, a missing row, an extra row, two rows swapped, the proofs
// stripped, the stream cut short with OK, an older generation named.
// The Go API client, which asks for proofs by default and reads the
// table's block roots from NATS (APIReadMeta), fails every lying scan
// with tablets.ErrBadProof (the old generation: ErrStaleGeneration) and
// hands over only rows of the ground truth before it; a coordinator that
// names an older generation once, as one behind a re-ingest does, is
// asked again and the scan is exact; through an honest
// relay it returns exactly the table, as it does without NATS (roots
// from the coordinator's record, which still catches the forged value).
func TestAPIClientCatchesLyingGateway(t *testing.T) {
	clustertest.SkipShort(t)
	f := startWith(t, 2, 1, 20000, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	up := scanplanev1connect.NewScanServiceClient(h2c(), "http://"+f.cl.HTTPAddr(), connect.WithGRPC())
	// The first message of a scan with proofs of generation 1, which a
	// re-ingest then makes old.
	old := firstProofMessage(t, ctx, up)
	truth := tablets.GenerateRows(len(f.truth) + 1000)
	f.meta = ingest(t, f.cl.NATSURL(), truth, 4)
	f.truth = truth
	if old.GetGeneration() == 0 || old.GetGeneration() >= f.meta.GetGeneration() {
		t.Fatalf("generation %d, then %d", old.GetGeneration(), f.meta.GetGeneration())
	}
	target := len(f.truth)/3 + 7 // inside a tablet, past the first
	cases := []struct {
		lie      apiLie
		readMeta bool
		want     error
	}{
		{lieNone, true, nil},
		{lieNone, false, nil},
		{lieForge, true, tablets.ErrBadProof},
		{lieForge, false, tablets.ErrBadProof},
		{lieDrop, true, tablets.ErrBadProof},
		{lieAdd, true, tablets.ErrBadProof},
		{lieSwap, true, tablets.ErrBadProof},
		{lieStrip, true, tablets.ErrBadProof},
		{lieTruncate, true, tablets.ErrBadProof},
		{lieRecordOld, true, client.ErrStaleGeneration},
		{lieRecordOldOnce, true, nil},
	}
	for _, tc := range cases {
		name := tc.lie.String()
		if !tc.readMeta {
			name += "/coordinator-record"
		}
		t.Run(name, func(t *testing.T) {
			g := &lyingGateway{up: up, lie: tc.lie, target: target, old: old}
			cfg := client.DefaultConfig()
			cfg.API, cfg.NATSURL, cfg.APIReadMeta = []string{g.start(t)}, f.cl.NATSURL(), tc.readMeta
			a, err := client.NewAPI(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			var got []tablets.Entry
			for row, err := range a.All(ctx, table, client.Range{}, client.ScanOptions{}) {
				if err != nil {
					if tc.want == nil || !errors.Is(err, tc.want) {
						t.Fatalf("after %d rows: %v; want %v", len(got), err, tc.want)
					}
					t.Logf("caught after %d rows: %v", len(got), err)
					break
				}
				got = append(got, tablets.Entry{Key: row.Key, Value: row.Value})
			}
			if tc.want == nil {
				if err := sameRows(got, f.truth); err != nil {
					t.Fatal(err)
				}
				return
			}
			if len(got) > target {
				t.Fatalf("%d rows handed over, past the lie at row %d", len(got), target)
			}
			if err := sameRows(got, f.truth[:len(got)]); err != nil {
				t.Fatalf("rows before the error: %v", err)
			}
		})
	}
}

// firstProofMessage returns the first message of a whole-table scan
// with proofs.
func firstProofMessage(t *testing.T, ctx context.Context, up scanplanev1connect.ScanServiceClient) *scanplanev1.ScanResponse {
	t.Helper()
	st, err := up.Scan(ctx, connect.NewRequest(&scanplanev1.ScanRequest{Table: table, Proofs: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !st.Receive() {
		t.Fatalf("no message: %v", st.Err())
	}
	return st.Msg()
}

// TestAPIClientVerifiesResumedStreams: an API client (APIReadMeta)
// scans a 40 MB table through an honest relay and stops reading for a
// moment at a quarter of it, while the coordinator's client holds
// tablets' streams open mid-piece (its buffers are full); the hosts
// whose scan servers run them (the coordinator's status says so) are
// killed then, all but one. The coordinator's client resumes those streams on the servers
// left after their last row; the API client checks the forwarded proofs
// of the resumed streams (RowProof.restart after rows of the same piece,
// which the relay counts) and returns exactly the table.
func TestAPIClientVerifiesResumedStreams(t *testing.T) {
	clustertest.SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	dataDir := t.TempDir()
	cl := clustertest.Start(t, ctx, localcluster.Config{Hosts: 3, ServersPerHost: 1, DataDir: dataDir,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 60 * time.Second})
	t.Cleanup(func() { logTails(t, dataDir) })
	// 40 MB of rows: more than the coordinator's client buffers and the
	// HTTP/2 windows hold, so that streams wait mid-piece while the
	// caller does not read.
	truth := make([]tablets.Entry, 20000)
	for i := range truth {
		truth[i] = tablets.Entry{Key: tablets.RowKey(i), Value: bytes.Repeat(tablets.RowValue(i)[:40], 50)}
	}
	clustertest.Ingest(t, ctx, cl.NATSURL(), nil, table, truth, 8)
	if err := cl.WaitServers(ctx, 3, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	g := &lyingGateway{up: scanplanev1connect.NewScanServiceClient(h2c(), "http://"+cl.HTTPAddr(), connect.WithGRPC())}
	cfg := client.DefaultConfig()
	cfg.API, cfg.NATSURL, cfg.APIReadMeta = []string{g.start(t)}, cl.NATSURL(), true
	a, err := client.NewAPI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	cfg.API = []string{cl.HTTPAddr()} // the coordinator itself, for its status
	direct, err := client.NewAPI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	rows := a.Scan(ctx, table, client.Range{}, client.ScanOptions{})
	defer rows.Close()
	var got []tablets.Entry
	for rows.Next() {
		got = append(got, tablets.Entry{Key: rows.Row().Key, Value: rows.Row().Value})
		if len(got) == len(truth)/4 {
			killBusyHosts(t, ctx, cl, direct)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("after %d rows: %v", len(got), err)
	}
	if err := sameRows(got, truth); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d mid-piece restarts verified", g.resumed.Load())
	if g.resumed.Load() == 0 {
		t.Fatal("no stream was resumed mid-piece: no open stream was on the killed hosts")
	}
}

// killBusyHosts kills the hosts whose scan servers run scans of the
// coordinator a asks (at most all hosts but one), once one runs any.
func killBusyHosts(t *testing.T, ctx context.Context, cl *localcluster.Cluster, a *client.API) {
	t.Helper()
	var busy []int
	testutil.Eventually(t, time.Minute, "a scan server running a scan", func() bool {
		st, err := a.Status(ctx)
		if err != nil {
			return false
		}
		busy = busy[:0]
		for i := 0; i < cl.Hosts(); i++ {
			for _, s := range st.GetServers() {
				if s.GetHost() == localcluster.HostName(i) && s.GetAlive() && s.GetInFlight() > 0 {
					busy = append(busy, i)
					break
				}
			}
		}
		return len(busy) > 0
	})
	for _, i := range busy[:min(len(busy), cl.Hosts()-1)] {
		t.Logf("killing host %d (%s)", i, localcluster.HostName(i))
		if err := cl.Kill(i); err != nil {
			t.Fatal(err)
		}
	}
}
