package tablets

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// TestRangeProofsMatchRoot: for every block size up to 70 rows and every
// row range, the siblings a Block gives (from its cached chunk nodes)
// rebuild the root ingest recorded; a changed row, a changed sibling,
// one sibling too many or too few, a shifted range or another row count
// do not.
func TestRangeProofsMatchRoot(t *testing.T) {
	for n := 1; n <= 70; n++ {
		w := NewFileWriter("f", MaxBlockSize)
		var rows []Entry
		for i := range n {
			e := Entry{Key: fmt.Appendf(nil, "k%03d", i), Value: bytes.Repeat([]byte{byte(i)}, i%5)}
			rows = append(rows, e)
			if err := w.Add(e.Key, e.Value); err != nil {
				t.Fatal(err)
			}
		}
		f, err := w.Finish()
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Blocks) != 1 || len(f.Roots) != DigestSize {
			t.Fatalf("n=%d: %d blocks, %d root bytes", n, len(f.Blocks), len(f.Roots))
		}
		ix, err := DecodeIndex(f.Index)
		if err != nil {
			t.Fatal(err)
		}
		blk, err := VerifyBlock(f.Blocks[0], ix.Blocks[0])
		if err != nil {
			t.Fatal(err)
		}
		root, _ := RootAt(f.Roots, 0)
		var m MerkleHasher
		for lo := 0; lo < n; lo++ {
			for hi := lo + 1; hi <= n; hi++ {
				sib := blk.RangeProof(&m, lo, hi)
				var leaves []Digest
				for _, e := range rows[lo:hi] {
					leaves = append(leaves, m.Leaf(e.Key, e.Value))
				}
				got, err := m.RangeRoot(n, lo, leaves, sib)
				if err != nil || got != root {
					t.Fatalf("n=%d [%d,%d): %v, root matches %v", n, lo, hi, err, got == root)
				}
				bad := append([]Digest(nil), leaves...)
				bad[len(bad)-1][0] ^= 1
				if got, _ := m.RangeRoot(n, lo, bad, sib); got == root {
					t.Fatalf("n=%d [%d,%d): a changed row matches", n, lo, hi)
				}
				if len(sib) > 0 {
					s2 := append([][]byte(nil), sib...)
					s2[0] = bytes.Clone(s2[0])
					s2[0][5] ^= 1
					if got, _ := m.RangeRoot(n, lo, leaves, s2); got == root {
						t.Fatalf("n=%d [%d,%d): a changed sibling matches", n, lo, hi)
					}
					if _, err := m.RangeRoot(n, lo, leaves, sib[1:]); !errors.Is(err, ErrBadProof) {
						t.Fatalf("n=%d [%d,%d): a missing sibling: %v", n, lo, hi, err)
					}
				}
				if _, err := m.RangeRoot(n, lo, leaves, append(sib, make([]byte, DigestSize))); !errors.Is(err, ErrBadProof) {
					t.Fatalf("n=%d [%d,%d): an extra sibling: %v", n, lo, hi, err)
				}
				if lo > 0 {
					if got, _ := m.RangeRoot(n, lo-1, leaves, sib); got == root {
						t.Fatalf("n=%d [%d,%d): the range shifted down matches", n, lo, hi)
					}
				}
				if got, _ := m.RangeRoot(n+1, lo, leaves, sib); got == root {
					t.Fatalf("n=%d [%d,%d): n+1 rows match", n, lo, hi)
				}
			}
		}
	}
}

// TestLeafIsPackedRow: a leaf hashes the row's packed encoding, so a row
// cannot pass for another by moving bytes between key and value.
func TestLeafIsPackedRow(t *testing.T) {
	var m MerkleHasher
	if m.Leaf([]byte("ab"), []byte("c")) == m.Leaf([]byte("a"), []byte("bc")) {
		t.Fatal("rows ab=c and a=bc hash alike")
	}
	var inner MerkleHasher
	l := m.Leaf([]byte("a"), nil)
	if m.Root([]Digest{l}) == l || inner.Inner(l, l) == m.Root([]Digest{l, l}) {
		t.Fatal("a root hashes like a leaf or an inner node")
	}
}

func BenchmarkRangeProofOneRow(b *testing.B) {
	w := NewFileWriter("f", DefaultBlockSize)
	for i := 0; ; i++ {
		if err := w.Add(fmt.Appendf(nil, "key%08d", i), bytes.Repeat([]byte("v"), 90)); err != nil {
			b.Fatal(err)
		}
		if len(w.handles) > 0 {
			break
		}
	}
	f, _ := w.Finish()
	ix, _ := DecodeIndex(f.Index)
	blk, err := VerifyBlock(f.Blocks[0], ix.Blocks[0])
	if err != nil {
		b.Fatal(err)
	}
	var m MerkleHasher
	n := blk.Entries()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lo := (i * 7) % (n - 2)
		blk.RangeProof(&m, lo, lo+3)
	}
}
