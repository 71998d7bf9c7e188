package tabletstream

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// serveCount runs a count-only scan as a scan server does: the rows of
// the stream's first block in batches of batch rows, then the counted
// proofs of the blocks Prover.CountSpan plans (perBatch of them per
// batch), then the rows from the last block on, and the end's proofs.
func serveCount(t *testing.T, files []*messages.FileRef, f memFetcher, rng tablets.Range, batch, perBatch int) []served {
	t.Helper()
	ctx := context.Background()
	p := tablets.NewProver(ctx, files, f, rng, nil)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	from, to, ok, err := p.CountSpan()
	if err != nil {
		t.Fatal(err)
	}
	var out []served
	var cur []tablets.Entry
	flush := func(last bool) {
		if err := p.Rows(len(cur)); err != nil {
			t.Fatal(err)
		}
		if last {
			if err := p.Finish(false); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, served{rows: cur, proofs: p.Take()})
		cur = nil
	}
	scan := func(r tablets.Range) {
		it := tablets.NewTabletReader(files, f).Scan(ctx, r, nil)
		for it.Next() {
			e := it.Entry()
			cur = append(cur, tablets.Entry{Key: bytes.Clone(e.Key), Value: bytes.Clone(e.Value)})
			if len(cur) == batch {
				flush(false)
			}
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
	}
	first := rng
	if ok {
		first.End = from
	}
	scan(first)
	if ok {
		if len(cur) > 0 {
			flush(false)
		}
		for {
			_, more, err := p.Count(perBatch)
			if err != nil {
				t.Fatal(err)
			}
			if !more {
				break
			}
			flush(false)
		}
		scan(tablets.Range{Start: to, End: rng.End})
	}
	if len(cur) > 0 {
		flush(true)
	} else {
		if err := p.Finish(false); err != nil {
			t.Fatal(err)
		}
		out = append(out, served{proofs: p.Take()})
	}
	return out
}

// checkCount feeds a count-only stream to a verifier and returns the rows
// it released, the rows it counted and the first error.
func checkCount(t testing.TB, roots []tablets.Digest, rng tablets.Range, limit uint64, batches []served) ([]tablets.Entry, uint64, error) {
	v := newVerifier(roots, rng, nil, limit)
	var got []tablets.Entry
	var counted uint64
	for _, b := range batches {
		packed, rows := packRows(t, b.rows)
		rows, err := v.batch(packed, rows, b.proofs)
		counted += v.takeCounted()
		if err != nil {
			return got, counted, err
		}
		got = append(got, rows...)
	}
	err := v.finish()
	counted += v.takeCounted()
	return got, counted, err
}

func countedProofs(bs []served) int {
	n := 0
	for _, b := range bs {
		for _, p := range b.proofs {
			if p.GetCounted() {
				n++
			}
		}
	}
	return n
}

// TestCountProofsMatchGroundTruth: count-only streams of random ranges
// (bounds on rows, between rows, inside blocks and at block and file
// boundaries) verify, and the rows sent plus the rows counted are the
// range's rows; the rows sent are the range's first and last rows.
func TestCountProofsMatchGroundTruth(t *testing.T) {
	files, f, truth := verifyTablet(t, 3000, 1000, 600)
	roots, err := Roots(&messages.TabletMeta{Files: files})
	if err != nil {
		t.Fatal(err)
	}
	key := func(i int) []byte { return fmt.Appendf(nil, "k%04d", i) } // even i: a row; odd: between rows
	r := rand.New(rand.NewPCG(27, 2))
	bound := func() []byte {
		if r.IntN(10) == 0 {
			return nil
		}
		return key(r.IntN(6100))
	}
	counting := 0
	for i := range 400 {
		rng := tablets.Range{Start: bound(), End: bound()}
		if rng.Validate() != nil {
			rng.Start, rng.End = rng.End, rng.Start
		}
		if i == 0 {
			rng = tablets.Range{} // the whole tablet
		}
		bs := serveCount(t, files, f, rng, 1+r.IntN(40), 1+r.IntN(4))
		got, counted, err := checkCount(t, roots, rng, 0, bs)
		w := want(truth, rng, nil, 0)
		if err != nil || uint64(len(got))+counted != uint64(len(w)) {
			t.Fatalf("%s: %d rows sent + %d counted, want %d; err %v", rng, len(got), counted, len(w), err)
		}
		// The rows sent are the range's first rows, then its last.
		head := 0
		for head < len(got) && head < len(w) && bytes.Equal(got[head].Key, w[head].Key) {
			head++
		}
		if !equalEntries(got[head:], w[len(w)-(len(got)-head):]) {
			t.Fatalf("%s: the rows sent are not the range's first and last", rng)
		}
		if counted > 0 {
			counting++
		}
	}
	if counting < 100 {
		t.Fatalf("only %d of 400 scans counted blocks", counting)
	}
}

// TestCountProofsCatchLies: a counted block left out, counted twice,
// claimed with another row count or with made-up digests, counted
// before any row was sent, counted past the range's end, or counted in
// a scan with a limit is refused.
func TestCountProofsCatchLies(t *testing.T) {
	files, f, _ := verifyTablet(t, 3000, 1000, 600)
	roots, err := Roots(&messages.TabletMeta{Files: files})
	if err != nil {
		t.Fatal(err)
	}
	rng := tablets.Range{Start: []byte("k0101"), End: []byte("k5001")}
	honest := func() []served { return serveCount(t, files, f, rng, 7, 1000) }
	// The batch holding the counted proofs and their index in it.
	countedAt := func(bs []served) (int, []int) {
		for i, b := range bs {
			var at []int
			for j, p := range b.proofs {
				if p.GetCounted() {
					at = append(at, j)
				}
			}
			if len(at) > 0 {
				return i, at
			}
		}
		t.Fatal("no counted proof")
		return 0, nil
	}
	if _, counted, err := checkCount(t, roots, rng, 0, honest()); err != nil || counted == 0 {
		t.Fatalf("honest: %d counted, %v", counted, err)
	}
	for name, lie := range map[string]func([]served) ([]served, tablets.Range, uint64){
		"block left out": func(bs []served) ([]served, tablets.Range, uint64) {
			i, at := countedAt(bs)
			bs[i].proofs = slices.Delete(bs[i].proofs, at[1], at[1]+1)
			return bs, rng, 0
		},
		"block counted twice": func(bs []served) ([]served, tablets.Range, uint64) {
			i, at := countedAt(bs)
			bs[i].proofs = slices.Insert(bs[i].proofs, at[1], bs[i].proofs[at[1]])
			return bs, rng, 0
		},
		"row count changed": func(bs []served) ([]served, tablets.Range, uint64) {
			i, at := countedAt(bs)
			p := bs[i].proofs[at[0]]
			p.Leaves++
			p.Rows++
			return bs, rng, 0
		},
		"digests made up": func(bs []served) ([]served, tablets.Range, uint64) {
			i, at := countedAt(bs)
			p := bs[i].proofs[at[0]]
			p.SiblingsPacked = append(bytes.Clone(p.SiblingsPacked[:tablets.DigestSize]), make([]byte, tablets.DigestSize)...)
			return bs, rng, 0
		},
		"counted before any row": func(bs []served) ([]served, tablets.Range, uint64) {
			// Block 0 counted first, then the honest stream from block 1
			// on, for a range that starts inside block 0.
			b0 := blockOf(t, files, f, 0)
			var m tablets.MerkleHasher
			n := uint32(b0.Entries())
			lie := []served{{proofs: []*messages.BlockProof{{Block: 0, Leaves: n, Rows: n, Counted: true, SiblingsPacked: b0.CountProof(&m)}}}}
			rest := serveCount(t, files, f, tablets.Range{Start: b0.EntryAt(b0.Entries() - 1).Key, End: rng.End}, 7, 1000)
			if p := rest[0].proofs[0]; p.GetBlock() != 0 || p.GetRows() != 1 {
				t.Fatalf("the stream after block 0 starts with %v", p)
			}
			rest[0].rows, rest[0].proofs = rest[0].rows[1:], rest[0].proofs[1:]
			return append(lie, rest...), tablets.Range{Start: []byte("k0003"), End: rng.End}, 0
		},
		"counted past the end": func(bs []served) ([]served, tablets.Range, uint64) {
			// The stream of a longer range, cut after its counted proofs,
			// then the first chunk of the next block as the row past the
			// end of a range that ends before the counted blocks do.
			i, at := countedAt(bs)
			last := bs[i].proofs[at[len(at)-1]]
			cut := append(bs[:i:i], served{proofs: bs[i].proofs[:at[len(at)-1]+1]})
			g := int(last.GetBlock()) + 1
			blk := blockOf(t, files, f, g)
			var m tablets.MerkleHasher
			end := tablets.ChunkEnd(0, blk.Entries())
			cut = append(cut, served{proofs: []*messages.BlockProof{{Block: uint32(g), Leaves: uint32(blk.Entries()),
				Tail: blk.PackedRows(0, end), SiblingsPacked: blk.RangeProof(&m, 0, 1)}}})
			return cut, tablets.Range{Start: rng.Start, End: []byte("k0901")}, 0
		},
		"counted to an open end short of the tablet's": func(bs []served) ([]served, tablets.Range, uint64) {
			i, _ := countedAt(bs)
			cut := bs[:i+1]
			cut[i].rows = nil
			return cut, tablets.Range{Start: rng.Start}, 0
		},
		"counted with a limit": func(bs []served) ([]served, tablets.Range, uint64) {
			return bs, rng, 1 << 20
		},
	} {
		t.Run(name, func(t *testing.T) {
			bs, r, limit := lie(honest())
			if got, counted, err := checkCount(t, roots, r, limit, bs); err == nil {
				t.Fatalf("accepted: %d rows sent, %d counted", len(got), counted)
			}
		})
	}
}

// TestCountSpanPlansTheMiddleBlocks: a count of the whole tablet sends
// the rows of its first and last block and counts every other.
func TestCountSpanPlansTheMiddleBlocks(t *testing.T) {
	files, f, truth := verifyTablet(t, 3000, 1000, 600)
	bs := serveCount(t, files, f, tablets.Range{}, 1<<20, 1<<20)
	roots, _ := Roots(&messages.TabletMeta{Files: files})
	if n := countedProofs(bs); n != len(roots)-2 {
		t.Fatalf("%d counted blocks of %d: want all but the first and the last", n, len(roots))
	}
	if got, counted, err := checkCount(t, roots, tablets.Range{}, 0, bs); err != nil || uint64(len(got))+counted != uint64(len(truth)) {
		t.Fatalf("%d + %d rows, %v", len(got), counted, err)
	}
}
