package cache

import (
	"context"

	"golang.org/x/sync/singleflight"
)

// ManyGetter is a block store that reads several objects with one
// request (bus.BlockStore). GetMany returns the objects it read, by key;
// a key it leaves out was not read, and Get says why. An error means
// nothing was read.
type ManyGetter interface {
	GetMany(ctx context.Context, keys []string) (map[string][]byte, error)
}

// Prefetcher reads objects ahead of need with one store request
// (Fetcher.Prefetch). Fetchers that wrap a Fetcher pass it through.
type Prefetcher interface {
	Prefetch(ctx context.Context, keys []string, decode func(i int, data []byte) (any, int64, error)) int
}

var _ Prefetcher = (*Fetcher)(nil)

// Prefetch reads the objects under keys that are not cached, with one
// store request if the store is a ManyGetter (else one after another, as
// FetchDecoded does), and offers each, decoded by decode(i, data) for
// keys[i], to the cache as FetchDecoded does. While it runs, FetchDecoded
// calls of those keys join its reads instead of reading again; an object
// the request did not return is read alone (Get) for them, so they get
// the value or the error FetchDecoded would give. A large scan's
// Prefetch (WithScan) reads nothing unless the cache has free room for
// every key at blockSize: what it read would not be kept. Prefetch
// returns once every read it started has ended, with the number of
// objects it read; ctx bounds the reads. Errors are left to the callers
// that fetch the objects.
func (f *Fetcher) Prefetch(ctx context.Context, keys []string, decode func(i int, data []byte) (any, int64, error)) int {
	large := isLarge(ctx)
	if large && !f.cache.hasRoom(int64(len(keys))*blockSize) {
		return 0
	}
	mg, ok := f.store.(ManyGetter)
	if !ok {
		n := 0
		for i, k := range keys {
			if ctx.Err() != nil {
				break
			}
			if _, _, err := f.FetchDecoded(ctx, k, func(b []byte) (any, int64, error) { return decode(i, b) }); err == nil {
				n++
			}
		}
		return n
	}
	var want []string
	var wantAt []int // wantAt[j]: the index in keys of want[j]
	for i, k := range keys {
		if _, ok := f.cache.rc.Get(k); !ok {
			want, wantAt = append(want, k), append(wantAt, i)
		}
	}
	if len(want) == 0 {
		return 0
	}
	// One flight per key, each waiting for the batch's answer: a fetch
	// of the key meanwhile joins it. A key whose flight already ran
	// (another reader's) joins that one instead, and the batch reads it
	// once more, to no harm.
	done := make(chan struct{})
	var got map[string][]byte
	flights := make([]<-chan singleflight.Result, len(want))
	for j, k := range want {
		dec := func(b []byte) (any, int64, error) { return decode(wantAt[j], b) }
		flights[j] = f.group.DoChan(decodedFlight(k), func() (any, error) {
			<-done
			if data, ok := got[k]; ok {
				return f.fill(k, data, dec, large)
			}
			return f.loadDecoded(ctx, k, dec, large)
		})
	}
	got, _ = mg.GetMany(ctx, want)
	close(done)
	for _, ch := range flights {
		<-ch
	}
	return len(got)
}
