package client

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestMergeRanges: the merged ranges hold exactly the keys of the union,
// sorted, disjoint and not touching, against a brute-force membership
// check over every key of a small key space (open bounds included).
func TestMergeRanges(t *testing.T) {
	key := func(i int) []byte {
		if i < 0 {
			return nil // open bound
		}
		return fmt.Appendf(nil, "k%02d", i)
	}
	var keys [][]byte
	for i := range 40 {
		keys = append(keys, key(i), append(key(i), 0))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 2000 {
		var in []Range
		for range r.IntN(6) {
			a, b := r.IntN(42)-2, r.IntN(42)-2 // -1, -2: open
			if a >= 0 && b >= 0 && a > b {
				a, b = b, a
			}
			in = append(in, Range{Start: key(a), End: key(b)})
		}
		out := MergeRanges(in)
		for _, k := range keys {
			want := false
			for _, rg := range in {
				want = want || rg.Contains(k)
			}
			got := 0
			for _, rg := range out {
				if rg.Contains(k) {
					got++
				}
			}
			if want && got != 1 || !want && got != 0 {
				t.Fatalf("round %d: %v merged to %v: key %q in %d of them, in the union %v", round, in, out, k, got, want)
			}
		}
		for i := 1; i < len(out); i++ {
			if len(out[i-1].End) == 0 || bytes.Compare(out[i-1].End, out[i].Start) >= 0 {
				t.Fatalf("round %d: %v merged to %v: ranges %d and %d overlap or touch", round, in, out, i-1, i)
			}
		}
		for i, rg := range out {
			if rg.Empty() {
				t.Fatalf("round %d: merged range %d %v is empty", round, i, rg)
			}
		}
	}
}

// TestScanOptionsValidate: a bad Parallel or MaxBufferBytes fails the
// scan before any IO, naming the value.
func TestScanOptionsValidate(t *testing.T) {
	c, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts ScanOptions
		want string
	}{
		{ScanOptions{Parallel: -1}, "Parallel -1"},
		{ScanOptions{Parallel: MaxParallel + 1}, fmt.Sprintf("Parallel %d", MaxParallel+1)},
		{ScanOptions{MaxBufferBytes: -5}, "MaxBufferBytes -5"},
	} {
		for _, rows := range []*Rows{c.Scan(t.Context(), "t", Range{}, tc.opts), c.BatchScan(t.Context(), "t", []Range{{}}, tc.opts)} {
			if rows.Next() || rows.Err() == nil || !bytes.Contains([]byte(rows.Err().Error()), []byte(tc.want)) {
				t.Errorf("%+v: err %v, want one naming %q", tc.opts, rows.Err(), tc.want)
			}
		}
	}
	if err := (ScanOptions{Parallel: MaxParallel, MaxBufferBytes: 1}).Validate(); err != nil {
		t.Error(err)
	}
}
