package tablets

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/scanplane/scanplane/messages"
)

// hostCacheFetcher stands in for the host cache (package cache imports
// tablets, so tablets' tests cannot use it; cache has
// BenchmarkSeekOneRowHostCache): every object is in memory and every fetch
// is a hit; decoded values are kept as the host cache keeps them.
type hostCacheFetcher struct {
	mu      sync.Mutex
	objs    map[string][]byte
	decoded map[string]any
}

func (h *hostCacheFetcher) FetchDecoded(ctx context.Context, key string, decode func([]byte) (any, int64, error)) (any, bool, error) {
	h.mu.Lock()
	v, ok := h.decoded[key]
	h.mu.Unlock()
	if ok {
		return v, true, nil
	}
	data, _, err := h.FetchBlock(ctx, key)
	if err != nil {
		return nil, false, err
	}
	if v, _, err = decode(data); err != nil {
		return nil, false, err
	}
	h.mu.Lock()
	h.decoded[key] = v
	h.mu.Unlock()
	return v, true, nil
}

func (h *hostCacheFetcher) FetchBlock(_ context.Context, key string) ([]byte, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	d, ok := h.objs[key]
	if !ok {
		return nil, false, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return d, true, nil
}

// BenchmarkSeekOneRowCachedBlock times a one-row scan of one file of
// 100 000 rows whose index and blocks are all cached: what a scan server
// does for a one-row scan, minus the messages. Each scan seeks to a
// different row (stride 7919), checks it and that there is no second one.
func BenchmarkSeekOneRowCachedBlock(b *testing.B) {
	ctx := context.Background()
	store := newMemStore()
	rows := GenerateRows(100000)
	ref := writeFile(b, store, "seek.g1.t0", DefaultBlockSize, rows)
	f := &hostCacheFetcher{objs: store.objs, decoded: map[string]any{}}
	reader := NewTabletReader([]*messages.FileRef{ref}, f)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := (i * 7919) % len(rows)
		key := rows[k].Key
		it := reader.Scan(ctx, Range{Start: key, End: append(key[:len(key):len(key)], 0)}, nil)
		if !it.Next() || string(it.Entry().Key) != string(key) || string(it.Entry().Value) != string(rows[k].Value) {
			b.Fatalf("row %d: %q, %v", k, it.Entry().Key, it.Err())
		}
		if it.Next() || it.Err() != nil {
			b.Fatalf("row %d: a second row %q or %v", k, it.Entry().Key, it.Err())
		}
	}
}

// BenchmarkGeneratedRows: the rows of scanctl ingest --generate.
func BenchmarkGeneratedRows(b *testing.B) {
	g := &GeneratedRows{N: math.MaxInt}
	b.SetBytes(int64(len(RowKey(0)) + RowValueLen))
	for b.Loop() {
		if _, err := g.Next(); err != nil {
			b.Fatal(err)
		}
	}
}
