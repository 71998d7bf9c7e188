package tablets

import (
	"context"
	"sync"
)

// memoSize is how many decoded objects a ScanMemo keeps: a short scan's
// file index, the block before its first row, its blocks and the block
// after its last row, with room to spare.
const memoSize = 8

// ScanMemo is a DecodingFetcher over another fetcher that keeps the
// objects one scan fetched last (decoded, the memoSize most recent), so
// that the scan's reader and its Prover, which read the same index and
// blocks, fetch each once: a block the host cache did not keep is then
// read from the store and decoded, and its row digests computed, once per
// scan rather than once per reader. A fetch it serves reports the cached
// flag of the fetch that brought the object in. Errors are not kept. Raw
// fetches (FetchBlock) pass through. Safe for concurrent use; meant to
// live as long as one scan.
type ScanMemo struct {
	f BlockFetcher

	mu   sync.Mutex
	ents [memoSize]memoEntry
	next int // the entry the next object replaces
}

type memoEntry struct {
	key    string
	v      any
	cached bool
}

var _ DecodingFetcher = (*ScanMemo)(nil)

// NewScanMemo returns an empty ScanMemo over f.
func NewScanMemo(f BlockFetcher) *ScanMemo { return &ScanMemo{f: f} }

// FetchBlock implements BlockFetcher: f's FetchBlock.
func (m *ScanMemo) FetchBlock(ctx context.Context, key string) ([]byte, bool, error) {
	return m.f.FetchBlock(ctx, key)
}

// FetchDecoded implements DecodingFetcher: the object kept under key, or
// f's (FetchDecoded), then kept.
func (m *ScanMemo) FetchDecoded(ctx context.Context, key string, decode func([]byte) (any, int64, error)) (any, bool, error) {
	m.mu.Lock()
	for i := range m.ents {
		if e := &m.ents[i]; e.v != nil && e.key == key {
			v, cached := e.v, e.cached
			m.mu.Unlock()
			return v, cached, nil
		}
	}
	m.mu.Unlock()
	v, cached, err := FetchDecoded(ctx, m.f, key, decode)
	if err != nil {
		return v, cached, err
	}
	m.mu.Lock()
	m.ents[m.next] = memoEntry{key: key, v: v, cached: cached}
	m.next = (m.next + 1) % memoSize
	m.mu.Unlock()
	return v, cached, nil
}
