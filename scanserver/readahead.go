package scanserver

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/scanplane/scanplane/cache"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// ReadAhead is how many blocks past the block a scan is in the scan
// server keeps read or being read, once the scan missed a block in the
// host cache. It reads them ReadAhead/2 or more at a time: one store
// request each (cache.Prefetcher over a cache.ManyGetter store), or one
// block after another where the fetcher reads no batches.
const ReadAhead = 16

// readAheadReads bounds the reads ahead one scan runs at once.
const readAheadReads = 2

// readAhead is one scan's fetcher: when the scan misses block b of one of
// its files in the cache, or reaches a block read ahead, it reads the
// blocks up to b+ReadAhead of that file that hold keys of the scan's
// range and were not read yet, each decoded and checked against its index
// handle as the reader does (tablets.VerifyBlock), through the same
// fetcher, so that the scan finds them cached or joins their reads; a
// read ahead that fails leaves the block to the scan's own fetch, which
// gives the error. At most readAheadReads reads run at once; they run
// under ctx, and close cancels and waits for them. Safe for concurrent
// use.
type readAhead struct {
	inner  tablets.BlockFetcher
	ctx    context.Context
	cancel context.CancelFunc
	end    []byte // the scan's end; empty = open
	files  map[string]*messages.FileRef
	slots  chan struct{}
	wg     sync.WaitGroup
	// blocks counts the blocks read ahead in batches (Prefetch); nil:
	// not counted.
	blocks *atomic.Uint64

	mu   sync.Mutex
	next map[string]int // per file: the first block not read ahead yet
}

func newReadAhead(ctx context.Context, inner tablets.BlockFetcher, files []*messages.FileRef, end []byte, blocks *atomic.Uint64) *readAhead {
	r := &readAhead{inner: inner, end: end, files: map[string]*messages.FileRef{}, slots: make(chan struct{}, readAheadReads),
		blocks: blocks, next: map[string]int{}}
	r.ctx, r.cancel = context.WithCancel(ctx)
	for _, f := range files {
		r.files[f.GetId()] = f
	}
	return r
}

// FetchBlock implements tablets.BlockFetcher (no read-ahead: readers
// fetch blocks with FetchDecoded).
func (r *readAhead) FetchBlock(ctx context.Context, key string) ([]byte, bool, error) {
	return r.inner.FetchBlock(ctx, key)
}

// FetchDecoded implements tablets.DecodingFetcher: a miss of a block,
// or a hit of one read ahead, reads ahead after it.
func (r *readAhead) FetchDecoded(ctx context.Context, key string, decode func([]byte) (any, int64, error)) (any, bool, error) {
	v, cached, err := tablets.FetchDecoded(ctx, r.inner, key, decode)
	if err == nil {
		r.after(key, cached)
	}
	return v, cached, err
}

// after starts reading ahead of the block under key, if it is one of the
// scan's files' and was missed (cached false) or read ahead, and the
// blocks not yet read ahead within ReadAhead of it are ReadAhead/2 or
// more, or reach the file's end.
func (r *readAhead) after(key string, cached bool) {
	i := strings.LastIndex(key, ".b")
	if i < 0 {
		return
	}
	ref := r.files[key[:i]]
	b, err := strconv.Atoi(key[i+2:])
	if ref == nil || err != nil || tablets.BlockKey(ref.GetId(), b) != key {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	next := r.next[ref.GetId()]
	if cached && next <= b {
		return // a hit of a block not read ahead: a scan in the cache
	}
	from, to := max(b+1, next), min(b+ReadAhead, int(ref.GetBlocks())-1)
	if from > to || (to-from+1 < ReadAhead/2 && to < int(ref.GetBlocks())-1) {
		return
	}
	select {
	case r.slots <- struct{}{}:
	default:
		return // readAheadReads reads already run
	}
	r.next[ref.GetId()] = to + 1
	r.wg.Add(1)
	go r.read(ref, from, to)
}

// read fetches blocks from..to of ref that hold keys of the range
// through the fetcher: in one request if it is a cache.Prefetcher, else
// one after another.
func (r *readAhead) read(ref *messages.FileRef, from, to int) {
	defer func() {
		<-r.slots
		r.wg.Done()
	}()
	v, _, err := tablets.FetchDecoded(r.ctx, r.inner, tablets.IndexKey(ref.GetId()), func(data []byte) (any, int64, error) {
		ix, err := tablets.DecodeIndex(data)
		if err != nil {
			return nil, 0, err
		}
		return ix, tablets.IndexCost(ix, data), nil
	})
	if err != nil {
		return
	}
	ix, ok := v.(*tablets.FileIndex)
	if !ok {
		return
	}
	to = min(to, len(ix.Blocks)-1)
	var keys []string
	for n := from; n <= to; n++ {
		if len(r.end) > 0 && bytes.Compare(ix.Blocks[n].FirstKey, r.end) >= 0 {
			break // past the scan's range
		}
		keys = append(keys, tablets.BlockKey(ref.GetId(), n))
	}
	verify := func(n int) func([]byte) (any, int64, error) {
		return func(data []byte) (any, int64, error) {
			b, err := tablets.VerifyBlock(data, ix.Blocks[n])
			if err != nil {
				return nil, 0, err
			}
			return b, b.Cost(), nil
		}
	}
	if p, ok := r.inner.(cache.Prefetcher); ok {
		got := p.Prefetch(r.ctx, keys, func(i int, data []byte) (any, int64, error) { return verify(from + i)(data) })
		if r.blocks != nil {
			r.blocks.Add(uint64(got))
		}
		return
	}
	for i, key := range keys {
		if r.ctx.Err() != nil {
			return
		}
		_, _, _ = tablets.FetchDecoded(r.ctx, r.inner, key, verify(from+i))
	}
}

// close cancels the reads still running and waits for them.
func (r *readAhead) close() {
	r.cancel()
	r.wg.Wait()
}
