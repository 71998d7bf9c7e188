package client

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"connectrpc.com/connect"

	scanplanev1 "github.com/scanplane/scanplane/api/scanplane/v1"
	"github.com/scanplane/scanplane/tablets"
)

// Count counts the rows of truth in the request's range, at most its
// limit, or answers fail; it records the request as a ScanRequest of
// the same fields.
func (s *apiServer) Count(_ context.Context, req *connect.Request[scanplanev1.CountRequest]) (*connect.Response[scanplanev1.CountResponse], error) {
	m := req.Msg
	s.mu.Lock()
	s.reqs = append(s.reqs, &scanplanev1.ScanRequest{Table: m.GetTable(), Start: m.GetStart(), End: m.GetEnd(), Limit: m.GetLimit(), Hints: m.GetHints()})
	s.mu.Unlock()
	if s.fail != nil {
		return nil, s.fail()
	}
	rng := tablets.Range{Start: m.GetStart(), End: m.GetEnd()}
	var n uint64
	for _, e := range s.truth {
		if rng.Contains(e.Key) && (m.GetLimit() == 0 || n < uint64(m.GetLimit())) {
			n++
		}
	}
	return connect.NewResponse(&scanplanev1.CountResponse{Rows: n}), nil
}

// TestAPICount: a count goes to the next address when the first is
// down and carries the range, limit and hints; an error the coordinator
// answers maps to the client library's sentinel and is not retried; a
// bad range fails before any request.
func TestAPICount(t *testing.T) {
	truth := tablets.GenerateRows(1000)
	good := &apiServer{truth: truth}
	g, dead := good.start(t), deadAddr(t)
	ctx := context.Background()
	a := newTestAPI(t, nil, dead, g)
	hints := map[string]string{"scan_type": "batch"}
	for _, tc := range []struct {
		rng   Range
		limit uint64
		want  uint64
	}{
		{Range{}, 0, 1000},
		{KeyRange(truth[10].Key, truth[50].Key), 0, 40},
		{KeyRange(truth[10].Key, truth[50].Key), 7, 7},
		{KeyRange(truth[990].Key, nil), 100, 10},
	} {
		before := len(good.requests())
		n, err := a.Count(ctx, "t", tc.rng, ScanOptions{Limit: tc.limit, Hints: hints})
		if err != nil || n != tc.want {
			t.Fatalf("Count %s limit %d: %d, %v; want %d", tc.rng, tc.limit, n, err, tc.want)
		}
		reqs := good.requests()[before:]
		if len(reqs) != 1 || reqs[0].GetTable() != "t" || !bytes.Equal(reqs[0].GetStart(), tc.rng.Start) || !bytes.Equal(reqs[0].GetEnd(), tc.rng.End) ||
			reqs[0].GetLimit() != int64(tc.limit) || reqs[0].GetHints()["scan_type"] != "batch" {
			t.Fatalf("Count %s limit %d asked %v; want one request with its range, limit and hints", tc.rng, tc.limit, reqs)
		}
	}

	denied := &apiServer{fail: func() error {
		return connect.NewError(connect.CodePermissionDenied, errors.New(`principal "alice" may not scan table "t"`))
	}}
	d := denied.start(t)
	a = newTestAPI(t, nil, d, g)
	if n, err := a.Count(ctx, "t", Range{}, ScanOptions{}); !errors.Is(err, ErrPermissionDenied) || n != 0 {
		t.Fatalf("Count refused: %d, %v; want ErrPermissionDenied", n, err)
	}
	if len(denied.requests()) != 1 {
		t.Fatalf("a refused count was asked %d times; want once (a refusal is not retried elsewhere)", len(denied.requests()))
	}
	if _, err := a.Count(ctx, "t", KeyRange([]byte("b"), []byte("a")), ScanOptions{}); !errors.Is(err, tablets.ErrBadRange) {
		t.Fatalf("Count of a bad range: %v; want ErrBadRange", err)
	}
	if len(denied.requests()) != 1 {
		t.Fatal("a count of a bad range was sent")
	}
}
