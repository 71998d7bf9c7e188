package tabletstream

import (
	"sync"

	"github.com/scanplane/scanplane/tablets"
)

// ProvenLeaves keeps the leaf hashes of row chunks (the leaves of a
// block's row digest tree) that verifiers proved against a block root,
// by root. A proof whose chunks hash to leaves all kept under the
// block's root is proven without its siblings: the chunks' rows are
// still hashed, the inner nodes and the root are not. A leaf that
// differs (a forged, missing, added or reordered row) sends the proof
// through the whole check, as without it.
//
// It keeps the leaves of at most its budget of chunks, dropping a block's
// leaves at random when a new block needs room. Safe for concurrent use.
type ProvenLeaves struct {
	shards [leafShards]leafShard
}

const leafShards = 16

type leafShard struct {
	mu     sync.Mutex
	blocks map[tablets.Digest]*provenBlock
	chunks int // leaves of the blocks held
	budget int
}

// provenBlock is the proven leaves of the block of n rows whose root is
// the map's key: leaves[i] is chunk i's when proven[i].
type provenBlock struct {
	n      int
	leaves []tablets.Digest
	proven []bool
}

// NewProvenLeaves returns a ProvenLeaves of about chunks leaves (nil when
// chunks <= 0: none kept).
func NewProvenLeaves(chunks int) *ProvenLeaves {
	if chunks <= 0 {
		return nil
	}
	p := &ProvenLeaves{}
	for i := range p.shards {
		p.shards[i] = leafShard{blocks: map[tablets.Digest]*provenBlock{}, budget: max(chunks/leafShards, 1)}
	}
	return p
}

func (p *ProvenLeaves) shard(root tablets.Digest) *leafShard {
	return &p.shards[root[0]%leafShards]
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
			delete(s.blocks, root)
			s.chunks -= len(b.leaves)
		}
		for r, o := range s.blocks { // map order: a block at random
			if s.chunks+c <= s.budget {
				break
			}
			delete(s.blocks, r)
			s.chunks -= len(o.leaves)
		}
		b = &provenBlock{n: n, leaves: make([]tablets.Digest, c), proven: make([]bool, c)}
		s.blocks[root] = b
		s.chunks += c
	}
	for i, l := range leaves {
		b.leaves[lo+i], b.proven[lo+i] = l, true
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
