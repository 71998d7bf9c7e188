package tabletstream

import (
	"bytes"
	"sync"
	"testing"

	"github.com/scanplane/scanplane/tablets"
)

// TestProvenLeavesBudget: blocks past the budget push others out, the
// leaves kept stay within it, and a leaf counts as proven only at its
// position under its root and row count.
func TestProvenLeavesBudget(t *testing.T) {
	const n = 10 * tablets.ChunkRows // 10 chunks a block
	p := NewProvenLeaves(20*leafShards, 1<<20)
	leaf := func(b, i int) tablets.Digest { return tablets.Digest{byte(b), byte(b >> 8), byte(i), 1} }
	root := func(b int) tablets.Digest { return tablets.Digest{byte(b % leafShards), byte(b), byte(b >> 8), 2} }
	for b := range 200 {
		p.add(root(b), n, 3, []tablets.Digest{leaf(b, 3), leaf(b, 4)})
		if !p.proven(root(b), n, 3, []tablets.Digest{leaf(b, 3), leaf(b, 4)}) {
			t.Fatalf("block %d: leaves just added not proven", b)
		}
	}
	for i := range p.shards {
		s := &p.shards[i]
		if s.chunks > s.budget || s.chunks != 10*len(s.blocks) {
			t.Fatalf("shard %d: %d chunks for %d blocks, budget %d", i, s.chunks, len(s.blocks), s.budget)
		}
	}
	if got := p.Len(); got != 2*leafShards {
		t.Fatalf("%d blocks kept, want %d", got, 2*leafShards)
	}
	b := 199
	for name, ok := range map[string]bool{
		"another position":   p.proven(root(b), n, 4, []tablets.Digest{leaf(b, 3)}),
		"another row count":  p.proven(root(b), n+1, 3, []tablets.Digest{leaf(b, 3)}),
		"another root":       p.proven(root(b-leafShards*5), n, 3, []tablets.Digest{leaf(b, 3)}),
		"a leaf not proven":  p.proven(root(b), n, 3, []tablets.Digest{leaf(b, 3), leaf(b, 4), leaf(b, 5)}),
		"past the last leaf": p.proven(root(b), n, 9, []tablets.Digest{leaf(b, 9), leaf(b, 10)}),
	} {
		if ok {
			t.Errorf("%s: proven", name)
		}
	}
	if NewProvenLeaves(0, 1<<20) != nil {
		t.Error("a budget of 0 keeps leaves")
	}
}

// TestProvenLeavesRowBudget: the rows kept stay within the budget of
// bytes, pushing other blocks' rows out but not their leaves; rows are kept only for chunks whose
// leaves are kept and proven, and read back as kept.
func TestProvenLeavesRowBudget(t *testing.T) {
	const n = 4 * tablets.ChunkRows
	const chunkBytes = 1000
	p := NewProvenLeaves(1<<12, 3*chunkBytes*leafShards) // three chunks' rows a shard
	root := func(b int) tablets.Digest { return tablets.Digest{byte(b % leafShards), byte(b), byte(b >> 8), 3} }
	rows := func(b, i int) []byte { return bytes.Repeat([]byte{byte(b), byte(i)}, chunkBytes/2) }
	for b := range 200 {
		var f leafFeed
		for i := range 2 {
			r := rows(b, i)
			f.leaves = append(f.leaves, tablets.Digest{byte(b), byte(i), 4})
			f.hashed[i] = pieces{p: [maxPieces][]byte{r[:100], r[100:]}, n: 2}
		}
		f.hashed[1].n = -1 // hashed as it came: nothing to keep
		p.addRows(root(b), n, 1, &f)
		if p.block(root(b), n) != nil {
			t.Fatalf("block %d: rows kept before its leaves", b)
		}
		p.add(root(b), n, 1, f.leaves)
		p.addRows(root(b), n, 1, &f)
		k := p.block(root(b), n)
		if c := k.kept(1); c == nil || !bytes.Equal(c.rows, rows(b, 0)) || c.leaf != f.leaves[0] {
			t.Fatalf("block %d: chunk 1 not kept as added", b)
		}
		if k.kept(0) != nil || k.kept(2) != nil || k.kept(3) != nil {
			t.Fatalf("block %d: rows kept for a chunk not hashed or not proven", b)
		}
	}
	for i := range p.shards {
		s := &p.shards[i]
		sum := 0
		for _, b := range s.blocks {
			sum += b.bytes
		}
		if s.bytes > s.bytesBudget || s.bytes != sum {
			t.Fatalf("shard %d: %d bytes of rows (blocks: %d), budget %d", i, s.bytes, sum, s.bytesBudget)
		}
	}
	if got := p.RowBytes(); got == 0 || got > 3*chunkBytes*leafShards {
		t.Fatalf("%d bytes of rows kept", got)
	}
	// Rows make room by dropping other blocks' rows, not their leaves.
	if got := p.Len(); got != 200 {
		t.Fatalf("%d blocks' leaves kept, want all 200", got)
	}
}

// TestProvenLeavesConcurrent: verifiers on several goroutines share one
// ProvenLeaves (run with -race).
func TestProvenLeavesConcurrent(t *testing.T) {
	roots, rng, packed, rows, proofs := shortScan(t, 103, 141)
	p := NewProvenLeaves(1<<12, 1<<20)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for range 50 {
				v := newVerifier(roots, rng, nil, 0)
				v.leaves = p
				if _, err := v.batch(packed, rows, proofs); err != nil {
					errs <- err
					return
				}
				if err := v.finish(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
