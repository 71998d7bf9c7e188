package tablets

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// countFetcher serves objects from a map, counting fetches by key;
// missing keys are errors. cached is what every fetch reports.
type countFetcher struct {
	objs   map[string][]byte
	n      map[string]int
	cached bool
}

func (f *countFetcher) FetchBlock(_ context.Context, key string) ([]byte, bool, error) {
	f.n[key]++
	b, ok := f.objs[key]
	if !ok {
		return nil, false, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return b, f.cached, nil
}

func TestScanMemo(t *testing.T) {
	ctx := context.Background()
	f := &countFetcher{objs: map[string][]byte{}, n: map[string]int{}}
	for i := range memoSize + 1 {
		f.objs[fmt.Sprint("k", i)] = []byte{byte(i)}
	}
	decodes := 0
	decode := func(b []byte) (any, int64, error) { decodes++; return int(b[0]), 1, nil }
	m := NewScanMemo(f)
	v, cached, err := m.FetchDecoded(ctx, "k0", decode)
	if err != nil || v != 0 || cached {
		t.Fatalf("first fetch: %v %v %v", v, cached, err)
	}
	f.cached = true // a later fetch from f would say cached: the memo keeps the first answer
	if v, cached, err = m.FetchDecoded(ctx, "k0", decode); err != nil || v != 0 || cached || f.n["k0"] != 1 || decodes != 1 {
		t.Fatalf("second fetch: %v %v %v; fetches %d, decodes %d, want 1 and 1", v, cached, err, f.n["k0"], decodes)
	}
	// An error is not kept.
	for range 2 {
		if _, _, err := m.FetchDecoded(ctx, "missing", decode); !errors.Is(err, ErrNotFound) {
			t.Fatalf("missing key: %v", err)
		}
	}
	if f.n["missing"] != 2 {
		t.Fatalf("a failed fetch was kept: %d fetches, want 2", f.n["missing"])
	}
	// memoSize more objects push k0 out; the last memoSize stay.
	for i := 1; i <= memoSize; i++ {
		if _, _, err := m.FetchDecoded(ctx, fmt.Sprint("k", i), decode); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= memoSize; i++ {
		if v, _, _ := m.FetchDecoded(ctx, fmt.Sprint("k", i), decode); v != i || f.n[fmt.Sprint("k", i)] != 1 {
			t.Fatalf("k%d: %v after %d fetches, want %d after 1", i, v, f.n[fmt.Sprint("k", i)], i)
		}
	}
	if _, _, _ = m.FetchDecoded(ctx, "k0", decode); f.n["k0"] != 2 {
		t.Fatalf("k0 fetched %d times, want 2 (pushed out)", f.n["k0"])
	}
	// Raw fetches pass through.
	if b, _, err := m.FetchBlock(ctx, "k1"); err != nil || b[0] != 1 || f.n["k1"] != 2 {
		t.Fatalf("FetchBlock: %v %v, %d fetches", b, err, f.n["k1"])
	}
}
