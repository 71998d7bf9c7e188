package tablets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/scanplane/scanplane/messages"
)

// TestBlockSeek compares Block.seek with a binary search over the decoded
// entries for every key of blocks of 1 to 100 entries (1 to 7 seek points,
// both sides of every seek point), for keys between and around them.
func TestBlockSeek(t *testing.T) {
	rnd := rand.New(rand.NewPCG(11, 12))
	for n := 1; n <= 100; n++ {
		keys := map[string]bool{}
		for len(keys) < n {
			keys[fmt.Sprintf("k%0*d", 1+rnd.IntN(3), rnd.IntN(2000))] = true
		}
		var rows []Entry
		for k := range keys {
			rows = append(rows, Entry{Key: []byte(k), Value: bytes.Repeat([]byte{'v'}, rnd.IntN(5))})
		}
		sort.Slice(rows, func(i, j int) bool { return bytes.Compare(rows[i].Key, rows[j].Key) < 0 })
		f := encodeEntries(t, "seek", 1<<20, rows)
		ix, err := DecodeIndex(f.Index)
		if err != nil || len(ix.Blocks) != 1 {
			t.Fatalf("%d blocks, %v", len(ix.Blocks), err)
		}
		b, err := VerifyBlock(f.Blocks[0], ix.Blocks[0])
		if err != nil {
			t.Fatal(err)
		}
		if b.Entries() != n || len(b.restarts) != (n+RestartInterval-1)/RestartInterval || !b.Matches(ix.Blocks[0]) {
			t.Fatalf("n=%d: %d entries, %d seek points", n, b.Entries(), len(b.restarts))
		}
		var probes [][]byte
		for _, e := range rows {
			probes = append(probes, e.Key, append(bytes.Clone(e.Key), 0), e.Key[:len(e.Key)-1])
		}
		probes = append(probes, []byte("a"), []byte("z"), []byte("k"))
		for _, p := range probes {
			want := sort.Search(len(rows), func(i int) bool { return bytes.Compare(rows[i].Key, p) >= 0 })
			off := b.seek(p)
			// Walk from off and compare what follows with rows[want:].
			for i := want; i < len(rows); i++ {
				if off >= b.end() {
					t.Fatalf("n=%d seek %q: ended at row %d of %d", n, p, i, len(rows))
				}
				var e Entry
				e, off = b.entry(off)
				if !bytes.Equal(e.Key, rows[i].Key) || !bytes.Equal(e.Value, rows[i].Value) {
					t.Fatalf("n=%d seek %q: row %d is %q, want %q", n, p, i, e.Key, rows[i].Key)
				}
			}
			if off != b.end() {
				t.Fatalf("n=%d seek %q: rows left after the last", n, p)
			}
		}
	}
}

// TestBlockMatches: a Block matches only the handle it was verified
// against, so a cached Block from another file's index is refused.
func TestBlockMatches(t *testing.T) {
	f := encodeEntries(t, "m", 1<<10, GenerateRows(200))
	ix, err := DecodeIndex(f.Index)
	if err != nil {
		t.Fatal(err)
	}
	b, err := VerifyBlock(f.Blocks[1], ix.Blocks[1])
	if err != nil {
		t.Fatal(err)
	}
	if !b.Matches(ix.Blocks[1]) || b.Matches(ix.Blocks[0]) || b.Matches(ix.Blocks[2]) {
		t.Fatal("Matches does not tell block 1 from its neighbours")
	}
	for _, mod := range []func(h *BlockHandle){
		func(h *BlockHandle) { h.Checksum++ },
		func(h *BlockHandle) { h.Entries++ },
		func(h *BlockHandle) { h.Len++ },
		func(h *BlockHandle) { h.FirstKey = []byte("x") },
		func(h *BlockHandle) { h.LastKey = []byte("x") },
	} {
		h := ix.Blocks[1]
		mod(&h)
		if b.Matches(h) {
			t.Fatalf("matches a changed handle %+v", h)
		}
	}
}

// TestReaderRefusesMismatchedCachedBlock: a decoded cache that returns a
// Block not matching the index handle makes the scan fail with ErrCorrupt
// rather than return its rows.
func TestReaderRefusesMismatchedCachedBlock(t *testing.T) {
	ctx := context.Background()
	store := newMemStore()
	refA := writeFile(t, store, "a.g1.t0", 0, GenerateRows(100))
	rowsB := GenerateRows(101)[1:]
	refB := writeFile(t, store, "b.g1.t0", 0, rowsB)
	f := &hostCacheFetcher{objs: store.objs, decoded: map[string]any{}}
	if got := collect(t, NewTabletReader([]*messages.FileRef{refA}, f).Scan(ctx, Range{}, nil)); len(got) != 100 {
		t.Fatalf("%d rows", len(got))
	}
	f.decoded[BlockKey(refB.Id, 0)] = f.decoded[BlockKey(refA.Id, 0)]
	it := NewTabletReader([]*messages.FileRef{refB}, f).Scan(ctx, Range{}, nil)
	for it.Next() {
		t.Fatalf("row %q from a mismatched block", it.Entry().Key)
	}
	if !errors.Is(it.Err(), ErrCorrupt) {
		t.Fatalf("err %v, want ErrCorrupt", it.Err())
	}
}

// TestReaderDecodedMatchesStore: random range and after scans of three
// overlapping files through a decoded cache equal the same scans read
// straight from the store (every block decoded per fetch).
func TestReaderDecodedMatchesStore(t *testing.T) {
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(5, 6))
	store := newMemStore()
	var refs []*messages.FileRef
	for i := range 3 {
		var rows []Entry
		for j := i; j < 3000; j += 1 + i {
			rows = append(rows, Entry{Key: RowKey(j), Value: []byte(fmt.Sprintf("f%d-%d", i, j))})
		}
		refs = append(refs, writeFile(t, store, fmt.Sprintf("f%d.g1.t0", i), 512, rows))
	}
	cached := NewTabletReader(refs, &hostCacheFetcher{objs: store.objs, decoded: map[string]any{}})
	plain := NewTabletReader(refs, StoreFetcher{Store: store})
	for n := 0; n < 300; n++ {
		a, b := rnd.IntN(3100), rnd.IntN(3100)
		if a > b {
			a, b = b, a
		}
		rng := Range{Start: RowKey(a), End: RowKey(b)}
		if rnd.IntN(5) == 0 {
			rng.Start = nil
		}
		if rnd.IntN(5) == 0 {
			rng.End = nil
		}
		var after []byte
		if rnd.IntN(3) == 0 {
			after = append(RowKey(a+rnd.IntN(50)), byte(rnd.IntN(2)))
		}
		want := collect(t, plain.Scan(ctx, rng, after))
		got := collect(t, cached.Scan(ctx, rng, after))
		if len(got) != len(want) {
			t.Fatalf("%v after %q: %d rows, want %d", rng, after, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i].Key, want[i].Key) || !bytes.Equal(got[i].Value, want[i].Value) {
				t.Fatalf("%v after %q: row %d %q=%q, want %q=%q", rng, after, i, got[i].Key, got[i].Value, want[i].Key, want[i].Value)
			}
		}
	}
}
