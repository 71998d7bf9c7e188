package tablets

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/messages"
)

// proveRange returns the proofs of a scan of rows [lo, hi) of rows, the
// rows of the one file in m, with c (nil: none).
func proveRange(t *testing.T, m mapFetcher, ref *messages.FileRef, rows []Entry, lo, hi int, c *DigestCache) []*messages.BlockProof {
	t.Helper()
	p := NewProver(context.Background(), []*messages.FileRef{ref}, m, Range{Start: rows[lo].Key, End: rows[hi].Key}, nil)
	p.UseDigests(c)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.Rows(hi - lo); err != nil {
		t.Fatal(err)
	}
	if err := p.Finish(false); err != nil {
		t.Fatal(err)
	}
	return p.Take()
}

// TestDigestCacheKeepsDigestsAcrossBlockReads: a block read again (a new
// Block, as after the host cache dropped it) proves rows with the digests
// the cache kept from the first read, not hashed again, and the proofs
// are those built without the cache; a budget smaller than the digests
// keeps the cache within it.
func TestDigestCacheKeepsDigestsAcrossBlockReads(t *testing.T) {
	rows := GenerateRows(400)
	f := encodeFile(t, 2048, rows)
	m := fetcherOf(f)
	if len(f.Blocks) < 4 {
		t.Fatalf("%d blocks, want several", len(f.Blocks))
	}
	ref := f.Ref()
	for _, r := range [][2]int{{50, 53}, {0, 1}, {120, 260}, {398, 399}} {
		t.Run(fmt.Sprint(r), func(t *testing.T) {
			want := proveRange(t, m, ref, rows, r[0], r[1], nil)
			c := NewDigestCache(1 << 20)
			first := proveRange(t, m, ref, rows, r[0], r[1], c)
			st1 := c.Stats()
			again := proveRange(t, m, ref, rows, r[0], r[1], c)
			st2 := c.Stats()
			for i, got := range [][]*messages.BlockProof{first, again} {
				if len(got) != len(want) {
					t.Fatalf("scan %d: %d proofs, want %d", i, len(got), len(want))
				}
				for j := range want {
					if !proto.Equal(got[j], want[j]) {
						t.Fatalf("scan %d proof %d: %v, want %v", i, j, got[j], want[j])
					}
				}
			}
			if st1.Misses == 0 || st1.Hits != 0 || st1.Bytes == 0 {
				t.Fatalf("after the first scan: %+v, want misses and kept digests, no hit", st1)
			}
			if st2.Misses != st1.Misses || st2.Hits != st1.Misses {
				t.Fatalf("after the same scan again: %+v (first %+v), want each block's digests found, none computed again", st2, st1)
			}
		})
	}
	small := NewDigestCache(600)
	for lo := 0; lo+3 < len(rows); lo += 37 {
		proveRange(t, m, ref, rows, lo, lo+3, small)
		if st := small.Stats(); st.Bytes > 600 {
			t.Fatalf("%+v: over the budget of 600 bytes", st)
		}
	}
}
