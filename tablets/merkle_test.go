package tablets

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/zeebo/blake3"
)

// refRoot is the block root of rows straight from the definition in
// merkle.go, written independently of MerkleHasher: the ground truth the
// writer's roots and the proofs are checked against.
func refRoot(rows []Entry) Digest {
	var leaves []Digest
	var all []byte
	for _, e := range rows {
		all = binary.AppendUvarint(all, uint64(len(e.Key)))
		all = binary.AppendUvarint(all, uint64(len(e.Value)))
		all = append(append(all, e.Key...), e.Value...)
	}
	whole := blake3.Sum256(all)
	for i := 0; i < len(rows); i += 16 {
		b := []byte{0x00}
		for _, e := range rows[i:min(i+16, len(rows))] {
			b = binary.AppendUvarint(b, uint64(len(e.Key)))
			b = binary.AppendUvarint(b, uint64(len(e.Value)))
			b = append(append(b, e.Key...), e.Value...)
		}
		leaves = append(leaves, sha256.Sum256(b))
	}
	var tree func(ls []Digest) Digest
	tree = func(ls []Digest) Digest {
		if len(ls) == 1 {
			return ls[0]
		}
		k := 1
		for k*2 < len(ls) {
			k *= 2
		}
		l, r := tree(ls[:k]), tree(ls[k:])
		return sha256.Sum256(append(append([]byte{0x01}, l[:]...), r[:]...))
	}
	top := tree(leaves)
	return sha256.Sum256(append(append(binary.AppendUvarint([]byte{0x02}, uint64(len(rows))), top[:]...), whole[:]...))
}

// encodeFile writes rows as file "f" of blocks of blockSize bytes.
func encodeFile(t testing.TB, blockSize int, rows []Entry) *EncodedFile {
	t.Helper()
	w := NewFileWriter("f", blockSize)
	for _, e := range rows {
		if err := w.Add(e.Key, e.Value); err != nil {
			t.Fatal(err)
		}
	}
	f, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// oneBlock writes rows as a file of one block and returns the block and
// its recorded root.
func oneBlock(t testing.TB, rows []Entry) (*Block, Digest) {
	t.Helper()
	f := encodeFile(t, MaxBlockSize, rows)
	if len(f.Blocks) != 1 || len(f.Roots) != DigestSize {
		t.Fatalf("%d rows: %d blocks, %d root bytes", len(rows), len(f.Blocks), len(f.Roots))
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
	return blk, root
}

func testRows(n int) []Entry {
	var rows []Entry
	for i := range n {
		rows = append(rows, Entry{Key: fmt.Appendf(nil, "k%04d", i), Value: bytes.Repeat([]byte{byte(i)}, i%5)})
	}
	return rows
}

// TestRangeProofsMatchRoot: the root ingest records is the definition's;
// for blocks of up to 10 chunks and every chunk range, the siblings a
// Block gives rebuild it from the chunks' rows; a changed row, a changed
// sibling, one sibling too many or too few, a shifted range or another
// row count do not.
func TestRangeProofsMatchRoot(t *testing.T) {
	for n := 1; n <= 161; n++ {
		if n > 40 && n%16 != 0 && n%16 != 1 && n%16 != 15 {
			continue // past 40 rows, the sizes around chunk boundaries
		}
		rows := testRows(n)
		blk, root := oneBlock(t, rows)
		if want := refRoot(rows); root != want {
			t.Fatalf("n=%d: the writer's root is not the definition's", n)
		}
		var m MerkleHasher
		if blk.Root(&m) != root {
			t.Fatalf("n=%d: the block's tree has another root", n)
		}
		leafOf := func(c int) Digest {
			var b []byte
			for _, e := range rows[c*ChunkRows : min((c+1)*ChunkRows, n)] {
				b = AppendPackedRow(b, e.Key, e.Value)
			}
			return m.Leaf(b)
		}
		// A whole-block proof: the rows' BLAKE3 hash and the tree's top.
		whole := m.Whole(blk.PackedRows(0, n))
		sib := blk.RangeProof(&m, 0, Chunks(n))
		if got, err := m.WholeRoot(n, whole, sib); err != nil || got != root {
			t.Fatalf("n=%d whole block: %v, root matches %v", n, err, got == root)
		}
		if got, _ := m.WholeRoot(n, m.Whole(blk.PackedRows(0, n-1)), sib); got == root {
			t.Fatalf("n=%d whole block: a row less matches", n)
		}
		if _, err := m.WholeRoot(n, whole, append(bytes.Clone(sib), sib...)); !errors.Is(err, ErrBadProof) {
			t.Fatalf("n=%d whole block: two siblings: %v", n, err)
		}
		if got, _ := m.WholeRoot(n+1, whole, sib); got == root {
			t.Fatalf("n=%d whole block: n+1 rows match", n)
		}
		chunks := Chunks(n)
		for lo := 0; lo < chunks; lo++ {
			for hi := lo + 1; hi <= chunks; hi++ {
				if lo == 0 && hi == chunks {
					continue // the whole block, above
				}
				sib := blk.RangeProof(&m, lo, hi)
				var leaves []Digest
				for c := lo; c < hi; c++ {
					leaves = append(leaves, leafOf(c))
				}
				got, err := m.RangeRoot(n, lo, leaves, sib)
				if err != nil || got != root {
					t.Fatalf("n=%d chunks [%d,%d): %v, root matches %v", n, lo, hi, err, got == root)
				}
				bad := append([]Digest(nil), leaves...)
				bad[len(bad)-1][0] ^= 1
				if got, _ := m.RangeRoot(n, lo, bad, sib); got == root {
					t.Fatalf("n=%d [%d,%d): a changed chunk matches", n, lo, hi)
				}
				if len(sib) > 0 {
					s2 := bytes.Clone(sib)
					s2[5] ^= 1
					if got, _ := m.RangeRoot(n, lo, leaves, s2); got == root {
						t.Fatalf("n=%d [%d,%d): a changed sibling matches", n, lo, hi)
					}
					if _, err := m.RangeRoot(n, lo, leaves, sib[DigestSize:]); !errors.Is(err, ErrBadProof) {
						t.Fatalf("n=%d [%d,%d): a missing sibling: %v", n, lo, hi, err)
					}
					if _, err := m.RangeRoot(n, lo, leaves, sib[:len(sib)-1]); !errors.Is(err, ErrBadProof) {
						t.Fatalf("n=%d [%d,%d): a sibling a byte short: %v", n, lo, hi, err)
					}
				}
				if _, err := m.RangeRoot(n, lo, leaves, append(bytes.Clone(sib), make([]byte, DigestSize)...)); !errors.Is(err, ErrBadProof) {
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
		// PackedRows is the rows' packed encoding, from any row to any row.
		for lo := 0; lo <= n; lo += 3 {
			for hi := lo; hi <= n; hi += 5 {
				var want []byte
				for _, e := range rows[lo:hi] {
					want = AppendPackedRow(want, e.Key, e.Value)
				}
				if got := blk.PackedRows(lo, hi); !bytes.Equal(got, want) {
					t.Fatalf("n=%d: PackedRows(%d, %d) = %x, want %x", n, lo, hi, got, want)
				}
			}
		}
	}
}

// TestLeafBindsRows: a leaf hashes its rows' packed encoding, so rows
// cannot pass for others by moving bytes between keys and values or
// between rows; the prefixes keep leaves, inner nodes and roots apart.
func TestLeafBindsRows(t *testing.T) {
	var m MerkleHasher
	pack := func(kv ...string) []byte {
		var b []byte
		for i := 0; i < len(kv); i += 2 {
			b = AppendPackedRow(b, []byte(kv[i]), []byte(kv[i+1]))
		}
		return b
	}
	if m.Leaf(pack("ab", "c")) == m.Leaf(pack("a", "bc")) {
		t.Fatal("rows ab=c and a=bc hash alike")
	}
	if m.Leaf(pack("a", "bc", "d", "")) == m.Leaf(pack("a", "b", "cd", "")) {
		t.Fatal("bytes moved between rows hash alike")
	}
	// Written in pieces, a leaf is the same.
	b := pack("a", "bc", "d", "e")
	m.BeginLeaf()
	m.Write(b[:3])
	m.Write(b[3:])
	if m.EndLeaf() != m.Leaf(b) {
		t.Fatal("a leaf written in two pieces differs")
	}
	var inner MerkleHasher
	l := m.Leaf(pack("a", ""))
	if m.Root(1, []Digest{l}, l) == l || inner.Inner(l, l) == m.Root(17, []Digest{l, l}, l) {
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
	n := Chunks(blk.Entries())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lo := (i * 7) % (n - 1)
		blk.RangeProof(&m, lo, lo+1)
	}
}
