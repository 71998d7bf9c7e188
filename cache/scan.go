package cache

import (
	"context"
	"sync/atomic"
)

// LargeScanReads is how many objects (blocks and indexes, cache hits
// included) a scan fetches through a Fetcher before it counts as large:
// from then on the objects it misses enter the cache only into free room
// (WithScan).
const LargeScanReads = 32

// scanReads counts one scan's fetches.
type scanReads struct{ n atomic.Int64 }

type scanKey struct{}

// WithScan returns ctx marking the fetches made with it (FetchBlock,
// FetchDecoded) as one scan's. Once the scan has fetched LargeScanReads
// objects, an object it misses is cached only if the cache has room for
// it without evicting anything: a large scan fills an empty cache, and
// reads through a full one instead of evicting what other scans keep
// there (the hot set of lookups and short scans). Fetches without the
// mark are cached as usual. Safe for concurrent use by the scan's
// goroutines.
func WithScan(ctx context.Context) context.Context {
	return context.WithValue(ctx, scanKey{}, &scanReads{})
}

// noteRead counts a fetch of ctx's scan and reports whether the scan is
// large.
func noteRead(ctx context.Context) bool {
	s, _ := ctx.Value(scanKey{}).(*scanReads)
	return s != nil && s.n.Add(1) > LargeScanReads
}

// isLarge reports whether ctx's scan is large, without counting a fetch.
func isLarge(ctx context.Context) bool {
	s, _ := ctx.Value(scanKey{}).(*scanReads)
	return s != nil && s.n.Load() > LargeScanReads
}
