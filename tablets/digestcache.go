package tablets

import (
	"sync"
	"sync/atomic"
)

// DigestCache keeps the row digest trees of blocks (every node and the
// whole block's hash, what proofs take siblings from) apart from the
// blocks, by object key and block checksum, up to a byte budget, oldest
// out first. A block read again after the host cache dropped it then
// proves rows without hashing all of them again: a block's digests take
// a small fraction of its bytes, so the budget holds the digests of
// many more blocks than the block cache holds blocks. Provers use it
// (Prover.UseDigests); it holds no rows, only hashes of them. Safe for
// concurrent use.
type DigestCache struct {
	max int64

	mu    sync.Mutex
	bytes int64
	m     map[digestKey]*blockDigests
	order []digestKey // oldest first; order[head:] are live
	head  int

	hits, misses atomic.Uint64
}

// digestKey names a block by its object key and the checksum of its
// body: a block of another body under the same key is another entry.
type digestKey struct {
	key string
	crc uint32
}

// NewDigestCache returns an empty DigestCache of maxBytes (> 0).
func NewDigestCache(maxBytes int64) *DigestCache {
	return &DigestCache{max: maxBytes, m: map[digestKey]*blockDigests{}}
}

// DigestCacheStats counts a DigestCache's lookups: blocks whose digests
// it had (Hits) and did not have (Misses), and its Bytes.
type DigestCacheStats struct {
	Hits, Misses uint64
	Bytes        int64
}

// Stats returns the cache's counts.
func (c *DigestCache) Stats() DigestCacheStats {
	c.mu.Lock()
	n := c.bytes
	c.mu.Unlock()
	return DigestCacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Bytes: n}
}

// digestsCost is the memory the digests of a block take in the cache.
func digestsCost(k digestKey, d *blockDigests) int64 {
	return int64(len(k.key)) + int64(len(d.nodes))*nodeCost/2 + 2*DigestSize
}

func (c *DigestCache) get(k digestKey) *blockDigests {
	c.mu.Lock()
	d := c.m[k]
	c.mu.Unlock()
	if d == nil {
		c.misses.Add(1)
	} else {
		c.hits.Add(1)
	}
	return d
}

func (c *DigestCache) put(k digestKey, d *blockDigests) {
	n := digestsCost(k, d)
	if n > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; ok {
		return
	}
	for c.bytes+n > c.max && c.head < len(c.order) {
		old := c.order[c.head]
		c.order[c.head] = digestKey{}
		c.head++
		if od, ok := c.m[old]; ok {
			c.bytes -= digestsCost(old, od)
			delete(c.m, old)
		}
	}
	if c.head > len(c.order)/2 {
		c.order = c.order[:copy(c.order, c.order[c.head:])]
		c.head = 0
	}
	c.m[k] = d
	c.order = append(c.order, k)
	c.bytes += n
}

// withDigests returns blk's digests: those it has, else those c keeps
// for it (then blk keeps them too), else computed with m and offered to
// c. c may be nil.
func (c *DigestCache) withDigests(key string, blk *Block, m *MerkleHasher) *blockDigests {
	if d := blk.nodes.Load(); d != nil || c == nil {
		return blk.digests(m)
	}
	k := digestKey{key: key, crc: blk.crc}
	if d := c.get(k); d != nil {
		blk.nodes.CompareAndSwap(nil, d)
		return blk.nodes.Load()
	}
	d := blk.digests(m)
	c.put(k, d)
	return d
}
