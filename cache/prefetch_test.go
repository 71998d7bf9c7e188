package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/tablets"
)

// manyStore is a countingStore that also reads many objects in one
// request (ManyGetter), counting the requests; a GetMany waits for
// gate, if set, after it counted.
type manyStore struct {
	*countingStore
	requests atomic.Int64
	gate     chan struct{}
}

func (s *manyStore) GetMany(ctx context.Context, keys []string) (map[string][]byte, error) {
	s.requests.Add(1)
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	out := map[string][]byte{}
	for _, k := range keys {
		if d, err := s.BlockStore.Get(ctx, k); err == nil {
			out[k] = d
		}
	}
	return out, nil
}

// prefetchStore stores n 1 KiB objects k0..k(n-1).
func prefetchStore(t *testing.T, n int) (*manyStore, []string) {
	t.Helper()
	ds := dirStore(t)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
		if err := ds.Put(context.Background(), keys[i], block(1024, uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	return &manyStore{countingStore: &countingStore{BlockStore: ds}}, keys
}

// asIs decodes an object to itself.
func asIs(_ int, data []byte) (any, int64, error) { return data, int64(len(data)), nil }

func decodeAsIs(data []byte) (any, int64, error) { return asIs(0, data) }

// TestPrefetchOneRequest: Prefetch reads the keys not cached with one
// store request and caches them, so that fetches of them are hits; a
// store that reads one object per request gets one Get per key.
func TestPrefetchOneRequest(t *testing.T) {
	ctx := context.Background()
	store, keys := prefetchStore(t, 8)
	f := newCache(t, DefaultConfig()).Fetcher(store)
	if _, _, err := f.FetchDecoded(ctx, keys[0], decodeAsIs); err != nil {
		t.Fatal(err)
	}
	if n := f.Prefetch(ctx, keys, asIs); n != len(keys)-1 {
		t.Errorf("Prefetch read %d objects, want %d (all but the cached one)", n, len(keys)-1)
	}
	if r, g := store.requests.Load(), store.gets.Load(); r != 1 || g != 1 {
		t.Errorf("%d GetMany and %d Get, want 1 and 1 (the first fetch)", r, g)
	}
	for i, k := range keys {
		v, cached, err := f.FetchDecoded(ctx, k, decodeAsIs)
		if err != nil || !cached || !bytes.Equal(v.([]byte), block(1024, uint64(i))) {
			t.Errorf("%s after Prefetch: cached %v, %v", k, cached, err)
		}
	}

	one := &countingStore{BlockStore: store.BlockStore}
	f = newCache(t, DefaultConfig()).Fetcher(one)
	if n := f.Prefetch(ctx, keys, asIs); n != len(keys) || one.gets.Load() != int64(len(keys)) {
		t.Errorf("over a store without GetMany: read %d objects with %d Gets, want %d and %d", n, one.gets.Load(), len(keys), len(keys))
	}
}

// TestPrefetchJoined: a fetch of a key that a Prefetch is reading joins
// its read instead of reading again, and gets the value, or the error a
// fetch alone gives for a key the request did not return.
func TestPrefetchJoined(t *testing.T) {
	ctx := context.Background()
	store, keys := prefetchStore(t, 4)
	store.gate = make(chan struct{})
	f := newCache(t, DefaultConfig()).Fetcher(store)
	missing := "gone"
	done := make(chan int)
	go func() { done <- f.Prefetch(ctx, append([]string{missing}, keys...), asIs) }()
	testutil.Eventually(t, 10*time.Second, "the Prefetch's request", func() bool { return store.requests.Load() == 1 })
	type result struct {
		v   any
		err error
	}
	got := make(chan result, 2)
	for _, k := range []string{keys[2], missing} {
		go func() {
			v, _, err := f.FetchDecoded(ctx, k, decodeAsIs)
			got <- result{v, err}
		}()
	}
	close(store.gate)
	if n := <-done; n != len(keys) {
		t.Errorf("Prefetch read %d objects, want %d", n, len(keys))
	}
	var vals, errs int
	for range 2 {
		r := <-got
		switch {
		case r.err == nil && bytes.Equal(r.v.([]byte), block(1024, 2)):
			vals++
		case errors.Is(r.err, tablets.ErrNotFound):
			errs++
		default:
			t.Errorf("fetch during Prefetch: %v", r.err)
		}
	}
	if vals != 1 || errs != 1 {
		t.Errorf("%d values and %d not-found errors, want 1 and 1", vals, errs)
	}
	// The joined fetch of a key read by the request made no Get; the
	// missing key was read once alone (by the Prefetch's flight, which
	// the fetch joined, or by the fetch itself).
	if g := store.gets.Load(); g < 1 || g > 2 {
		t.Errorf("%d Gets, want 1 or 2 (the missing key only)", g)
	}
	_, _, alone := newCache(t, DefaultConfig()).Fetcher(store).FetchDecoded(ctx, missing, decodeAsIs)
	if alone == nil {
		t.Fatal("fetch of a missing key: no error")
	}
}

// TestPrefetchRefusedNeverCached: an object its decode refuses is not
// cached by Prefetch; the fetch of it reads it again and gets the error.
func TestPrefetchRefusedNeverCached(t *testing.T) {
	ctx := context.Background()
	store, keys := prefetchStore(t, 2)
	f := newCache(t, DefaultConfig()).Fetcher(store)
	bad := errors.New("bad object")
	refuse := func(data []byte) (any, int64, error) { return nil, 0, bad }
	f.Prefetch(ctx, keys, func(int, []byte) (any, int64, error) { return refuse(nil) })
	if _, cached, err := f.FetchDecoded(ctx, keys[0], refuse); cached || !errors.Is(err, bad) {
		t.Errorf("fetch of a refused object: cached %v, %v", cached, err)
	}
}

// TestPrefetchNoRoomLargeScan: a large scan's Prefetch reads nothing when
// the cache has no free room for the objects: they would not be kept.
func TestPrefetchNoRoomLargeScan(t *testing.T) {
	ctx := WithScan(context.Background())
	store, keys := prefetchStore(t, 4)
	f := newCache(t, Config{MaxBytes: 2 * blockSize, BufferItems: 64}).Fetcher(store)
	for range LargeScanReads + 1 {
		noteRead(ctx)
	}
	if n := f.Prefetch(ctx, keys, asIs); n != 0 || store.requests.Load()+store.gets.Load() != 0 {
		t.Errorf("Prefetch into a cache without room: read %d objects", n)
	}
	if n := f.Prefetch(context.Background(), keys, asIs); n != len(keys) {
		t.Errorf("Prefetch outside a scan: read %d objects, want %d", n, len(keys))
	}
}
