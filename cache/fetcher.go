package cache

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/singleflight"

	"github.com/scanplane/scanplane/tablets"
)

// maxJoins bounds how often one FetchBlock joins another caller's store
// read that then failed because that caller's context ended.
const maxJoins = 3

// Fetcher is a tablets.BlockFetcher reading through a BlockCache: a hit is
// served from the cache; concurrent misses of one key share a single store
// read (singleflight), whose result is offered to the cache. Store errors
// are returned wrapped with the key and never cached. Safe for concurrent
// use; the returned data is shared and read-only.
type Fetcher struct {
	cache *BlockCache
	store tablets.BlockStore
	group singleflight.Group
}

var _ tablets.BlockFetcher = (*Fetcher)(nil)

// Fetcher returns a fetcher over store through this cache. Several fetchers
// (one per store) may share one cache if their keys do not collide.
func (c *BlockCache) Fetcher(store tablets.BlockStore) *Fetcher {
	return &Fetcher{cache: c, store: store}
}

var _ tablets.DecodingFetcher = (*Fetcher)(nil)

// FetchBlock returns the block under key. cached is true when it came from
// the cache; a call that waited for a store read (its own or one it joined)
// reports false.
//
// A joined read runs under the context of the caller that started it; if
// that context ends, callers whose own context is still live start a new
// read instead of failing.
func (f *Fetcher) FetchBlock(ctx context.Context, key string) ([]byte, bool, error) {
	large := noteRead(ctx)
	if data, ok := f.cache.Get(key); ok {
		return data, true, nil
	}
	v, err := f.flight(ctx, key, key, func() (any, error) { return f.load(ctx, key, large) })
	if err != nil {
		return nil, false, err
	}
	return v.([]byte), false, nil
}

// FetchDecoded implements tablets.DecodingFetcher: it returns the value
// cached under key, or reads the object (one store read and one decode
// however many callers miss on key at once), decodes it and offers the
// value to the cache at the cost decode names. A value decode refuses is
// returned as its error and never cached. If key holds raw bytes cached by
// FetchBlock, they are decoded now and replaced by the value, or, if
// decode refuses them, dropped from the cache.
func (f *Fetcher) FetchDecoded(ctx context.Context, key string, decode func([]byte) (any, int64, error)) (any, bool, error) {
	large := noteRead(ctx)
	if v, ok := f.cache.get(key); ok {
		switch x := v.(type) {
		case *decoded:
			return x.v, true, nil
		case []byte:
			dv, n, err := decode(x)
			if err != nil {
				f.cache.Del(key)
				return nil, false, fmt.Errorf("cache: fetch %s: %w", key, err)
			}
			f.cache.setDecoded(key, x, dv, n)
			return dv, true, nil
		}
	}
	v, err := f.flight(ctx, decodedFlight(key), key, func() (any, error) {
		return f.loadDecoded(ctx, key, decode, large)
	})
	return v, false, err
}

// loadDecoded reads key from the store and fills the cache with its
// decoded value (fill).
func (f *Fetcher) loadDecoded(ctx context.Context, key string, decode func([]byte) (any, int64, error), large bool) (any, error) {
	data, err := f.store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("cache: fetch %s: %w", key, err)
	}
	return f.fill(key, data, decode, large)
}

// decodedFlight is the flight key of a decoded fetch of key. Flights of
// decoded values are apart from raw ones: their results differ in type.
// "\x00" never occurs in an object key.
func decodedFlight(key string) string { return "\x00" + key }

// fill decodes the object read under key and offers the value to the
// cache (for a large scan only into free room; see WithScan), waiting
// until the cache applied it, so that a caller arriving after the flight
// finds it cached rather than reading it again.
func (f *Fetcher) fill(key string, data []byte, decode func([]byte) (any, int64, error), large bool) (any, error) {
	dv, n, err := decode(data)
	if err != nil {
		return nil, fmt.Errorf("cache: fetch %s: %w", key, err)
	}
	if large && !f.cache.hasRoom(max(n, cost(data))) {
		f.cache.bypassed.Add(1)
	} else if f.cache.setDecoded(key, data, dv, n) {
		f.cache.Wait()
	}
	return dv, nil
}

// flight runs load once for all concurrent callers of the same flight
// key, as FetchBlock documents.
func (f *Fetcher) flight(ctx context.Context, fkey, key string, load func() (any, error)) (any, error) {
	for joins := 0; ; joins++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("cache: fetch %s: %w", key, err)
		}
		ch := f.group.DoChan(fkey, load)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cache: fetch %s: %w", key, ctx.Err())
		case r := <-ch:
			if r.Err == nil {
				return r.Val, nil
			}
			if r.Shared && ctx.Err() == nil && isContextErr(r.Err) && joins < maxJoins {
				continue // the leader's context ended, not ours
			}
			return nil, r.Err
		}
	}
}

// load reads key from the store and offers it to the cache (for a large
// scan only if it fits without evicting; see WithScan). It waits for
// the cache to apply the Set before the flight ends, so a caller arriving
// after this read finds the block cached (unless admission refused it)
// rather than reading it again.
func (f *Fetcher) load(ctx context.Context, key string, large bool) ([]byte, error) {
	data, err := f.store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("cache: fetch %s: %w", key, err)
	}
	if large && !f.cache.hasRoom(cost(data)) {
		f.cache.bypassed.Add(1)
	} else if f.cache.Set(key, data) {
		f.cache.Wait()
	}
	return data, nil
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
