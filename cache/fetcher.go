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

// FetchBlock returns the block under key. cached is true when it came from
// the cache; a call that waited for a store read (its own or one it joined)
// reports false.
//
// A joined read runs under the context of the caller that started it; if
// that context ends, callers whose own context is still live start a new
// read instead of failing.
func (f *Fetcher) FetchBlock(ctx context.Context, key string) ([]byte, bool, error) {
	if data, ok := f.cache.Get(key); ok {
		return data, true, nil
	}
	for joins := 0; ; joins++ {
		if err := ctx.Err(); err != nil {
			return nil, false, fmt.Errorf("cache: fetch %s: %w", key, err)
		}
		ch := f.group.DoChan(key, func() (any, error) { return f.load(ctx, key) })
		select {
		case <-ctx.Done():
			return nil, false, fmt.Errorf("cache: fetch %s: %w", key, ctx.Err())
		case r := <-ch:
			if r.Err == nil {
				return r.Val.([]byte), false, nil
			}
			if r.Shared && ctx.Err() == nil && isContextErr(r.Err) && joins < maxJoins {
				continue // the leader's context ended, not ours
			}
			return nil, false, r.Err
		}
	}
}

// load reads key from the store and offers it to the cache. It waits for
// the cache to apply the Set before the flight ends, so a caller arriving
// after this read finds the block cached (unless admission refused it)
// rather than reading it again.
func (f *Fetcher) load(ctx context.Context, key string) ([]byte, error) {
	data, err := f.store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("cache: fetch %s: %w", key, err)
	}
	if f.cache.Set(key, data) {
		f.cache.Wait()
	}
	return data, nil
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
