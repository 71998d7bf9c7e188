package tablets

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"math/bits"
	"sort"
)

// The row digest tree of a block: what ingest records per block in the
// table's metadata (FileRef.block_roots) and what a client checks the
// rows of a scan against, so that rows a scan server forges, drops or
// adds are detected.
//
// Its leaves are chunks of ChunkRows consecutive rows (chunk i holds rows
// [i*ChunkRows, (i+1)*ChunkRows), the last chunk of a block the rest):
//
//	leaf(chunk)    = SHA-256(0x00 || the chunk's rows in the packed encoding)
//	inner(l, r)    = SHA-256(0x01 || l || r)
//	tree(leaves)   = leaves[0] for one leaf; else inner(tree(leaves[:k]), tree(leaves[k:]))
//	                 with k the largest power of two below len(leaves) (RFC 6962's split)
//	whole(blk)     = BLAKE3-256(all the block's rows in the packed encoding)
//	BlockRoot(blk) = SHA-256(0x02 || uvarint(n) || tree(leaves of its chunks) || whole(blk)),
//	                 n its row count
//
// The root commits to two digests of the same rows, and either proves
// them: a scan that covers a whole block hashes its rows with BLAKE3 in
// one pass (SIMD over the block's 1 KiB BLAKE3 chunks, several times
// SHA-256's rate) and takes the tree's top as its one sibling; a scan
// that covers part of a block hashes the 16-row chunks it covers with
// SHA-256 and takes the other subtrees' roots and whole(blk) as
// siblings. Rows that pass either way are the block's: the root is
// SHA-256, and what it binds is a collision-resistant hash of the rows.
//
// The packed encoding (AppendPackedRow) is the block's own entry
// encoding and what a RowBatch carries, so a leaf is one hashing pass
// over bytes that both the block and a batch hold contiguously. It
// decodes into rows one way only (lengths in their shortest form), so a
// leaf binds its rows; the root binds the row count, which fixes how many
// rows each chunk holds and the shape of the tree a proof walks. The
// prefixes keep leaves, inner nodes and roots apart.

// Digest is a SHA-256 hash of the row digest tree.
type Digest [sha256.Size]byte

// DigestSize is the size of a Digest in bytes.
const DigestSize = sha256.Size

// ChunkRows is the number of rows under one leaf of the row digest tree.
// It equals RestartInterval, so a chunk starts at a seek point of its
// block.
const ChunkRows = RestartInterval

// Chunks is the number of leaves of the tree of a block of n rows.
func Chunks(n int) int { return (n + ChunkRows - 1) / ChunkRows }

// ChunkEnd is the row just past the chunk that holds row i of a block of
// n rows.
func ChunkEnd(i, n int) int { return min((i/ChunkRows+1)*ChunkRows, n) }

// Domain-separation prefixes of the row digest tree.
const (
	leafPrefix  = 0x00
	innerPrefix = 0x01
	rootPrefix  = 0x02
)

// MaxProofLeaves bounds the row count a block proof may claim (a block of
// at most MaxBlockSize bytes holds far fewer rows).
const MaxProofLeaves = MaxBlockSize

// ErrBadProof: rows and a block proof do not match the block's root,
// the proof is malformed, or rows came without the proof they need.
var ErrBadProof = errors.New("tablets: rows not proven against the block roots")

// MerkleHasher computes the hashes of the row digest tree. The zero value
// is ready to use; it keeps a hash state and scratch buffers between
// calls and is not safe for concurrent use.
type MerkleHasher struct {
	h   hash.Hash    // the leaf being hashed (BeginLeaf, Write, EndLeaf)
	w   *wholeHasher // the whole block being hashed (BeginWhole, WriteWhole, EndWhole)
	sum []byte
	// leaf receives EndLeaf's sum: no allocation per leaf.
	leaf Digest
	in   [1 + 2*DigestSize]byte
	pre  [1]byte
}

// BeginLeaf starts the leaf hash of a chunk; Write adds its rows' packed
// bytes, in order and in pieces of any size; EndLeaf returns it.
func (m *MerkleHasher) BeginLeaf() {
	if m.h == nil {
		m.h = sha256.New()
	}
	m.h.Reset()
	m.pre[0] = leafPrefix
	m.h.Write(m.pre[:])
}

// Write adds packed row bytes to the leaf BeginLeaf started.
func (m *MerkleHasher) Write(p []byte) {
	m.h.Write(p)
}

// EndLeaf returns the leaf hash of the bytes written since BeginLeaf.
func (m *MerkleHasher) EndLeaf() Digest {
	return Digest(m.h.Sum(m.leaf[:0]))
}

// Leaf is the leaf hash of a chunk whose rows, packed, are packed.
func (m *MerkleHasher) Leaf(packed []byte) Digest {
	m.BeginLeaf()
	m.Write(packed)
	return m.EndLeaf()
}

// BeginWhole starts the BLAKE3 hash of a whole block's rows; WriteWhole
// adds their packed bytes, in order and in pieces of any size; EndWhole
// returns it.
func (m *MerkleHasher) BeginWhole() {
	if m.w == nil {
		m.w = new(wholeHasher)
	}
	m.w.Reset()
}

// WriteWhole adds packed row bytes to the hash BeginWhole started.
func (m *MerkleHasher) WriteWhole(p []byte) {
	m.w.Write(p)
}

// EndWhole returns the BLAKE3 hash of the bytes written since BeginWhole.
func (m *MerkleHasher) EndWhole() Digest {
	return m.w.Sum()
}

// Whole is whole(blk) of a block whose rows, packed, are body.
func (m *MerkleHasher) Whole(body []byte) Digest {
	m.BeginWhole()
	m.WriteWhole(body)
	return m.EndWhole()
}

// Inner is the hash of an inner node over l and r.
func (m *MerkleHasher) Inner(l, r Digest) Digest {
	m.in[0] = innerPrefix
	copy(m.in[1:], l[:])
	copy(m.in[1+DigestSize:], r[:])
	return sha256.Sum256(m.in[:])
}

// seal is the block root of a block of n rows whose tree's top node is
// top and whose rows' BLAKE3 hash is whole.
func (m *MerkleHasher) seal(n int, top, whole Digest) Digest {
	var in [1 + binary.MaxVarintLen64 + 2*DigestSize]byte
	in[0] = rootPrefix
	k := 1 + binary.PutUvarint(in[1:], uint64(n))
	k += copy(in[k:], top[:])
	k += copy(in[k:], whole[:])
	return sha256.Sum256(in[:k])
}

// tree is the top node of the tree over leaves (at least one).
func (m *MerkleHasher) tree(leaves []Digest) Digest {
	if len(leaves) == 1 {
		return leaves[0]
	}
	k := splitSize(len(leaves))
	return m.Inner(m.tree(leaves[:k]), m.tree(leaves[k:]))
}

// Root is the block root of a block of n rows whose chunks have the leaf
// hashes leaves (Chunks(n) of them, at least one) and whose rows have
// the BLAKE3 hash whole.
func (m *MerkleHasher) Root(n int, leaves []Digest, whole Digest) Digest {
	return m.seal(n, m.tree(leaves), whole)
}

// BodyRoot is the block root of a block of n rows whose entries are body
// (the packed encoding), chunk i starting at byte starts[i]
// (Chunks(n) offsets).
func (m *MerkleHasher) BodyRoot(body []byte, n int, starts []uint32) Digest {
	return m.Root(n, m.appendChunkLeaves(nil, body, starts), m.Whole(body))
}

// WholeRoot is the block root that a block of n rows whose rows have the
// BLAKE3 hash whole and a whole-block proof's siblings (one, packed: the
// top of the chunk tree) make. Any other size of siblings is an error
// wrapping ErrBadProof.
func (m *MerkleHasher) WholeRoot(n int, whole Digest, siblings []byte) (Digest, error) {
	if n < 1 || n > MaxProofLeaves || len(siblings) != DigestSize {
		return Digest{}, fmt.Errorf("%w: a proof of all %d rows of a block has %d bytes of siblings, want one of %d bytes", ErrBadProof, n, len(siblings), DigestSize)
	}
	return m.seal(n, Digest(siblings), whole), nil
}

// appendChunkLeaves appends the leaf hash of every chunk of body (chunk i
// starting at byte starts[i]) to dst.
func (m *MerkleHasher) appendChunkLeaves(dst []Digest, body []byte, starts []uint32) []Digest {
	for i, s := range starts {
		end := len(body)
		if i+1 < len(starts) {
			end = int(starts[i+1])
		}
		dst = append(dst, m.Leaf(body[s:end]))
	}
	return dst
}

// splitSize is the size of the left subtree of a node over n > 1
// leaves: the largest power of two below n.
func splitSize(n int) int { return 1 << (bits.Len(uint(n-1)) - 1) }

// AppendRangeProof appends to dst the siblings that prove leaves [lo, hi)
// of a tree of m leaves (0 <= lo < hi <= m): the roots of the maximal
// subtrees outside [lo, hi), left to right. node(a, b) returns the root
// of the subtree over leaves [a, b), which is always a node of the tree.
func AppendRangeProof(dst []Digest, m, lo, hi int, node func(a, b int) Digest) []Digest {
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
	walk(0, m)
	return dst
}

// RangeRoot is the block root that leaves (the leaf hashes of chunks
// [lo, lo+len(leaves)) of a block of n rows) and siblings
// (AppendRangeProof's, then whole(blk), packed: 32 bytes each, one after
// another) make. An impossible shape, siblings not a whole number of
// digests, too few or too many siblings is an error wrapping
// ErrBadProof.
func (m *MerkleHasher) RangeRoot(n, lo int, leaves []Digest, siblings []byte) (Digest, error) {
	hi := lo + len(leaves)
	if n < 1 || n > MaxProofLeaves || lo < 0 || len(leaves) == 0 || hi > Chunks(n) {
		return Digest{}, fmt.Errorf("%w: chunks [%d, %d) of a block of %d rows", ErrBadProof, lo, hi, n)
	}
	if len(siblings)%DigestSize != 0 {
		return Digest{}, fmt.Errorf("%w: %d bytes of siblings, not a whole number of %d-byte digests", ErrBadProof, len(siblings), DigestSize)
	}
	w := rangeWalk{m: m, lo: lo, hi: hi, leaves: leaves, siblings: siblings}
	top := w.node(0, Chunks(n))
	if w.missing {
		return Digest{}, fmt.Errorf("%w: %d siblings, the proof needs more", ErrBadProof, len(siblings)/DigestSize)
	}
	if len(w.siblings) != DigestSize {
		return Digest{}, fmt.Errorf("%w: %d siblings, the proof uses %d and the whole block's hash", ErrBadProof,
			len(siblings)/DigestSize, (len(siblings)-len(w.siblings))/DigestSize)
	}
	return m.seal(n, top, Digest(w.siblings)), nil
}

// rangeWalk computes RangeRoot's tree top: the nodes over chunks
// [lo, hi) from leaves, the others from siblings, taken in order.
type rangeWalk struct {
	m        *MerkleHasher
	lo, hi   int
	leaves   []Digest
	siblings []byte // not yet taken
	missing  bool   // siblings ran out
}

// node is the root of the subtree over chunks [a, b).
func (w *rangeWalk) node(a, b int) Digest {
	switch {
	case w.missing:
		return Digest{}
	case b <= w.lo || a >= w.hi:
		if len(w.siblings) < DigestSize {
			w.missing = true
			return Digest{}
		}
		d := Digest(w.siblings[:DigestSize])
		w.siblings = w.siblings[DigestSize:]
		return d
	case b-a == 1:
		return w.leaves[a-w.lo]
	}
	k := splitSize(b - a)
	l := w.node(a, a+k)
	r := w.node(a+k, b)
	return w.m.Inner(l, r)
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

// nodeCost bounds the memory a Block's digest tree takes per chunk: its
// leaf and at most one inner node above it, with room to spare.
const nodeCost = 4 * DigestSize

// blockDigests are the digests of a Block's rows that proofs take
// siblings from.
type blockDigests struct {
	// nodes: every node of the tree in pre-order (a node, the subtree of
	// its left child, that of its right child): the node over chunks
	// [a, c) at index i has its left child (over [a, a+k), k =
	// splitSize(c-a)) at i+1 and its right child at i+2k, since a subtree
	// over k chunks has 2k-1 nodes. nodes[0] is the tree's top.
	nodes []Digest
	whole Digest
}

// digests returns b's digests, computing them on first use: a block's
// rows are hashed once, by the first proof that needs a sibling from it,
// and proofs look siblings up afterwards.
func (b *Block) digests(m *MerkleHasher) *blockDigests {
	if p := b.nodes.Load(); p != nil {
		return p
	}
	d := &blockDigests{nodes: b.treeNodes(m), whole: m.Whole(b.body)}
	b.nodes.Store(d)
	return d
}

// treeNodes computes every node of b's tree (its chunk leaves and each
// node above them), in pre-order (blockDigests.nodes).
func (b *Block) treeNodes(m *MerkleHasher) []Digest {
	leaves := m.appendChunkLeaves(make([]Digest, 0, len(b.restarts)), b.body, b.restarts)
	if len(leaves) == 0 {
		return make([]Digest, 1) // no rows: a zero top, which no root binds
	}
	out := make([]Digest, 2*len(leaves)-1)
	var walk func(lo, hi, i int) Digest
	walk = func(lo, hi, i int) Digest {
		var d Digest
		if hi-lo == 1 {
			d = leaves[lo]
		} else {
			k := splitSize(hi - lo)
			d = m.Inner(walk(lo, lo+k, i+1), walk(lo+k, hi, i+2*k))
		}
		out[i] = d
		return d
	}
	walk(0, len(leaves), 0)
	return out
}

// Root is the block root of b, computed from its rows (the digests kept
// as for proofs).
func (b *Block) Root(m *MerkleHasher) Digest {
	d := b.digests(m)
	return m.seal(int(b.entries), d.nodes[0], d.whole)
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

// rowOffset is the byte offset of row i of the body (0 <= i <=
// Entries(); the end of the body for Entries()).
func (b *Block) rowOffset(i int) int {
	if i >= int(b.entries) {
		return len(b.body)
	}
	off := int(b.restarts[i/RestartInterval])
	for j := i % RestartInterval; j > 0; j-- {
		_, off = b.entry(off)
	}
	return off
}

// PackedRows returns rows [lo, hi) of b in the packed encoding
// (0 <= lo <= hi <= Entries()): a slice of the block, not to be modified.
func (b *Block) PackedRows(lo, hi int) []byte {
	s, e := b.rowOffset(lo), b.rowOffset(hi)
	return b.body[s:e:e]
}

// RangeProof returns the siblings that prove chunks [lo, hi) of b
// against its root (0 <= lo < hi <= Chunks(Entries())), packed, 32 bytes
// each (BlockProof.siblings_packed): AppendRangeProof's and whole(b); for
// all of b's chunks, the one
// sibling of a whole-block proof (WholeRoot).
func (b *Block) RangeProof(m *MerkleHasher, lo, hi int) []byte {
	d := b.digests(m)
	n := Chunks(int(b.entries))
	if lo == 0 && hi == n {
		return append(make([]byte, 0, DigestSize), d.nodes[0][:]...)
	}
	// At most two siblings per level of the tree, and whole(b).
	flat := make([]byte, 0, (2*bits.Len(uint(n))+1)*DigestSize)
	flat = d.appendSiblings(flat, 0, n, 0, lo, hi)
	return append(flat, d.whole[:]...)
}

// appendSiblings appends to flat the nodes that prove chunks [lo, hi)
// within the subtree over chunks [a, c), whose top is nodes[i], as
// AppendRangeProof orders them.
func (d *blockDigests) appendSiblings(flat []byte, a, c, i, lo, hi int) []byte {
	switch {
	case c <= lo || a >= hi:
		return append(flat, d.nodes[i][:]...)
	case lo <= a && c <= hi:
		return flat
	}
	k := splitSize(c - a)
	return d.appendSiblings(d.appendSiblings(flat, a, a+k, i+1, lo, hi), a+k, c, i+2*k, lo, hi)
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
