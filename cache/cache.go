// Package cache is the host block cache: one ristretto cache per scanserver
// process, keyed by block-store object key (a tablet-file block or index),
// with cost = bytes, shared by every scan-server actor of the process. It
// counts hits, misses, sets, drops and evictions itself and exports them as
// Prometheus collectors, and its Fetcher is the tablets.BlockFetcher that
// readers use: cache first, then one store read per key however many
// readers miss on it at once. Through FetchDecoded (tablets.DecodingFetcher)
// it caches what readers decode instead of raw bytes: verified blocks
// ready for seeking and decoded file indexes, so a block's checksum is
// verified once, when it enters the cache, and an index is decoded once
// per host; a block or index that fails verification never enters it.
//
// Concurrency contract: every method of BlockCache and Fetcher is safe for
// concurrent use, except Close, which must come after the last use.
// Values are shared, not copied: a []byte passed to Set or returned by Get
// or FetchBlock must be treated as read-only by everyone.
//
// Scans mark their fetches (WithScan): past its first blocks, a large
// scan's misses enter the cache only into free room, so that it does not
// evict the hot set.
//
// ristretto is an admission cache: Set may drop a block (full set buffer,
// or the TinyLFU policy judging it less valuable than what it would evict),
// and even an accepted Set becomes visible to Get only after ristretto's
// background goroutine applies it (Wait blocks until then). Never assume a
// block is cached after Set.
package cache

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// blockSize is the typical block size NumCounters is derived from.
const blockSize = 64 << 10

// Config configures a BlockCache.
type Config struct {
	// MaxBytes is the capacity: the sum of the sizes of cached blocks.
	// Default 256 MiB.
	MaxBytes int64
	// NumCounters is the number of TinyLFU access counters (~10× the
	// number of blocks the cache holds when full). 0 = 10 × MaxBytes/64 KiB
	// (at least 1000).
	NumCounters int64
	// BufferItems is the size of ristretto's Get buffers. Default 64.
	BufferItems int64
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{MaxBytes: 256 << 20, BufferItems: 64}
}

// Validate reports the first invalid field by name.
func (c Config) Validate() error {
	switch {
	case c.MaxBytes <= 0:
		return fmt.Errorf("cache: Config.MaxBytes %d: must be positive", c.MaxBytes)
	case c.NumCounters < 0:
		return fmt.Errorf("cache: Config.NumCounters %d: must be >= 0 (0 = derived from MaxBytes)", c.NumCounters)
	case c.BufferItems <= 0:
		return fmt.Errorf("cache: Config.BufferItems %d: must be positive", c.BufferItems)
	}
	return nil
}

func (c Config) numCounters() int64 {
	if c.NumCounters > 0 {
		return c.NumCounters
	}
	return max(10*(c.MaxBytes/blockSize), 1000)
}

// Stats are the cache's counters since New.
type Stats struct {
	Hits         uint64 // Get found the block
	Misses       uint64 // Get did not
	Evictions    uint64 // blocks evicted to make room
	BytesAdded   uint64 // bytes of blocks admitted
	BytesEvicted uint64 // bytes of blocks evicted
	Sets         uint64 // Set calls
	Dropped      uint64 // Sets dropped: full buffer or refused by admission
	Bypassed     uint64 // objects a large scan read without caching them (no free room; WithScan)
	Bytes        int64  // bytes cached now
}

// BlockCache is a byte-bounded cache of immutable blocks. Safe for
// concurrent use.
type BlockCache struct {
	rc       *ristretto.Cache[string, any] // []byte or *decoded
	maxBytes int64

	hits, misses, evictions, bytesEvicted  atomic.Uint64
	sets, dropped, bytesSet, bytesRejected atomic.Uint64
	bypassed                               atomic.Uint64
	closed                                 atomic.Bool
	closeOnce                              sync.Once

	collectorsOnce sync.Once
	collectors     []prometheus.Collector
}

// New builds a cache; it does no IO. Close it when done.
func New(cfg Config) (*BlockCache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &BlockCache{maxBytes: cfg.MaxBytes}
	rc, err := ristretto.NewCache(&ristretto.Config[string, any]{
		NumCounters:        cfg.numCounters(),
		MaxCost:            cfg.MaxBytes,
		BufferItems:        cfg.BufferItems,
		IgnoreInternalCost: true,
		OnEvict: func(it *ristretto.Item[any]) {
			if c.closed.Load() {
				return // Close clears the cache through OnEvict
			}
			c.evictions.Add(1)
			c.bytesEvicted.Add(uint64(it.Cost))
		},
		OnReject: func(it *ristretto.Item[any]) {
			if c.closed.Load() {
				return
			}
			c.dropped.Add(1)
			c.bytesRejected.Add(uint64(it.Cost))
		},
	})
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	c.rc = rc
	return c, nil
}

// cost is what a block counts against MaxBytes; an empty block costs 1 so
// that no entry is free.
func cost(data []byte) int64 { return max(int64(len(data)), 1) }

// decoded is a cached value a reader decoded (and so verified) from an
// object: Fetcher.FetchDecoded caches it instead of the raw bytes.
type decoded struct {
	raw []byte
	v   any
}

// Get returns the cached block (the raw bytes of a decoded value too). The
// slice is shared: do not modify it.
func (c *BlockCache) Get(key string) ([]byte, bool) {
	v, ok := c.get(key)
	if !ok {
		return nil, false
	}
	if d, isDecoded := v.(*decoded); isDecoded {
		return d.raw, true
	}
	return v.([]byte), true
}

// get looks key up and counts the hit or miss.
func (c *BlockCache) get(key string) (any, bool) {
	v, ok := c.rc.Get(key)
	if ok {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
	return v, ok
}

// Set offers a block to the cache and reports whether it was accepted into
// the set buffer. Even then admission may refuse it later, and it becomes
// visible to Get only asynchronously (see Wait). The cache keeps data: the
// caller must not modify it afterwards.
func (c *BlockCache) Set(key string, data []byte) bool {
	return c.set(key, data, cost(data))
}

// setDecoded offers a decoded value (with its raw bytes) at cost bytes.
func (c *BlockCache) setDecoded(key string, raw []byte, v any, n int64) bool {
	return c.set(key, &decoded{raw: raw, v: v}, max(n, cost(raw)))
}

func (c *BlockCache) set(key string, v any, n int64) bool {
	c.sets.Add(1)
	if !c.rc.Set(key, v, n) {
		c.dropped.Add(1)
		return false
	}
	c.bytesSet.Add(uint64(n))
	return true
}

// Del removes key from the cache (asynchronously, like Set).
func (c *BlockCache) Del(key string) { c.rc.Del(key) }

// Wait blocks until every Set made before it has been applied (admitted or
// refused).
func (c *BlockCache) Wait() { c.rc.Wait() }

// Stats returns the counters. Counters are read one by one, so a snapshot
// taken under load may be slightly inconsistent.
func (c *BlockCache) Stats() Stats {
	added := c.bytesSet.Load()
	if r := c.bytesRejected.Load(); r < added {
		added -= r
	} else {
		added = 0
	}
	return Stats{
		Hits:         c.hits.Load(),
		Misses:       c.misses.Load(),
		Evictions:    c.evictions.Load(),
		BytesAdded:   added,
		BytesEvicted: c.bytesEvicted.Load(),
		Sets:         c.sets.Load(),
		Dropped:      c.dropped.Load(),
		Bypassed:     c.bypassed.Load(),
		Bytes:        c.bytes(),
	}
}

// bytes is the cost currently held, from ristretto's policy.
func (c *BlockCache) bytes() int64 {
	if c.closed.Load() {
		return 0
	}
	return c.maxBytes - c.rc.RemainingCost()
}

// hasRoom reports whether n more bytes fit without evicting anything.
func (c *BlockCache) hasRoom(n int64) bool {
	return !c.closed.Load() && c.rc.RemainingCost() >= n
}

// HitRatio is hits/(hits+misses) of Get, 0 before any Get.
func (c *BlockCache) HitRatio() float64 {
	h, m := c.hits.Load(), c.misses.Load()
	if h+m == 0 {
		return 0
	}
	return float64(h) / float64(h+m)
}

// Collectors returns Prometheus collectors reading this cache's counters
// (scanplane_cache_*). Register them once per registry; the same slice is
// returned on every call.
func (c *BlockCache) Collectors() []prometheus.Collector {
	c.collectorsOnce.Do(func() {
		counter := func(name, help string, v *atomic.Uint64) prometheus.Collector {
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
				func() float64 { return float64(v.Load()) })
		}
		c.collectors = []prometheus.Collector{
			counter("scanplane_cache_hits_total", "Block cache lookups that found the block.", &c.hits),
			counter("scanplane_cache_misses_total", "Block cache lookups that did not find the block.", &c.misses),
			counter("scanplane_cache_evictions_total", "Blocks evicted from the block cache to make room.", &c.evictions),
			counter("scanplane_cache_evicted_bytes_total", "Bytes of blocks evicted from the block cache.", &c.bytesEvicted),
			counter("scanplane_cache_sets_total", "Blocks offered to the block cache.", &c.sets),
			counter("scanplane_cache_dropped_total", "Blocks offered to the block cache and not admitted.", &c.dropped),
			counter("scanplane_cache_scan_bypassed_total", "Blocks a large scan read without caching them, the cache having no free room for them.", &c.bypassed),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "scanplane_cache_added_bytes_total", Help: "Bytes of blocks admitted to the block cache.",
			}, func() float64 { return float64(c.Stats().BytesAdded) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "scanplane_cache_bytes", Help: "Bytes of blocks in the block cache.",
			}, func() float64 { return float64(c.bytes()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "scanplane_cache_max_bytes", Help: "Capacity of the block cache in bytes.",
			}, func() float64 { return float64(c.maxBytes) }),
		}
	})
	return c.collectors
}

// Close stops ristretto's goroutines and drops every block. Call it once
// every user has stopped: ristretto does not allow Close concurrently with
// Get or Set. Close may be called more than once.
func (c *BlockCache) Close() {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.rc.Close()
	})
}
