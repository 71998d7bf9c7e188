package tabletstream

import (
	"bytes"
	"sync"
	"sync/atomic"

	"github.com/scanplane/scanplane/tablets"
)

// ProvenLeaves keeps the leaf hashes of row chunks (the leaves of a
// block's row digest tree) that verifiers proved against a block root,
// by root, and, within a budget of bytes, the chunks' packed rows. A
// chunk whose rows equal, byte for byte, rows kept under the block's
// root at its position has that kept leaf without being hashed; the
// other chunks' rows are hashed. A proof whose leaves are all kept under
// the block's root is proven without its siblings: the inner nodes and
// the root are not hashed. A leaf that differs (a forged, missing, added
// or reordered row) sends the proof through the whole check, as without
// it.
//
// It keeps the leaves of at most its budget of chunks, dropping a
// block's leaves and rows at random when a new block needs room, and the
// rows of at most its budget of bytes, dropping a block's rows (not its
// leaves) at random when new rows need room. Safe for concurrent use.
type ProvenLeaves struct {
	shards [leafShards]leafShard
}

const leafShards = 16

type leafShard struct {
	mu          sync.Mutex
	blocks      map[tablets.Digest]*provenBlock
	chunks      int // leaves of the blocks held
	budget      int
	bytes       int // rows' bytes of the blocks held
	bytesBudget int
}

// provenBlock is the proven leaves of the block of n rows whose root is
// the map's key: leaves[i] is chunk i's when proven[i]. rows[i], when
// set, is chunk i's packed rows and leaf; it is set once, under the
// shard's lock, and read without it.
type provenBlock struct {
	n      int
	leaves []tablets.Digest
	proven []bool
	rows   []atomic.Pointer[keptChunk] // nil: no rows kept (no budget)
	bytes  int                         // bytes of the rows kept
}

// keptChunk is a chunk's packed rows and the leaf they hash to, proven
// against the block's root.
type keptChunk struct {
	leaf tablets.Digest
	rows []byte
}

// NewProvenLeaves returns a ProvenLeaves of about chunks leaves and
// about rowBytes bytes of rows (nil when chunks <= 0: none kept; no rows
// kept when rowBytes <= 0).
func NewProvenLeaves(chunks, rowBytes int) *ProvenLeaves {
	if chunks <= 0 {
		return nil
	}
	p := &ProvenLeaves{}
	for i := range p.shards {
		p.shards[i] = leafShard{blocks: map[tablets.Digest]*provenBlock{}, budget: max(chunks/leafShards, 1),
			bytesBudget: max(rowBytes, 0) / leafShards}
	}
	return p
}

func (p *ProvenLeaves) shard(root tablets.Digest) *leafShard {
	return &p.shards[root[0]%leafShards]
}

// block returns the kept block of n rows with root root, or nil (also
// when p is nil or keeps no rows).
func (p *ProvenLeaves) block(root tablets.Digest, n int) *provenBlock {
	if p == nil {
		return nil
	}
	s := p.shard(root)
	if s.bytesBudget == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.blocks[root]; b != nil && b.n == n && b.rows != nil {
		return b
	}
	return nil
}

// kept returns chunk i's kept rows and leaf, or nil.
func (b *provenBlock) kept(i int) *keptChunk {
	if b == nil || i < 0 || i >= len(b.rows) {
		return nil
	}
	return b.rows[i].Load()
}

// proven reports whether leaves are chunks [lo, lo+len(leaves)) of the
// block of n rows with root root, all proven before.
func (p *ProvenLeaves) proven(root tablets.Digest, n, lo int, leaves []tablets.Digest) bool {
	s := p.shard(root)
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.blocks[root]
	if b == nil || b.n != n || lo < 0 || lo+len(leaves) > len(b.leaves) {
		return false
	}
	for i, l := range leaves {
		if !b.proven[lo+i] || b.leaves[lo+i] != l {
			return false
		}
	}
	return true
}

// add keeps leaves, proven as chunks [lo, lo+len(leaves)) of the block
// of n rows with root root.
func (p *ProvenLeaves) add(root tablets.Digest, n, lo int, leaves []tablets.Digest) {
	c := tablets.Chunks(n)
	if lo < 0 || lo+len(leaves) > c {
		return
	}
	s := p.shard(root)
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.blocks[root]
	if b == nil || b.n != n {
		if c > s.budget {
			return
		}
		if b != nil {
			s.drop(root, b)
		}
		for r, o := range s.blocks { // map order: a block at random
			if s.chunks+c <= s.budget {
				break
			}
			s.drop(r, o)
		}
		b = &provenBlock{n: n, leaves: make([]tablets.Digest, c), proven: make([]bool, c)}
		if s.bytesBudget > 0 {
			b.rows = make([]atomic.Pointer[keptChunk], c)
		}
		s.blocks[root] = b
		s.chunks += c
	}
	for i, l := range leaves {
		b.leaves[lo+i], b.proven[lo+i] = l, true
	}
}

// drop removes block b, kept under root r.
func (s *leafShard) drop(r tablets.Digest, b *provenBlock) {
	delete(s.blocks, r)
	s.chunks -= len(b.leaves)
	s.bytes -= b.bytes
}

// dropRows forgets the rows kept of block b; its leaves stay.
func (s *leafShard) dropRows(b *provenBlock) {
	if b.bytes == 0 {
		return
	}
	for i := range b.rows {
		b.rows[i].Store(nil)
	}
	s.bytes -= b.bytes
	b.bytes = 0
}

// addRows keeps the rows of the chunks of f (the feed of a proof of
// chunks from lo of the block of n rows with root root, checked against
// root) that it hashed and still has, for the chunks whose leaves are
// kept and proven.
func (p *ProvenLeaves) addRows(root tablets.Digest, n, lo int, f *leafFeed) {
	s := p.shard(root)
	if s.bytesBudget == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.blocks[root]
	if b == nil || b.n != n || b.rows == nil {
		return
	}
	for i := range min(len(f.leaves), len(f.hashed)) {
		h := &f.hashed[i]
		c := lo + i
		if h.n <= 0 || c >= len(b.rows) || !b.proven[c] || b.leaves[c] != f.leaves[i] || b.rows[c].Load() != nil {
			continue
		}
		size := h.size()
		for _, o := range s.blocks { // map order: a block at random
			if s.bytes+size <= s.bytesBudget {
				break
			}
			if o != b {
				s.dropRows(o)
			}
		}
		if s.bytes+size > s.bytesBudget {
			return
		}
		rows := make([]byte, 0, size)
		for _, q := range h.p[:h.n] {
			rows = append(rows, q...)
		}
		b.rows[c].Store(&keptChunk{leaf: f.leaves[i], rows: rows})
		b.bytes += size
		s.bytes += size
	}
}

// Len is the number of blocks with leaves kept.
func (p *ProvenLeaves) Len() int {
	n := 0
	for i := range p.shards {
		s := &p.shards[i]
		s.mu.Lock()
		n += len(s.blocks)
		s.mu.Unlock()
	}
	return n
}

// RowBytes is the number of bytes of rows kept.
func (p *ProvenLeaves) RowBytes() int {
	n := 0
	for i := range p.shards {
		s := &p.shards[i]
		s.mu.Lock()
		n += s.bytes
		s.mu.Unlock()
	}
	return n
}

// maxPieces is how many pieces (of a proof's head, batches, its tail) a
// chunk's rows may come in for the leafFeed to compare them with kept
// rows or keep them; a chunk in more is hashed as it comes.
const maxPieces = 3

// pieces is a chunk's packed rows, in pieces, not hashed yet; n < 0:
// more than maxPieces, hashed as they came.
type pieces struct {
	p [maxPieces][]byte
	n int
}

func (c *pieces) size() int {
	k := 0
	for _, q := range c.p[:max(c.n, 0)] {
		k += len(q)
	}
	return k
}

// equal reports whether c's pieces, end to end, are b.
func (c *pieces) equal(b []byte) bool {
	if c.n < 0 || c.size() != len(b) {
		return false
	}
	for _, q := range c.p[:c.n] {
		if !bytes.Equal(q, b[:len(q)]) {
			return false
		}
		b = b[len(q):]
	}
	return true
}
