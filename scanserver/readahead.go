package scanserver

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// ReadAhead is how many blocks past a block a scan missed in the host
// cache the scan server fetches in the background, while the scan's
// range goes on into them.
const ReadAhead = 2

// readAhead is one scan's fetcher: when the scan misses block b of one of
// its files in the cache, it starts reading blocks b+1..b+ReadAhead of
// that file that hold keys of the scan's range and were not started yet,
// each decoded and checked against its index handle as the reader does
// (tablets.VerifyBlock), through the same fetcher, so that the scan finds
// them cached or joins their reads. At most ReadAhead reads run at once;
// they run under ctx, and close cancels and waits for them. Safe for
// concurrent use.
type readAhead struct {
	inner  tablets.BlockFetcher
	ctx    context.Context
	cancel context.CancelFunc
	end    []byte // the scan's end; empty = open
	files  map[string]*messages.FileRef
	slots  chan struct{}
	wg     sync.WaitGroup

	mu   sync.Mutex
	next map[string]int // per file: the first block not read ahead yet
}

func newReadAhead(ctx context.Context, inner tablets.BlockFetcher, files []*messages.FileRef, end []byte) *readAhead {
	r := &readAhead{inner: inner, end: end, files: map[string]*messages.FileRef{}, slots: make(chan struct{}, ReadAhead), next: map[string]int{}}
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
// scan's files' and was missed (cached false) or read ahead.
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
	if cached && r.next[ref.GetId()] <= b {
		return // a hit of a block not read ahead: a scan in the cache
	}
	for n := max(b+1, r.next[ref.GetId()]); n <= b+ReadAhead && n < int(ref.GetBlocks()); n++ {
		select {
		case r.slots <- struct{}{}:
		default:
			return // ReadAhead reads already run
		}
		r.next[ref.GetId()] = n + 1
		r.wg.Add(1)
		go r.read(ref, n)
	}
}

// read fetches block n of ref through the fetcher, if it holds keys of
// the range.
func (r *readAhead) read(ref *messages.FileRef, n int) {
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
	if !ok || n >= len(ix.Blocks) {
		return
	}
	h := ix.Blocks[n]
	if len(r.end) > 0 && bytes.Compare(h.FirstKey, r.end) >= 0 {
		return // past the scan's range
	}
	_, _, _ = tablets.FetchDecoded(r.ctx, r.inner, tablets.BlockKey(ref.GetId(), n), func(data []byte) (any, int64, error) {
		b, err := tablets.VerifyBlock(data, h)
		if err != nil {
			return nil, 0, err
		}
		return b, b.Cost(), nil
	})
}

// close cancels the reads still running and waits for them.
func (r *readAhead) close() {
	r.cancel()
	r.wg.Wait()
}
