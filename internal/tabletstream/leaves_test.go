package tabletstream

import (
	"sync"
	"testing"

	"github.com/scanplane/scanplane/tablets"
)

// TestProvenLeavesBudget: blocks past the budget push others out, the
// leaves kept stay within it, and a leaf counts as proven only at its
// position under its root and row count.
func TestProvenLeavesBudget(t *testing.T) {
	const n = 10 * tablets.ChunkRows // 10 chunks a block
	p := NewProvenLeaves(20 * leafShards)
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
	if NewProvenLeaves(0) != nil {
		t.Error("a budget of 0 keeps leaves")
	}
}

// TestProvenLeavesConcurrent: verifiers on several goroutines share one
// ProvenLeaves (run with -race).
func TestProvenLeavesConcurrent(t *testing.T) {
	roots, rng, packed, rows, proofs := shortScan(t, 103, 141)
	p := NewProvenLeaves(1 << 12)
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
