package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scanplane/scanplane/tablets"
)

func newCache(tb testing.TB, cfg Config) *BlockCache {
	tb.Helper()
	c, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

func block(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// countingStore wraps a real store, counts Get calls, and optionally holds
// every Get until gate is closed or fails the first failures Gets.
type countingStore struct {
	tablets.BlockStore
	gets     atomic.Int64
	gate     chan struct{}
	failures atomic.Int64
}

var errInjected = errors.New("injected store failure")

func (s *countingStore) Get(ctx context.Context, key string) ([]byte, error) {
	s.gets.Add(1)
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if s.failures.Add(-1) >= 0 {
		return nil, errInjected
	}
	return s.BlockStore.Get(ctx, key)
}

func dirStore(tb testing.TB) *tablets.DirStore {
	tb.Helper()
	s, err := tablets.NewDirStore(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// storeWith returns a DirStore holding data under key.
func storeWith(tb testing.TB, key string, data []byte) *tablets.DirStore {
	tb.Helper()
	s := dirStore(tb)
	if err := s.Put(context.Background(), key, data); err != nil {
		tb.Fatal(err)
	}
	return s
}

// gatedFetcher returns a fetcher with a fresh cache over a countingStore
// on ds whose Gets wait until store.gate is closed. Call it inside the
// synctest bubble, so that the cache's goroutines belong to it (the cache
// is closed by a Cleanup, which runs inside the bubble).
func gatedFetcher(t *testing.T, ds tablets.BlockStore) (*countingStore, *Fetcher) {
	t.Helper()
	store := &countingStore{BlockStore: ds, gate: make(chan struct{})}
	return store, newCache(t, DefaultConfig()).Fetcher(store)
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	for _, tc := range []struct {
		field string
		cfg   Config
	}{
		{"MaxBytes", Config{MaxBytes: 0, BufferItems: 64}},
		{"NumCounters", Config{MaxBytes: 1, NumCounters: -1, BufferItems: 64}},
		{"BufferItems", Config{MaxBytes: 1}},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
		}
		if _, err := New(tc.cfg); err == nil {
			t.Errorf("New(%+v) succeeded", tc.cfg)
		}
	}
	if got := DefaultConfig().numCounters(); got != 10*(256<<20)/(64<<10) {
		t.Errorf("default NumCounters = %d", got)
	}
}

func TestGetSetStats(t *testing.T) {
	c := newCache(t, DefaultConfig())
	if c.HitRatio() != 0 {
		t.Fatalf("HitRatio before any Get = %v", c.HitRatio())
	}
	if _, ok := c.Get("a"); ok {
		t.Fatal("hit on an empty cache")
	}
	a, b := block(64<<10, 1), block(1000, 2)
	if !c.Set("a", a) || !c.Set("b", b) {
		t.Fatal("Set dropped on an idle, empty cache")
	}
	c.Wait()
	for _, k := range []string{"a", "a", "b"} {
		if _, ok := c.Get(k); !ok {
			t.Fatalf("miss on %q after Set and Wait", k)
		}
	}
	if got, _ := c.Get("a"); !bytes.Equal(got, a) {
		t.Fatal("Get returned other bytes")
	}
	_, _ = c.Get("zzz")
	st := c.Stats()
	want := Stats{Hits: 4, Misses: 2, Sets: 2, BytesAdded: uint64(len(a) + len(b)), Bytes: int64(len(a) + len(b))}
	if st != want {
		t.Fatalf("Stats = %+v, want %+v", st, want)
	}
	if r := c.HitRatio(); r != 4.0/6 {
		t.Fatalf("HitRatio = %v, want %v", r, 4.0/6)
	}

	// A block larger than the whole cache is refused by admission.
	small := newCache(t, Config{MaxBytes: 1 << 10, BufferItems: 64})
	small.Set("big", block(2<<10, 3))
	small.Wait()
	if _, ok := small.Get("big"); ok {
		t.Fatal("block larger than MaxBytes was cached")
	}
	if st := small.Stats(); st.Dropped != 1 || st.BytesAdded != 0 || st.Bytes != 0 {
		t.Fatalf("Stats after an oversized Set = %+v", st)
	}
}

func TestEvictionCounted(t *testing.T) {
	const blk, maxBytes = 16 << 10, 256 << 10
	c := newCache(t, Config{MaxBytes: maxBytes, BufferItems: 64})
	for i := range 64 {
		c.Set(fmt.Sprint("k", i), block(blk, uint64(i)))
		c.Wait()
	}
	st := c.Stats()
	if st.Evictions == 0 || st.BytesEvicted != st.Evictions*blk {
		t.Fatalf("Stats = %+v: want evictions of %d-byte blocks", st, blk)
	}
	if st.Bytes > maxBytes || st.Bytes <= 0 {
		t.Fatalf("Bytes = %d, want in (0, %d]", st.Bytes, maxBytes)
	}
	if int64(st.BytesAdded)-int64(st.BytesEvicted) != st.Bytes {
		t.Fatalf("added %d - evicted %d != cached %d", st.BytesAdded, st.BytesEvicted, st.Bytes)
	}
	if st.Sets != 64 || st.BytesAdded+uint64(st.Dropped)*blk != 64*blk {
		t.Fatalf("Stats = %+v: every Set is either added or dropped", st)
	}
	cached := 0
	for i := range 64 {
		if _, ok := c.Get(fmt.Sprint("k", i)); ok {
			cached++
		}
	}
	if cached*blk != int(st.Bytes) {
		t.Fatalf("%d blocks cached, Bytes = %d", cached, st.Bytes)
	}
}

func TestCollectors(t *testing.T) {
	c := newCache(t, DefaultConfig())
	reg := prometheus.NewPedanticRegistry()
	for _, col := range c.Collectors() {
		if err := reg.Register(col); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := c.Collectors(), c.Collectors(); a[0] != b[0] {
		t.Fatal("Collectors returns new collectors on every call")
	}
	c.Set("a", block(100, 1))
	c.Wait()
	c.Get("a")
	c.Get("b")
	c.Get("c")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		got[mf.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	if len(got) != len(c.Collectors()) {
		t.Fatalf("gathered %d metrics, want %d: %v", len(got), len(c.Collectors()), got)
	}
	for name, want := range map[string]float64{
		"scanplane_cache_hits_total":        1,
		"scanplane_cache_misses_total":      2,
		"scanplane_cache_evictions_total":   0,
		"scanplane_cache_bytes":             100,
		"scanplane_cache_added_bytes_total": 100,
		"scanplane_cache_max_bytes":         256 << 20,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}

func TestFetcherHitAndMiss(t *testing.T) {
	ctx := context.Background()
	data := block(64<<10, 9)
	store := &countingStore{BlockStore: storeWith(t, "f1.b0", data)}
	f := newCache(t, DefaultConfig()).Fetcher(store)
	got, cached, err := f.FetchBlock(ctx, "f1.b0")
	if err != nil || cached || !bytes.Equal(got, data) {
		t.Fatalf("first fetch: cached=%v err=%v equal=%v", cached, err, bytes.Equal(got, data))
	}
	got, cached, err = f.FetchBlock(ctx, "f1.b0")
	if err != nil || !cached || !bytes.Equal(got, data) {
		t.Fatalf("second fetch: cached=%v err=%v", cached, err)
	}
	if n := store.gets.Load(); n != 1 {
		t.Fatalf("%d store reads, want 1", n)
	}
	_, _, err = f.FetchBlock(ctx, "f1.b1")
	if !errors.Is(err, tablets.ErrNotFound) || !strings.Contains(err.Error(), "f1.b1") {
		t.Fatalf("missing block: %v", err)
	}
}

// N concurrent fetches of one key while the store read is in progress:
// one store read, every caller gets the block.
func TestFetcherSingleflight(t *testing.T) {
	const n = 32
	data := block(64<<10, 5)
	ds := storeWith(t, "f.b7", data)
	synctest.Test(t, func(t *testing.T) {
		store, f := gatedFetcher(t, ds)
		var wg sync.WaitGroup
		var wrong, hits atomic.Int64
		for range n {
			wg.Go(func() {
				got, cached, err := f.FetchBlock(context.Background(), "f.b7")
				if err != nil || !bytes.Equal(got, data) {
					wrong.Add(1)
				}
				if cached {
					hits.Add(1)
				}
			})
		}
		synctest.Wait() // every goroutine is blocked: one in the store, the rest joined it
		if g := store.gets.Load(); g != 1 {
			t.Errorf("%d store reads in flight, want 1", g)
		}
		close(store.gate)
		wg.Wait()
		if wrong.Load() != 0 || hits.Load() != 0 {
			t.Fatalf("%d callers got wrong data or an error, %d claimed a cache hit", wrong.Load(), hits.Load())
		}
		if g := store.gets.Load(); g != 1 {
			t.Fatalf("%d store reads, want 1", g)
		}
		if _, cached, err := f.FetchBlock(context.Background(), "f.b7"); err != nil || !cached {
			t.Fatalf("fetch after the flight: cached=%v err=%v", cached, err)
		}
	})
}

// The caller that started a shared read gives up: the others still get
// the block, by a new read.
func TestFetcherLeaderCancelled(t *testing.T) {
	data := block(1000, 6)
	ds := storeWith(t, "k", data)
	synctest.Test(t, func(t *testing.T) {
		store, f := gatedFetcher(t, ds)
		leaderCtx, cancel := context.WithCancel(context.Background())
		leaderErr := make(chan error, 1)
		go func() {
			_, _, err := f.FetchBlock(leaderCtx, "k")
			leaderErr <- err
		}()
		synctest.Wait() // the leader is in the store
		followerDone := make(chan error, 1)
		go func() {
			got, _, err := f.FetchBlock(context.Background(), "k")
			if err == nil && !bytes.Equal(got, data) {
				err = errors.New("wrong data")
			}
			followerDone <- err
		}()
		synctest.Wait() // the follower joined
		cancel()
		if err := <-leaderErr; !errors.Is(err, context.Canceled) {
			t.Fatalf("leader: %v", err)
		}
		synctest.Wait() // the follower started its own read
		close(store.gate)
		if err := <-followerDone; err != nil {
			t.Fatalf("follower: %v", err)
		}
		if g := store.gets.Load(); g != 2 {
			t.Fatalf("%d store reads, want 2", g)
		}
	})
}

func TestFetcherErrorNotCached(t *testing.T) {
	ctx := context.Background()
	store := &countingStore{BlockStore: storeWith(t, "f.b0", []byte("block"))}
	store.failures.Store(1)
	c := newCache(t, DefaultConfig())
	f := c.Fetcher(store)
	_, _, err := f.FetchBlock(ctx, "f.b0")
	if !errors.Is(err, errInjected) || !strings.Contains(err.Error(), "f.b0") {
		t.Fatalf("fetch with a failing store: %v", err)
	}
	c.Wait()
	if st := c.Stats(); st.Sets != 0 || st.Bytes != 0 {
		t.Fatalf("a failed read reached the cache: %+v", st)
	}
	got, cached, err := f.FetchBlock(ctx, "f.b0")
	if err != nil || cached || string(got) != "block" {
		t.Fatalf("fetch after the failure: %q cached=%v err=%v", got, cached, err)
	}
	if g := store.gets.Load(); g != 2 {
		t.Fatalf("%d store reads, want 2 (the error was not cached)", g)
	}
}

func TestFetcherContextDone(t *testing.T) {
	f := newCache(t, DefaultConfig()).Fetcher(dirStore(t))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := f.FetchBlock(ctx, "x"); !errors.Is(err, context.Canceled) {
		t.Fatalf("fetch with a cancelled context: %v", err)
	}
}

// BenchmarkBlockRead compares reading a 64 KiB block from the host cache
// with reading it from a local-directory store. The JetStream store has
// its benchmark in bus (BenchmarkBlockStoreGet64K): cache may not import
// bus.
func BenchmarkBlockRead(b *testing.B) {
	data := block(64<<10, 42)
	ctx := context.Background()
	const nKeys = 64
	keys := make([]string, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench.b%d", i)
	}
	ds := dirStore(b)
	for _, k := range keys {
		if err := ds.Put(ctx, k, data); err != nil {
			b.Fatal(err)
		}
	}
	c := newCache(b, DefaultConfig())
	f := c.Fetcher(ds)
	for _, k := range keys {
		if _, _, err := f.FetchBlock(ctx, k); err != nil {
			b.Fatal(err)
		}
	}
	check := func(b *testing.B, got []byte, err error) {
		if err != nil || len(got) != len(data) {
			b.Fatalf("read %d bytes, %v", len(got), err)
		}
	}

	// A hit returns the cached slice itself and copies nothing, so the
	// hit benchmarks time a lookup and report no MB/s: a byte rate of a
	// call that moves no bytes would be a meaningless figure.
	b.Run("cache-hit", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			got, cached, err := f.FetchBlock(ctx, keys[i%nKeys])
			check(b, got, err)
			if !cached {
				b.Fatal("miss")
			}
		}
	})
	b.Run("cache-hit-parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				got, _, err := f.FetchBlock(ctx, keys[i%nKeys])
				check(b, got, err)
			}
		})
	})
	b.Run("store-dir", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for i := 0; b.Loop(); i++ {
			got, err := ds.Get(ctx, keys[i%nKeys])
			check(b, got, err)
		}
	})
}
