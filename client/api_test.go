package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	scanplanev1 "github.com/scanplane/scanplane/api/scanplane/v1"
	"github.com/scanplane/scanplane/api/scanplane/v1/scanplanev1connect"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/tablets"
)

// apiServer is a scanplane.v1 server over h2c for the API client's
// tests: it serves the rows of truth in messages of batch rows, and
// after breakAfter rows of a scan (0: never) aborts the connection, or
// answers fail instead when set. It records the requests it got.
type apiServer struct {
	scanplanev1connect.UnimplementedScanServiceHandler
	truth      []tablets.Entry
	batch      int
	breakAfter int
	fail       func() error
	reorder    bool     // send the first two rows swapped
	peers      []string // the HTTP addresses Status lists, besides its own
	// rowsOnly: ignore ScanRequest.packed_rows (an older server); mangle
	// changes each packed message before it is sent.
	rowsOnly bool
	mangle   func(*scanplanev1.ScanResponse)

	mu   sync.Mutex
	reqs []*scanplanev1.ScanRequest
	auth []string
	addr string
}

func (s *apiServer) requests() []*scanplanev1.ScanRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*scanplanev1.ScanRequest(nil), s.reqs...)
}

func (s *apiServer) Scan(ctx context.Context, req *connect.Request[scanplanev1.ScanRequest], st *connect.ServerStream[scanplanev1.ScanResponse]) error {
	m := req.Msg
	s.mu.Lock()
	s.reqs = append(s.reqs, m)
	s.auth = append(s.auth, req.Header().Get("Authorization"))
	s.mu.Unlock()
	if s.fail != nil {
		return s.fail()
	}
	rng := tablets.Range{Start: m.GetStart(), End: m.GetEnd()}
	var out []*scanplanev1.Row
	sent := 0
	for _, e := range s.truth {
		if !rng.Contains(e.Key) {
			continue
		}
		if m.GetLimit() > 0 && int64(sent) >= m.GetLimit() {
			break
		}
		if s.breakAfter > 0 && sent == s.breakAfter {
			if len(out) > 0 {
				if err := s.send(st, m, out); err != nil {
					return err
				}
			}
			panic(http.ErrAbortHandler) // the connection breaks mid-stream
		}
		out = append(out, &scanplanev1.Row{Key: e.Key, Value: e.Value})
		sent++
		if len(out) == s.batch {
			if s.reorder && sent == len(out) && len(out) > 1 {
				out[0], out[1] = out[1], out[0]
			}
			if err := s.send(st, m, out); err != nil {
				return err
			}
			out = nil
		}
	}
	if len(out) > 0 {
		return s.send(st, m, out)
	}
	return nil
}

// send sends rows in one message: packed if the request asks and s is
// not rowsOnly.
func (s *apiServer) send(st *connect.ServerStream[scanplanev1.ScanResponse], req *scanplanev1.ScanRequest, rows []*scanplanev1.Row) error {
	if !req.GetPackedRows() || s.rowsOnly {
		return st.Send(&scanplanev1.ScanResponse{Rows: rows})
	}
	m := &scanplanev1.ScanResponse{}
	for _, r := range rows {
		m.PackedRows = tablets.AppendPackedRow(m.PackedRows, r.GetKey(), r.GetValue())
	}
	if s.mangle != nil {
		s.mangle(m)
	}
	return st.Send(m)
}

func (s *apiServer) ListTables(context.Context, *connect.Request[scanplanev1.ListTablesRequest]) (*connect.Response[scanplanev1.ListTablesResponse], error) {
	if s.fail != nil {
		return nil, s.fail()
	}
	return connect.NewResponse(&scanplanev1.ListTablesResponse{Tables: []*scanplanev1.Table{{Name: "t", Rows: uint64(len(s.truth))}}}), nil
}

func (s *apiServer) Status(context.Context, *connect.Request[scanplanev1.StatusRequest]) (*connect.Response[scanplanev1.StatusResponse], error) {
	st := &scanplanev1.StatusResponse{MemberId: s.addr}
	for _, p := range append([]string{s.addr}, s.peers...) {
		st.Coordinators = append(st.Coordinators, &scanplanev1.Coordinator{MemberId: p, HttpAddress: p})
	}
	return connect.NewResponse(st), nil
}

// start serves s over h2c on a loopback port until t ends and returns
// its address.
func (s *apiServer) start(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(scanplanev1connect.NewScanServiceHandler(s))
	srv := httptest.NewUnstartedServer(mux)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Config.ErrorLog = nil
	srv.Start()
	t.Cleanup(srv.Close)
	s.addr = srv.Listener.Addr().String()
	return s.addr
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func newTestAPI(t *testing.T, mod func(*Config), addrs ...string) *API {
	t.Helper()
	cfg := DefaultConfig()
	cfg.API = addrs
	cfg.CoordinatorWait = 300 * time.Millisecond
	if mod != nil {
		mod(&cfg)
	}
	a, err := NewAPI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// plainRows: the scan asks for rows without proofs, which the test
// servers of this file do not make (the e2e tests scan with proofs).
var plainRows = ScanOptions{AllowUnverified: true}

// readAll reads rows to the end and returns them and the scan's error.
func readAll(rows *APIRows) ([]tablets.Entry, error) {
	defer rows.Close()
	var got []tablets.Entry
	for rows.Next() {
		got = append(got, tablets.Entry{Key: rows.Row().Key, Value: rows.Row().Value})
	}
	return got, rows.Err()
}

func sameEntries(got, want []tablets.Entry) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d rows, want %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i].Key, want[i].Key) || !bytes.Equal(got[i].Value, want[i].Value) {
			return fmt.Errorf("row %d is %q, want %q", i, got[i].Key, want[i].Key)
		}
	}
	return nil
}

// TestAPIScanFailsOver: a scan whose first address is down goes to the
// next before any row; one whose coordinator breaks the connection after
// rows resumes on the next address after the last key received; with a
// limit, the rows still wanted. Every scan returns exactly its rows.
func TestAPIScanFailsOver(t *testing.T) {
	truth := tablets.GenerateRows(5000)
	broken := &apiServer{truth: truth, batch: 100, breakAfter: 1234}
	good := &apiServer{truth: truth, batch: 100}
	b, g, dead := broken.start(t), good.start(t), deadAddr(t)
	ctx := context.Background()

	a := newTestAPI(t, nil, dead, g)
	got, err := readAll(a.Scan(ctx, "t", Range{}, plainRows))
	if err == nil {
		err = sameEntries(got, truth)
	}
	if err != nil {
		t.Fatalf("scan with the first address down: %v", err)
	}

	for _, tc := range []struct {
		name         string
		a, b         int
		limit        uint64
		resumeLimit  int64
		wantRequests int
	}{
		{"whole table", 0, len(truth), 0, 0, 2},
		{"range", 100, 4000, 0, 0, 2},
		{"limit", 100, 2100, 2000, 2000 - 1234, 2},
		{"within the first break", 10, 500, 0, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(good.requests())
			a := newTestAPI(t, nil, b, g)
			rng := Range{Start: truth[tc.a].Key}
			if tc.b < len(truth) && tc.limit == 0 {
				rng.End = truth[tc.b].Key
			}
			rows := a.Scan(ctx, "t", rng, ScanOptions{Limit: tc.limit, AllowUnverified: true})
			got, err := readAll(rows)
			if err == nil {
				err = sameEntries(got, truth[tc.a:tc.b])
			}
			if err != nil {
				t.Fatal(err)
			}
			st := rows.Stats()
			if st.Requests != tc.wantRequests || st.Resumes != tc.wantRequests-1 || st.Rows != uint64(tc.b-tc.a) {
				t.Fatalf("stats %+v; want %d requests, %d resumes", st, tc.wantRequests, tc.wantRequests-1)
			}
			if tc.wantRequests == 1 {
				return
			}
			reqs := good.requests()[before:]
			want := append(bytes.Clone(truth[tc.a+1233].Key), 0)
			if len(reqs) != 1 || !bytes.Equal(reqs[0].GetStart(), want) || !bytes.Equal(reqs[0].GetEnd(), rng.End) || reqs[0].GetLimit() != tc.resumeLimit {
				t.Fatalf("resumed with %v; want one request from %q (the last key received, then 0) with limit %d", reqs, want, tc.resumeLimit)
			}
		})
	}

	// MaxResumes 0: the broken stream is an error after the rows before it.
	a = newTestAPI(t, func(c *Config) { c.MaxResumes = 0 }, b, g)
	got, err = readAll(a.Scan(ctx, "t", Range{}, plainRows))
	if !errors.Is(err, ErrResumeLimit) || len(got) != 1234 || sameEntries(got, truth[:1234]) != nil {
		t.Fatalf("MaxResumes 0: %d rows, %v; want the 1234 rows before the break, then ErrResumeLimit", len(got), err)
	}
}

// TestAPIErrors: errors come back as the client's sentinels; an error
// the coordinator answered is not sent to another address; with no
// address up the call fails with ErrNoCoordinator after CoordinatorWait;
// rows out of order are refused; bad input fails before any IO.
func TestAPIErrors(t *testing.T) {
	truth := tablets.GenerateRows(300)
	ctx := context.Background()
	withReason := func(code connect.Code, reason, msg string) func() error {
		return func() error {
			e := connect.NewError(code, errors.New(msg))
			if reason != "" {
				d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: reason, Domain: APIErrorDomain})
				if err != nil {
					panic(err)
				}
				e.AddDetail(d)
			}
			return e
		}
	}
	for _, tc := range []struct {
		name  string
		fail  func() error
		want  []error
		scans int // requests the second address gets
	}{
		{"permission denied", withReason(connect.CodePermissionDenied, "PERMISSION_DENIED", `principal "alice" may not scan table "t"`), []error{ErrPermissionDenied}, 0},
		{"no table", withReason(connect.CodeNotFound, "NO_SUCH_TABLE", "no table t"), []error{ErrNoTable, ErrScan}, 0},
		{"no table, no detail", withReason(connect.CodeNotFound, "", "no table t"), []error{ErrNoTable}, 0},
		{"no servers", withReason(connect.CodeUnavailable, "NO_SERVERS", "no servers"), []error{ErrNoServers, ErrScan}, 0},
		{"bad proof", withReason(connect.CodeDataLoss, "BAD_PROOF", "bad proof"), []error{tablets.ErrBadProof}, 0},
		{"unauthenticated", withReason(connect.CodeUnauthenticated, "", "no certificate"), []error{ErrUnauthenticated}, 0},
		{"shutting down", withReason(connect.CodeUnavailable, "SHUTTING_DOWN", "stopping"), nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := &apiServer{truth: truth, batch: 10, fail: tc.fail}
			second := &apiServer{truth: truth, batch: 10}
			a := newTestAPI(t, nil, first.start(t), second.start(t))
			got, err := readAll(a.Scan(ctx, "t", Range{}, plainRows))
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("scan: %v; want it to match %v", err, w)
				}
			}
			if tc.want == nil && (err != nil || sameEntries(got, truth) != nil) {
				t.Errorf("scan: %d rows, %v; want every row from the second address", len(got), err)
			}
			if tc.want != nil && (len(got) != 0 || strings.Contains(err.Error(), "\n")) {
				t.Errorf("scan: %d rows, %q; want no row and one line", len(got), err)
			}
			if n := len(second.requests()); n != tc.scans {
				t.Errorf("the second address got %d scans, want %d", n, tc.scans)
			}
			_, err = a.ListTables(ctx)
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("ListTables: %v; want it to match %v", err, w)
				}
			}
		})
	}

	t.Run("no address up", func(t *testing.T) {
		a := newTestAPI(t, nil, deadAddr(t), deadAddr(t))
		t0 := time.Now()
		_, err := readAll(a.Scan(ctx, "t", Range{}, plainRows))
		if !errors.Is(err, ErrNoCoordinator) || time.Since(t0) < 300*time.Millisecond {
			t.Fatalf("scan with no address up: %v after %v; want ErrNoCoordinator after CoordinatorWait", err, time.Since(t0))
		}
		if _, err := a.Status(ctx); !errors.Is(err, ErrNoCoordinator) {
			t.Fatalf("Status with no address up: %v; want ErrNoCoordinator", err)
		}
	})

	t.Run("out of order", func(t *testing.T) {
		s := &apiServer{truth: truth, batch: 10, reorder: true}
		a := newTestAPI(t, nil, s.start(t))
		_, err := readAll(a.Scan(ctx, "t", Range{}, plainRows))
		if !errors.Is(err, ErrStream) || !strings.Contains(err.Error(), "out of order") {
			t.Fatalf("rows out of order: %v; want ErrStream", err)
		}
	})

	t.Run("cancelled", func(t *testing.T) {
		s := &apiServer{truth: truth, batch: 10}
		a := newTestAPI(t, nil, s.start(t))
		cctx, cancel := context.WithCancel(ctx)
		rows := a.Scan(cctx, "t", Range{}, plainRows)
		defer rows.Close()
		if !rows.Next() {
			t.Fatal(rows.Err())
		}
		cancel()
		for rows.Next() {
		}
		if !errors.Is(rows.Err(), context.Canceled) {
			t.Fatalf("cancelled scan: %v; want context.Canceled", rows.Err())
		}
	})

	t.Run("bad input", func(t *testing.T) {
		s := &apiServer{truth: truth, batch: 10}
		a := newTestAPI(t, nil, s.start(t))
		for _, tc := range []struct {
			table string
			rng   Range
			opts  ScanOptions
			want  error
		}{
			{"bad name!", Range{}, ScanOptions{}, tablets.ErrBadName},
			{"t", Range{Start: []byte("b"), End: []byte("a")}, ScanOptions{}, tablets.ErrBadRange},
		} {
			if _, err := readAll(a.Scan(ctx, tc.table, tc.rng, tc.opts)); !errors.Is(err, tc.want) {
				t.Errorf("scan %q %s %+v: %v; want %v", tc.table, tc.rng, tc.opts, err, tc.want)
			}
		}
		if n := len(s.requests()); n != 0 {
			t.Errorf("bad input sent %d requests", n)
		}
	})
}

// TestAPIConfig: NewAPI names a bad address, refuses a token without
// TLS, and sends the token when set; ListTables and Status answer.
func TestAPIConfig(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.API = []string{"127.0.0.1:8091", "nohost"} }, `API[1] "nohost"`},
		{func(c *Config) { c.APIToken = "secret" }, "APIToken needs Config.TLS"},
	} {
		cfg := DefaultConfig()
		cfg.API = []string{"127.0.0.1:8091"}
		tc.mod(&cfg)
		if _, err := NewAPI(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewAPI: %v; want an error naming %s", err, tc.want)
		}
	}

	cfg := DefaultConfig()
	a, err := NewAPI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	if got := strings.Join(a.Addrs(), ","); got != DefaultAPIAddrs {
		t.Errorf("NewAPI without Config.API tries %s; want DefaultAPIAddrs %s", got, DefaultAPIAddrs)
	}

	s := &apiServer{truth: tablets.GenerateRows(10), batch: 10}
	addr := s.start(t)
	a = newTestAPI(t, nil, deadAddr(t), addr)
	tbs, err := a.ListTables(context.Background())
	if err != nil || len(tbs) != 1 || tbs[0].GetRows() != 10 {
		t.Fatalf("ListTables: %v, %v", tbs, err)
	}
	st, err := a.Status(context.Background())
	if err != nil || st.GetMemberId() != addr {
		t.Fatalf("Status: %v, %v; want the answer of %s", st, err, addr)
	}
}

// TestAPIBearerToken: the token goes in the Authorization header of
// every call, over TLS only.
func TestAPIBearerToken(t *testing.T) {
	s := &apiServer{truth: tablets.GenerateRows(10), batch: 10}
	mux := http.NewServeMux()
	mux.Handle(scanplanev1connect.NewScanServiceHandler(s))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	tlsCfg := srv.Client().Transport.(*http.Transport).TLSClientConfig
	a := newTestAPI(t, func(c *Config) { c.TLS, c.APIToken = tlsCfg, "tok123" }, srv.Listener.Addr().String())
	got, err := readAll(a.Scan(context.Background(), "t", Range{}, plainRows))
	if err != nil || len(got) != 10 {
		t.Fatalf("scan over TLS: %d rows, %v", len(got), err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.auth) != 1 || s.auth[0] != "Bearer tok123" {
		t.Fatalf("Authorization headers %q; want Bearer tok123", s.auth)
	}
}

// TestConfigFromEnvAPI: SCANPLANE_API sets Config.API; a bad address is
// an error naming the variable and the address.
func TestConfigFromEnvAPI(t *testing.T) {
	t.Setenv(NATSEnv, "")
	t.Setenv(SecretsEnv, "")
	t.Setenv(APIEnv, "10.0.0.1:8091, coord-2:8093")
	cfg, err := ConfigFromEnv()
	if err != nil || len(cfg.API) != 2 || cfg.API[0] != "10.0.0.1:8091" || cfg.API[1] != "coord-2:8093" {
		t.Fatalf("API %q, %v", cfg.API, err)
	}
	t.Setenv(APIEnv, "10.0.0.1:8091,nohost")
	if _, err := ConfigFromEnv(); err == nil || !strings.Contains(err.Error(), `SCANPLANE_API="10.0.0.1:8091,nohost": "nohost"`) {
		t.Fatalf("bad SCANPLANE_API: %v", err)
	}
}

// TestAPIDiscovers: a client given one address learns the other live
// coordinators' HTTP addresses from its Status answer (not a wildcard
// address, which it cannot dial) once it answered; when that address
// breaks a scan mid-stream, or is gone, the scan goes on at a
// discovered address after the last key and returns exactly its rows.
// A client that discovers nothing fails with ErrNoCoordinator naming
// the address it tried.
func TestAPIDiscovers(t *testing.T) {
	truth := tablets.GenerateRows(5000)
	good := &apiServer{truth: truth, batch: 100}
	g := good.start(t)
	seed := &apiServer{truth: truth, batch: 100, breakAfter: 1234, peers: []string{"0.0.0.0:8091", "[::]:8093", g}}
	sd := seed.start(t)
	ctx := context.Background()

	a := newTestAPI(t, nil, sd)
	if _, err := a.ListTables(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "the other coordinator discovered", func() bool { return len(a.Addrs()) == 2 })
	if got := a.Addrs(); got[0] != sd || got[1] != g {
		t.Fatalf("Addrs %v; want the configured %s, then the discovered %s", got, sd, g)
	}
	rows := a.Scan(ctx, "t", Range{}, plainRows)
	got, err := readAll(rows)
	if err == nil {
		err = sameEntries(got, truth)
	}
	if err != nil {
		t.Fatalf("scan broken mid-stream by the configured address: %v", err)
	}
	if st := rows.Stats(); st.Resumes != 1 || len(good.requests()) != 1 {
		t.Fatalf("stats %+v, %d requests to the discovered address; want one resume there", st, len(good.requests()))
	}

	// Nothing to discover: the broken stream resumes on the one address,
	// which is then gone.
	lone := &apiServer{truth: truth, batch: 100, breakAfter: 1234}
	l := lone.start(t)
	b := newTestAPI(t, func(c *Config) { c.MaxResumes = 0 }, l)
	got, err = readAll(b.Scan(ctx, "t", Range{}, plainRows))
	if !errors.Is(err, ErrResumeLimit) || sameEntries(got, truth[:1234]) != nil {
		t.Fatalf("one address, MaxResumes 0: %d rows, %v; want the rows before the break, then ErrResumeLimit", len(got), err)
	}
	c := newTestAPI(t, nil, deadAddr(t))
	if _, err := readAll(c.Scan(ctx, "t", Range{}, plainRows)); !errors.Is(err, ErrNoCoordinator) || !strings.Contains(err.Error(), c.Addrs()[0]) {
		t.Fatalf("one dead address: %v; want ErrNoCoordinator naming it", err)
	}
}

// TestAPIRowEncodings: the client asks for packed rows and reads them,
// or Row messages from a server that ignores the request field; a
// message with both, or packed rows that do not decode, fails the scan
// with ErrStream after only the rows before it.
func TestAPIRowEncodings(t *testing.T) {
	truth := tablets.GenerateRows(3000)
	ctx := context.Background()
	for _, rowsOnly := range []bool{false, true} {
		s := &apiServer{truth: truth, batch: 128, rowsOnly: rowsOnly}
		a := newTestAPI(t, nil, s.start(t))
		got, err := readAll(a.Scan(ctx, "t", Range{}, plainRows))
		if err == nil {
			err = sameEntries(got, truth)
		}
		if err != nil {
			t.Fatalf("rowsOnly %v: %v", rowsOnly, err)
		}
		if reqs := s.requests(); len(reqs) != 1 || !reqs[0].GetPackedRows() {
			t.Fatalf("rowsOnly %v: requests %v; want one asking for packed rows", rowsOnly, reqs)
		}
	}
	for name, mangle := range map[string]func(*scanplanev1.ScanResponse){
		"both":      func(m *scanplanev1.ScanResponse) { m.Rows = []*scanplanev1.Row{{Key: []byte("k")}} },
		"truncated": func(m *scanplanev1.ScanResponse) { m.PackedRows = m.PackedRows[:len(m.PackedRows)-1] },
	} {
		n := 0
		s := &apiServer{truth: truth, batch: 128, mangle: func(m *scanplanev1.ScanResponse) {
			if n++; n == 2 {
				mangle(m)
			}
		}}
		a := newTestAPI(t, nil, s.start(t))
		got, err := readAll(a.Scan(ctx, "t", Range{}, plainRows))
		if !errors.Is(err, ErrStream) || sameEntries(got, truth[:128]) != nil {
			t.Fatalf("%s: %d rows, %v; want the first message's 128 rows, then ErrStream", name, len(got), err)
		}
	}
}
