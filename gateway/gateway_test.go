package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	scanplanev1 "github.com/scanplane/scanplane/api/scanplane/v1"
	"github.com/scanplane/scanplane/api/scanplane/v1/scanplanev1connect"
	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/tablets"
)

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	ok.Client = func() *client.Client { return nil }
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mod  func(*Config)
		says string
	}{
		{func(c *Config) { c.Client = nil }, "Client"},
		{func(c *Config) { c.MaxBatchBytes = 10 }, "MaxBatchBytes 10"},
		{func(c *Config) { c.MaxBatchBytes = 4 << 20 }, "MaxBatchBytes 4194304"},
		{func(c *Config) { c.FlushDelay = 0 }, "FlushDelay 0s"},
		{func(c *Config) { c.MaxScans = 0 }, "MaxScans 0"},
	} {
		c := ok
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Validate: %v; want an error naming %s", err, tc.says)
		}
	}
}

// TestBatcher: rows of random sizes through a batcher to a sender that
// takes at random moments come out all, in order, once, in batches that
// stop growing once they reach the bound; as Row messages and packed.
func TestBatcher(t *testing.T) {
	for _, packed := range []bool{false, true} {
		t.Run(fmt.Sprintf("packed=%v", packed), func(t *testing.T) { testBatcher(t, packed) })
	}
}

func testBatcher(t *testing.T, packed bool) {
	const n, maxBytes = 20000, 4096
	r := rand.New(rand.NewPCG(1, 2))
	want := make([][2][]byte, n)
	for i := range want {
		want[i] = [2][]byte{fmt.Appendf(nil, "k%08d", i), make([]byte, r.IntN(3000))}
	}
	b := newBatcher(maxBytes, packed)
	go func() {
		for _, w := range want {
			if !b.add(context.Background(), w[0], w[1]) {
				return
			}
		}
		b.finish(nil)
	}()
	var got []tablets.Entry
	for {
		if r.IntN(2) == 0 {
			<-b.ready
		}
		msg, fin, err := b.take()
		if packed && len(msg.GetRows()) > 0 || !packed && len(msg.GetPackedRows()) > 0 {
			t.Fatalf("packed %v: a message with %d rows and %d bytes of packed rows", packed, len(msg.GetRows()), len(msg.GetPackedRows()))
		}
		var rows []tablets.Entry
		for _, row := range msg.GetRows() {
			rows = append(rows, tablets.Entry{Key: row.GetKey(), Value: row.GetValue()})
		}
		if p := msg.GetPackedRows(); len(p) > 0 {
			if rows, err = tablets.UnpackRows(p, 0); err != nil {
				t.Fatal(err)
			}
		}
		bytes := 0
		for i, row := range rows {
			if bytes >= maxBytes {
				t.Fatalf("a batch holds row %d after %d bytes, past the bound %d", i, bytes, maxBytes)
			}
			bytes += len(row.Key) + len(row.Value)
		}
		got = append(got, rows...)
		if fin {
			if err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if len(got) != n {
		t.Fatalf("%d rows, want %d", len(got), n)
	}
	for i, row := range got {
		if string(row.Key) != string(want[i][0]) || len(row.Value) != len(want[i][1]) {
			t.Fatalf("row %d is %q, want %q", i, row.Key, want[i][0])
		}
	}
}

// TestBatcherStopsWithContext: a scan whose sender is gone stops adding.
func TestBatcherStopsWithContext(t *testing.T) {
	b := newBatcher(MinBatchBytes, false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan bool)
	go func() { done <- b.add(ctx, []byte("k"), make([]byte, 2*MinBatchBytes)) }()
	cancel()
	if <-done {
		t.Fatal("add returned true with a full batch nobody takes and its context cancelled")
	}
}

func TestCodeOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want connect.Code
	}{
		{fmt.Errorf("x: %w", client.ErrNoTable), connect.CodeNotFound},
		{&client.ScanError{Code: client.CodeNoSuchTable}, connect.CodeNotFound},
		{&client.ScanError{Code: client.CodeBadRequest}, connect.CodeInvalidArgument},
		{&client.ScanError{Code: client.CodeNoServers}, connect.CodeUnavailable},
		{&client.ScanError{Code: client.CodeOverloaded}, connect.CodeResourceExhausted},
		{&client.ScanError{Code: client.CodeDeadlineExceeded}, connect.CodeDeadlineExceeded},
		{&client.ScanError{Code: client.CodeCancelled}, connect.CodeCanceled},
		{&client.ScanError{Code: client.CodeStaleGeneration}, connect.CodeAborted},
		{&client.ScanError{Code: client.CodeCorruptBlock}, connect.CodeDataLoss},
		{&client.ScanError{Code: client.CodeInternal}, connect.CodeInternal},
		{fmt.Errorf("%w: %w", client.ErrNoCoordinator, context.Canceled), connect.CodeCanceled},
		{fmt.Errorf("x: %w", client.ErrNoCoordinator), connect.CodeUnavailable},
		{fmt.Errorf("x: %w", tablets.ErrBadProof), connect.CodeDataLoss},
		{fmt.Errorf("x: %w", client.ErrUnverified), connect.CodeFailedPrecondition},
		{context.DeadlineExceeded, connect.CodeDeadlineExceeded},
		{errors.New("something else"), connect.CodeUnknown},
	} {
		if got := CodeOf(tc.err); got != tc.want {
			t.Errorf("CodeOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// serve starts s on an HTTP test server and returns a Connect client.
func serve(t *testing.T, cfg Config) scanplanev1connect.ScanServiceClient {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	s.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return scanplanev1connect.NewScanServiceClient(srv.Client(), srv.URL)
}

func scanErr(c scanplanev1connect.ScanServiceClient, req *scanplanev1.ScanRequest) error {
	st, err := c.Scan(context.Background(), connect.NewRequest(req))
	if err != nil {
		return err
	}
	defer st.Close()
	for st.Receive() {
	}
	return st.Err()
}

// TestScanChecks: bad requests, a denied table and a missing client are
// answered with their codes before any row is read.
func TestScanChecks(t *testing.T) {
	var (
		mu    sync.Mutex
		asked []string
	)
	cfg := DefaultConfig()
	cfg.Client = func() *client.Client { return nil }
	cfg.MayScan = func(p Principal, table string) error {
		mu.Lock()
		asked = append(asked, table)
		mu.Unlock()
		if table == "secret" {
			return fmt.Errorf("principal %q may not scan table %q", p.Name, table)
		}
		return nil
	}
	c := serve(t, cfg)
	for _, tc := range []struct {
		req  *scanplanev1.ScanRequest
		code connect.Code
		says string
	}{
		{&scanplanev1.ScanRequest{Table: ""}, connect.CodeInvalidArgument, "empty table name"},
		{&scanplanev1.ScanRequest{Table: "a/b"}, connect.CodeInvalidArgument, `"a/b"`},
		{&scanplanev1.ScanRequest{Table: "t", Start: []byte("z"), End: []byte("a")}, connect.CodeInvalidArgument, "start z is after end a"},
		{&scanplanev1.ScanRequest{Table: "t", Limit: -1}, connect.CodeInvalidArgument, "limit -1"},
		{&scanplanev1.ScanRequest{Table: "t", HeldManifests: [][]byte{make([]byte, 32), []byte("short")}}, connect.CodeInvalidArgument,
			"held_manifests[1] has 5 bytes"},
		{&scanplanev1.ScanRequest{Table: "t", HeldManifests: make([][]byte, MaxHeldManifests+1)}, connect.CodeInvalidArgument,
			"held_manifests lists 4097 manifests"},
		{&scanplanev1.ScanRequest{Table: "secret"}, connect.CodePermissionDenied, `may not scan table "secret"`},
		{&scanplanev1.ScanRequest{Table: "t"}, connect.CodeUnavailable, "(re)starting"},
	} {
		err := scanErr(c, tc.req)
		if connect.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("scan %v: %v; want code %v naming %s", tc.req, err, tc.code, tc.says)
		}
		if len(tc.req.GetHeldManifests()) > 0 {
			continue // a Count has no held_manifests
		}
		m := tc.req
		_, err = c.Count(context.Background(), connect.NewRequest(&scanplanev1.CountRequest{Table: m.GetTable(), Start: m.GetStart(),
			End: m.GetEnd(), Limit: m.GetLimit()}))
		if connect.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("count %v: %v; want code %v naming %s", tc.req, err, tc.code, tc.says)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(asked, ",") != "secret,secret,t,t" {
		t.Errorf("MayScan asked for %q; want secret,secret,t,t (every valid scan and count, before the client)", asked)
	}
}

// TestMaxScans: a scan past MaxScans is refused with RESOURCE_EXHAUSTED
// while the others run, and its slot is free again once one ends.
func TestMaxScans(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	cfg := DefaultConfig()
	cfg.MaxScans = 1
	cfg.Client = func() *client.Client { return nil }
	cfg.MayScan = func(_ Principal, table string) error {
		if table == "hold" {
			entered <- struct{}{}
			<-release
		}
		return nil
	}
	c := serve(t, cfg)
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the server's cleanup, which waits for the held scan
	held := make(chan error, 1)
	go func() { held <- scanErr(c, &scanplanev1.ScanRequest{Table: "hold"}) }()
	<-entered
	if err := scanErr(c, &scanplanev1.ScanRequest{Table: "t"}); connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "1 scans running") {
		t.Fatalf("second scan with MaxScans 1: %v; want RESOURCE_EXHAUSTED naming 1 scans running", err)
	}
	if _, err := c.Count(context.Background(), connect.NewRequest(&scanplanev1.CountRequest{Table: "t"})); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("a count with MaxScans 1 and a scan running: %v; want RESOURCE_EXHAUSTED", err)
	}
	free()
	if err := <-held; connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("held scan: %v; want UNAVAILABLE (no client)", err)
	}
	if err := scanErr(c, &scanplanev1.ScanRequest{Table: "t"}); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("scan after the slot was freed: %v; want UNAVAILABLE (no client)", err)
	}
}

// TestBatcherManifests: manifests queued before a proof go out before
// it, in messages of their own of at most
// MaxMessageBytes (or one manifest), in order, each once; the first
// carries the table record.
func TestBatcherManifests(t *testing.T) {
	b := newBatcher(MaxMessageBytes, false)
	var mans [][]byte
	for i := range 9 {
		mans = append(mans, bytes.Repeat([]byte{byte(i)}, 700<<10+i))
	}
	mans = append(mans, make([]byte, MaxMessageBytes+1)) // alone in its message
	go func() {
		ctx := context.Background()
		b.setTable(7, []byte("record"))
		if !b.add(ctx, []byte("a"), []byte("1")) || !b.manifests(ctx, mans) {
			return
		}
		b.proof([]*scanplanev1.RowProof{{Rows: 1}})
		b.finish(nil)
	}()
	// The first take finds the producer waiting with more than
	// MaxMessageBytes of manifests pending.
	testutil.Eventually(t, time.Minute, "manifests filling the batch", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.bytes >= b.max
	})
	var got [][]byte
	var rows []*scanplanev1.Row
	msgs := 0
	for {
		<-b.ready
		msg, fin, err := b.take()
		if msg != nil {
			msgs++
			if msgs == 1 && (msg.GetGeneration() != 7 || string(msg.GetTableRecord()) != "record") {
				t.Fatalf("the first message has generation %d, record %q", msg.GetGeneration(), msg.GetTableRecord())
			}
			size := len(msg.GetTableRecord())
			for _, m := range msg.GetManifests() {
				size += len(m)
			}
			if len(msg.GetManifests()) > 1 && size > MaxMessageBytes {
				t.Fatalf("a message of %d manifests has %d bytes, over %d", len(msg.GetManifests()), size, MaxMessageBytes)
			}
			if len(msg.GetManifests()) > 0 && (len(msg.GetRows()) > 0 || len(msg.GetProofs()) > 0) {
				t.Fatal("a message carries manifests with rows or proofs")
			}
			if len(msg.GetProofs()) > 0 && len(got) != len(mans) {
				t.Fatalf("the proof sent after %d of %d manifests", len(got), len(mans))
			}
			got = append(got, msg.GetManifests()...)
			rows = append(rows, msg.GetRows()...)
		}
		if fin {
			if err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if len(got) != len(mans) || len(rows) != 1 {
		t.Fatalf("%d manifests, %d rows; want %d, 1", len(got), len(rows), len(mans))
	}
	for i := range mans {
		if !bytes.Equal(got[i], mans[i]) {
			t.Fatalf("manifest %d differs", i)
		}
	}
}
