package gateway

import (
	"context"
	"sync"

	scanplanev1 "github.com/scanplane/scanplane/api/scanplane/v1"
)

// slabRows: rows are allocated this many at a time.
const slabRows = 256

// batcher hands rows from a scan's goroutine to the goroutine that sends
// them: the sender takes whatever is pending when a batch is full, when
// the scan ended, or when its flush timer fires; the scan waits while a
// full batch is pending, so at most two batches (one pending, one being
// sent) are held per scan.
type batcher struct {
	max   int
	ready chan struct{} // a full batch or the end is pending
	space chan struct{} // the sender took the pending rows

	mu    sync.Mutex
	rows  []*scanplanev1.Row
	bytes int
	slab  []scanplanev1.Row
	fin   bool
	err   error
}

func newBatcher(maxBytes int) *batcher {
	return &batcher{max: maxBytes, ready: make(chan struct{}, 1), space: make(chan struct{}, 1)}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// add appends a row (its slices are kept, not copied); once the pending
// rows reach max bytes it waits until the sender took them. It returns
// false when ctx ended first.
func (b *batcher) add(ctx context.Context, key, value []byte) bool {
	b.mu.Lock()
	if len(b.slab) == 0 {
		b.slab = make([]scanplanev1.Row, slabRows)
	}
	r := &b.slab[0]
	b.slab = b.slab[1:]
	r.Key, r.Value = key, value
	b.rows = append(b.rows, r)
	b.bytes += len(key) + len(value)
	full := b.bytes >= b.max
	b.mu.Unlock()
	if !full {
		return true
	}
	signal(b.ready)
	for {
		b.mu.Lock()
		full = b.bytes >= b.max
		b.mu.Unlock()
		if !full {
			return true
		}
		select {
		case <-b.space:
		case <-ctx.Done():
			return false
		}
	}
}

// finish records the end of the scan (err nil: every row was added).
func (b *batcher) finish(err error) {
	b.mu.Lock()
	b.fin, b.err = true, err
	b.mu.Unlock()
	signal(b.ready)
}

// take returns the pending rows and, once finish was called, fin true
// and the scan's error: the rows returned with fin are the last ones.
func (b *batcher) take() (rows []*scanplanev1.Row, fin bool, err error) {
	b.mu.Lock()
	rows, b.rows, b.bytes = b.rows, nil, 0
	fin, err = b.fin, b.err
	b.mu.Unlock()
	signal(b.space)
	return rows, fin, err
}
