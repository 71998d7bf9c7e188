package tablets

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sort"
)

// The row digest tree of a block: what ingest records per block in the
// table's metadata (FileRef.block_roots) and what a client checks the
// rows of a scan against, so that rows a scan server forges, drops or
// adds are detected.
//
//	leaf(row)      = SHA-256(0x00 || uvarint(len key) || key || uvarint(len value) || value)
//	inner(l, r)    = SHA-256(0x01 || l || r)
//	tree(leaves)   = leaves[0] for one leaf; else inner(tree(leaves[:k]), tree(leaves[k:]))
//	                 with k the largest power of two below len(leaves) (RFC 6962's split)
//	BlockRoot(blk) = SHA-256(0x02 || uvarint(n) || tree(leaves of its n rows))
//
// The prefixes keep leaves, inner nodes and roots apart (no row hashes
// like a node), and the root binds the row count, so the shape of the
// tree a proof walks is the one ingest built. A leaf hashes the row's
// packed encoding (AppendPackedRow), the bytes a RowBatch carries.

// Digest is a SHA-256 hash of the row digest tree.
type Digest [sha256.Size]byte

// DigestSize is the size of a Digest in bytes.
const DigestSize = sha256.Size

// Domain-separation prefixes of the row digest tree.
const (
	leafPrefix  = 0x00
	innerPrefix = 0x01
	rootPrefix  = 0x02
)

// MaxProofLeaves bounds the row count a block proof may claim (a block of
// at most MaxBlockSize bytes holds far fewer rows).
const MaxProofLeaves = MaxBlockSize

// ErrBadProof: rows and a block proof do not match the block's root, or
// the proof is malformed.
var ErrBadProof = errors.New("tablets: rows do not match the block's digest")

// MerkleHasher computes the hashes of the row digest tree. The zero value
// is ready to use; it keeps a scratch buffer between calls and is not
// safe for concurrent use.
type MerkleHasher struct {
	buf []byte
	in  [1 + 2*DigestSize]byte
}

// Leaf is the leaf hash of one row.
func (m *MerkleHasher) Leaf(key, value []byte) Digest {
	b := append(m.buf[:0], leafPrefix)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = binary.AppendUvarint(b, uint64(len(value)))
	b = append(b, value...)
	m.buf = b
	return sha256.Sum256(b)
}

// Inner is the hash of an inner node over l and r.
func (m *MerkleHasher) Inner(l, r Digest) Digest {
	m.in[0] = innerPrefix
	copy(m.in[1:], l[:])
	copy(m.in[1+DigestSize:], r[:])
	return sha256.Sum256(m.in[:])
}

// seal is the block root of a tree of n leaves whose top node is top.
func (m *MerkleHasher) seal(n int, top Digest) Digest {
	b := append(m.buf[:0], rootPrefix)
	b = binary.AppendUvarint(b, uint64(n))
	b = append(b, top[:]...)
	m.buf = b
	return sha256.Sum256(b)
}

// tree is the top node of the tree over leaves (at least one).
func (m *MerkleHasher) tree(leaves []Digest) Digest {
	if len(leaves) == 1 {
		return leaves[0]
	}
	k := splitSize(len(leaves))
	return m.Inner(m.tree(leaves[:k]), m.tree(leaves[k:]))
}

// Root is the block root of a block whose rows have the leaf hashes
// leaves (at least one).
func (m *MerkleHasher) Root(leaves []Digest) Digest {
	return m.seal(len(leaves), m.tree(leaves))
}

// splitSize is the size of the left subtree of a node over n > 1
// leaves: the largest power of two below n.
func splitSize(n int) int { return 1 << (bits.Len(uint(n-1)) - 1) }

// AppendRangeProof appends to dst the siblings that prove leaves [lo, hi)
// of a block of n rows (0 <= lo < hi <= n): the roots of the maximal
// subtrees outside [lo, hi), left to right. node(a, b) returns the root
// of the subtree over leaves [a, b), which is always a node of the tree.
func AppendRangeProof(dst []Digest, n, lo, hi int, node func(a, b int) Digest) []Digest {
	var walk func(a, b int)
	walk = func(a, b int) {
		switch {
		case b <= lo || a >= hi:
			dst = append(dst, node(a, b))
		case lo <= a && b <= hi:
		default:
			k := splitSize(b - a)
			walk(a, a+k)
			walk(a+k, b)
		}
	}
	walk(0, n)
	return dst
}

// RangeRoot is the block root that leaves (the leaf hashes of rows [lo,
// lo+len(leaves)) of a block of n rows) and siblings (AppendRangeProof's,
// 32 bytes each) make. An impossible shape, a sibling of the wrong size,
// too few or too many siblings is an error wrapping ErrBadProof.
func (m *MerkleHasher) RangeRoot(n, lo int, leaves []Digest, siblings [][]byte) (Digest, error) {
	hi := lo + len(leaves)
	if n < 1 || n > MaxProofLeaves || lo < 0 || len(leaves) == 0 || hi > n {
		return Digest{}, fmt.Errorf("%w: rows [%d, %d) of a block of %d", ErrBadProof, lo, hi, n)
	}
	i := 0
	var bad error
	var walk func(a, b int) Digest
	walk = func(a, b int) Digest {
		switch {
		case bad != nil:
			return Digest{}
		case b <= lo || a >= hi:
			if i >= len(siblings) || len(siblings[i]) != DigestSize {
				bad = fmt.Errorf("%w: sibling %d of %d missing or not %d bytes", ErrBadProof, i, len(siblings), DigestSize)
				return Digest{}
			}
			d := Digest(siblings[i])
			i++
			return d
		case b-a == 1:
			return leaves[a-lo]
		}
		k := splitSize(b - a)
		l := walk(a, a+k)
		r := walk(a+k, b)
		return m.Inner(l, r)
	}
	top := walk(0, n)
	if bad != nil {
		return Digest{}, bad
	}
	if i != len(siblings) {
		return Digest{}, fmt.Errorf("%w: %d siblings, the proof uses %d", ErrBadProof, len(siblings), i)
	}
	return m.seal(n, top), nil
}

// RootAt returns the root of block number block of a file from its
// FileRef.block_roots (DigestSize bytes per block); false when roots has
// none for it.
func RootAt(roots []byte, block int) (Digest, bool) {
	if block < 0 || (block+1)*DigestSize > len(roots) {
		return Digest{}, false
	}
	return Digest(roots[block*DigestSize : (block+1)*DigestSize]), true
}

// chunk hashes: a Block keeps, once a proof needed them, the top node of
// every run of RestartInterval rows (the last run may be shorter). Every
// such run is a node of the block's tree: a node over more than
// RestartInterval rows splits at a power of two >= RestartInterval past
// its start, so nodes of that size or more start at multiples of it. A
// proof then hashes at most the rows of the runs it cuts through.

// chunkDigests returns b's chunk hashes, computing them on first use.
func (b *Block) chunkDigests(m *MerkleHasher) []Digest {
	if p := b.chunks.Load(); p != nil {
		return *p
	}
	n := int(b.entries)
	out := make([]Digest, 0, (n+RestartInterval-1)/RestartInterval)
	leaves := make([]Digest, 0, RestartInterval)
	off := 0
	for i := 0; i < n; i++ {
		var e Entry
		e, off = b.entry(off)
		leaves = append(leaves, m.Leaf(e.Key, e.Value))
		if len(leaves) == RestartInterval || i == n-1 {
			out = append(out, m.tree(leaves))
			leaves = leaves[:0]
		}
	}
	b.chunks.Store(&out)
	return out
}

// nodeCost bounds the memory a Block's digest tree takes per chunk: its
// chunk digest, at most one inner node above it, and their map entries.
const nodeCost = 4 * DigestSize

// nodeKey keys the tree node over rows [lo, hi).
func nodeKey(lo, hi int) uint64 { return uint64(lo)<<32 | uint64(hi) }

// treeNodes returns every node of b's tree over a chunk or more (the
// chunks and each node above them), computing them on first use, so that
// a proof looks its siblings up instead of hashing them again.
func (b *Block) treeNodes(m *MerkleHasher) map[uint64]Digest {
	if p := b.nodes.Load(); p != nil {
		return *p
	}
	chunks := b.chunkDigests(m)
	out := make(map[uint64]Digest, 2*len(chunks))
	var walk func(lo, hi int) Digest
	walk = func(lo, hi int) Digest {
		var d Digest
		if hi-lo <= RestartInterval {
			d = chunks[lo/RestartInterval]
		} else {
			k := splitSize(hi - lo)
			d = m.Inner(walk(lo, lo+k), walk(lo+k, hi))
		}
		out[nodeKey(lo, hi)] = d
		return d
	}
	walk(0, int(b.entries))
	b.nodes.Store(&out)
	return out
}

// EntryAt returns row i of the block (0 <= i < Entries()).
func (b *Block) EntryAt(i int) Entry {
	off := int(b.restarts[i/RestartInterval])
	e, next := b.entry(off)
	for j := i % RestartInterval; j > 0; j-- {
		e, next = b.entry(next)
	}
	return e
}

// node is the root of the subtree over rows [lo, hi) of b, a node of its
// tree.
func (b *Block) node(m *MerkleHasher, lo, hi int) Digest {
	const r = RestartInterval
	n := int(b.entries)
	if lo%r == 0 && (hi-lo >= r || hi == n) {
		if d, ok := b.treeNodes(m)[nodeKey(lo, hi)]; ok {
			return d
		}
	}
	if hi-lo > r {
		k := splitSize(hi - lo)
		return m.Inner(b.node(m, lo, lo+k), b.node(m, lo+k, hi))
	}
	// Within one chunk: decode its rows once, from its restart point.
	leaves := make([]Digest, 0, hi-lo)
	off := int(b.restarts[lo/r])
	for i := lo / r * r; i < hi; i++ {
		var e Entry
		e, off = b.entry(off)
		if i >= lo {
			leaves = append(leaves, m.Leaf(e.Key, e.Value))
		}
	}
	return m.tree(leaves)
}

// RangeProof returns the siblings that prove rows [lo, hi) of b against
// its root (0 <= lo < hi <= Entries()), 32 bytes each.
func (b *Block) RangeProof(m *MerkleHasher, lo, hi int) [][]byte {
	ds := AppendRangeProof(nil, int(b.entries), lo, hi, func(a, c int) Digest { return b.node(m, a, c) })
	out := make([][]byte, len(ds))
	flat := make([]byte, len(ds)*DigestSize)
	for i := range ds {
		out[i] = flat[i*DigestSize : (i+1)*DigestSize : (i+1)*DigestSize]
		copy(out[i], ds[i][:])
	}
	return out
}

// index is the row number of the row at byte offset off of the body
// (Entries() at end()).
func (b *Block) index(off int) int {
	if off >= len(b.body) {
		return int(b.entries)
	}
	i := sort.Search(len(b.restarts), func(i int) bool { return int(b.restarts[i]) > off }) - 1
	n := i * RestartInterval
	for o := int(b.restarts[i]); o < off; n++ {
		_, o = b.entry(o)
	}
	return n
}
