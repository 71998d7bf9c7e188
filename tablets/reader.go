package tablets

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/scanplane/scanplane/messages"
)

// ReadStats counts what a scan fetched.
type ReadStats struct {
	BlocksRead uint64 // data blocks fetched (hits included)
	CacheHits  uint64 // of BlocksRead, fetches the fetcher served from its cache
	IndexReads uint64 // index objects fetched (hits included); not in BlocksRead
	IndexHits  uint64 // of IndexReads, served from the cache
}

// TabletReader reads one tablet: a k-way merge over its files. It holds no
// state besides its arguments and is safe for concurrent use; each Scan
// returns an independent Iterator.
type TabletReader struct {
	files []*messages.FileRef
	f     BlockFetcher
}

// NewTabletReader returns a reader over files (oldest first: on equal keys
// the later file in the list wins) fetching through f. It does no IO.
func NewTabletReader(files []*messages.FileRef, f BlockFetcher) *TabletReader {
	return &TabletReader{files: append([]*messages.FileRef(nil), files...), f: f}
}

// Scan returns an iterator over the tablet's rows in rng that are strictly
// greater than after (nil after = no such bound), in key order. Nothing is
// fetched until the first Next. An invalid rng (start > end) makes Err
// return ErrBadRange; an empty one yields no rows.
func (r *TabletReader) Scan(ctx context.Context, rng Range, after []byte) *Iterator {
	it := &Iterator{ctx: ctx, f: r.f, rng: rng.After(after)}
	if err := rng.Validate(); err != nil {
		it.err, it.done = err, true
		return it
	}
	if it.rng.Empty() {
		it.done = true
		return it
	}
	// One allocation for the common one-file tablet: its source lives in
	// the Iterator.
	if len(r.files) == 1 {
		it.oneSrc[0] = &it.one
		it.srcs = it.oneSrc[:]
	} else {
		slab := make([]source, len(r.files))
		it.srcs = make([]*source, len(r.files))
		for i := range slab {
			it.srcs[i] = &slab[i]
		}
	}
	for i, ref := range r.files {
		*it.srcs[i] = source{it: it, ord: i, ref: ref}
	}
	return it
}

// ScanAt is Scan for a scan whose Prover p, of the same files, started
// (Prover.Start) with the same lower bound: the iterator takes the
// index, the block and the first row's position that p found instead of
// fetching and seeking them again, and counts the fetches p made of
// them as its own.
func (r *TabletReader) ScanAt(ctx context.Context, rng Range, after []byte, p *Prover) *Iterator {
	it := r.Scan(ctx, rng, after)
	if it.done || p.at.blk == nil || !bytes.Equal(it.rng.Start, p.rng.Start) || len(r.files) != len(p.r.files) {
		return it
	}
	for i, f := range r.files {
		if p.r.files[i] != f {
			return it
		}
	}
	it.at = p.at
	return it
}

// ctxCheckEvery is how many rows an iterator returns between context
// checks when it does not fetch (it always checks before a fetch).
const ctxCheckEvery = 256

// Iterator is a pull iterator over a tablet scan. It fetches blocks
// lazily, one at a time per file, and checks its context before every
// fetch and every ctxCheckEvery rows. An Iterator belongs to one goroutine.
type Iterator struct {
	ctx  context.Context
	f    BlockFetcher
	rng  Range
	srcs []*source

	started bool
	done    bool
	heap    []*source // live sources, min key first, later file first on ties
	winner  *source   // source of cur, to advance on the next Next
	cur     Entry
	err     error
	stats   ReadStats
	rows    int
	one     source     // the source of a one-file tablet
	oneSrc  [1]*source // srcs of a one-file tablet
	// at: where the scan's first row is, found by a Prover (ScanAt);
	// at.blk nil: none.
	at startAt
}

// startAt is the position of a scan's first row in file file: its
// index, its block block and the row's offset off in it, and whether
// the index and the block came from the fetcher's cache.
type startAt struct {
	file, block, off       int
	ix                     *FileIndex
	blk                    *Block
	indexCached, blkCached bool
}

// Next advances to the next row and reports whether there is one. When it
// returns false, Err tells whether the scan ended or failed.
func (it *Iterator) Next() bool {
	if it.done {
		return false
	}
	if !it.started {
		it.started = true
		// The heap reuses srcs' array: it never holds more than the
		// sources already looked at.
		it.heap = it.srcs[:0]
		for _, s := range it.srcs {
			if !s.init() {
				if it.err != nil {
					return it.fail()
				}
				continue
			}
			it.heap = append(it.heap, s)
		}
		it.srcs = nil
		for i := len(it.heap)/2 - 1; i >= 0; i-- {
			it.down(i)
		}
	} else if w := it.winner; w != nil {
		it.winner = nil
		if it.rows++; it.rows%ctxCheckEvery == 0 {
			if err := it.ctx.Err(); err != nil {
				it.err = fmt.Errorf("tablets: scan: %w", err)
				return it.fail()
			}
		}
		if !w.next() {
			if it.err != nil {
				return it.fail()
			}
		} else {
			it.push(w)
		}
	}
	if len(it.heap) == 0 {
		return it.fail()
	}
	w := it.pop()
	key := w.entry().Key
	// Older files holding the same key lose: move them past it.
	for len(it.heap) > 0 && bytes.Equal(it.heap[0].entry().Key, key) {
		s := it.heap[0]
		if s.next() {
			it.down(0)
			continue
		}
		if it.err != nil {
			return it.fail()
		}
		it.pop()
	}
	it.winner = w
	it.cur = w.entry()
	return true
}

// Run describes the rows NextRun appended.
type Run struct {
	Rows int // rows appended
	KV   int // their key and value bytes
	// LastKeyAt is the offset in the returned slice of the last row's
	// key, LastKeyLen its length.
	LastKeyAt, LastKeyLen int
}

// NextRun is Next for a caller that takes rows in the packed encoding
// (AppendPackedRow's, which is a block's own): it appends to dst the
// rows Next would return next that lie in one block of one file, with
// one copy (a slice of the block), and returns dst and what it appended.
// The run ends at the block's end, at the range's end, before the next
// key of another file of the tablet, after maxRows rows (at least 1),
// or with the row that makes dst maxBytes long or longer. Afterwards
// Entry is the run's last row and Next continues after it. ok false: the
// scan ended (Err tells how).
func (it *Iterator) NextRun(dst []byte, maxRows, maxBytes int) (_ []byte, run Run, ok bool) {
	if !it.Next() {
		return dst, run, false
	}
	if err := it.ctx.Err(); err != nil {
		it.err = fmt.Errorf("tablets: scan: %w", err)
		it.fail()
		return dst, run, false
	}
	s := it.winner
	b := s.blk
	body := b.body
	// The run's rows are below bound: the range's end and the next key
	// of the other files (on a tie Next picks the row).
	bound := it.rng.End
	if len(it.heap) > 0 {
		if k := it.heap[0].entry().Key; len(bound) == 0 || bytes.Compare(k, bound) < 0 {
			bound = k
		}
	}
	// Every row of the block is below it: no key compares.
	all := len(bound) == 0 || bytes.Compare(b.last, bound) < 0
	first := s.next_ - PackedRowSize(len(s.cur.Key), len(s.cur.Value))
	lastAt, off := first, s.next_
	run.Rows, run.KV = 1, len(s.cur.Key)+len(s.cur.Value)
	for off < len(body) && run.Rows < maxRows && len(dst)+off-first < maxBytes {
		kl, n := uvarint(body[off:])
		vl, m := uvarint(body[off+n:])
		k := off + n + m
		if !all && bytes.Compare(body[k:k+int(kl)], bound) >= 0 {
			break
		}
		lastAt, off = off, k+int(kl)+int(vl)
		run.Rows++
		run.KV += int(kl + vl)
	}
	base := len(dst)
	dst = append(dst, body[first:off]...)
	if lastAt != first {
		s.cur, s.next_ = b.entry(lastAt)
		it.cur = s.cur
		it.rows += run.Rows - 1
	}
	run.LastKeyAt = base + lastAt - first + PackedRowSize(len(s.cur.Key), len(s.cur.Value)) - len(s.cur.Key) - len(s.cur.Value)
	run.LastKeyLen = len(s.cur.Key)
	return dst, run, true
}

// fail ends the iteration (with it.err, possibly nil) and drops references.
func (it *Iterator) fail() bool {
	it.done = true
	it.heap, it.winner, it.srcs, it.cur = nil, nil, nil, Entry{}
	return false
}

// Entry returns the current row. Key and Value alias fetched block data,
// which may be shared with other readers through a cache: never modify
// them. They are valid until the next call of Next; copy them to keep them.
func (it *Iterator) Entry() Entry { return it.cur }

// Err returns the error that ended the iteration, nil at a normal end: a
// context error, ErrBadRange, or a storage error or ErrCorrupt wrapped with
// the key of the object that failed.
func (it *Iterator) Err() error { return it.err }

// Stats returns what the scan fetched so far.
func (it *Iterator) Stats() ReadStats { return it.stats }

func (it *Iterator) less(a, b *source) bool {
	c := bytes.Compare(a.entry().Key, b.entry().Key)
	return c < 0 || (c == 0 && a.ord > b.ord)
}

func (it *Iterator) down(i int) {
	h := it.heap
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && it.less(h[r], h[l]) {
			m = r
		}
		if !it.less(h[m], h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

func (it *Iterator) push(s *source) {
	it.heap = append(it.heap, s)
	h := it.heap
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !it.less(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (it *Iterator) pop() *source {
	h := it.heap
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = nil
	it.heap = h[:last]
	if last > 0 {
		it.down(0)
	}
	return top
}

// source walks one file of the tablet within the iterator's range.
type source struct {
	it    *Iterator
	ord   int // position in the file list; a later file wins ties
	ref   *messages.FileRef
	ix    *FileIndex
	block int
	blk   *Block // the current block, nil when exhausted
	cur   Entry  // the entry at the current position
	next_ int    // offset of the entry after cur in blk
}

func (s *source) entry() Entry { return s.cur }

// countFetch counts one fetch of a block (or an index) in the stats.
func (s *source) countFetch(index, cached bool) {
	st := &s.it.stats
	if index {
		st.IndexReads++
		if cached {
			st.IndexHits++
		}
	} else {
		st.BlocksRead++
		if cached {
			st.CacheHits++
		}
	}
}

// fetch gets one object and decodes it with decode (whose errors are
// *decodeError, to tell them from fetch errors): through the fetcher's
// decoded cache when it has one (decode runs once per cache entry), else
// on every fetch. It checks the context first and counts the fetch.
func (s *source) fetch(key string, index bool, decode func([]byte) (any, int64, error)) (any, error) {
	it := s.it
	what := "block"
	if index {
		what = "index"
	}
	if err := it.ctx.Err(); err != nil {
		return nil, fmt.Errorf("tablets: scan: %w", err)
	}
	v, cached, err := FetchDecoded(it.ctx, it.f, key, decode)
	s.countFetch(index, cached)
	if err != nil {
		// Declared here: errors.As moves it to the heap.
		var de *decodeError
		if errors.As(err, &de) {
			// The object's bytes are bad (a fetch wraps the decode error).
			return nil, fmt.Errorf("tablets: %s %s: %w", what, key, de.err)
		}
		return nil, fmt.Errorf("tablets: fetch %s: %w", key, err)
	}
	return v, nil
}

// decodeError marks an error of decode, to tell it from a fetch error.
type decodeError struct{ err error }

func (e *decodeError) Error() string { return e.err.Error() }
func (e *decodeError) Unwrap() error { return e.err }

// decodeIndex is the decode function of index objects.
func decodeIndex(data []byte) (any, int64, error) {
	ix, err := DecodeIndex(data)
	if err != nil {
		return nil, 0, &decodeError{err}
	}
	return ix, IndexCost(ix, data), nil
}

// init loads the index and the first block with keys in range and
// positions on the first such key. It returns false when the file has no
// rows in range or on error (then it.err is set).
func (s *source) init() bool {
	it := s.it
	if at := &it.at; at.blk != nil && at.file == s.ord {
		return s.initAt(at)
	}
	key := IndexKey(s.ref.GetId())
	v, err := s.fetch(key, true, decodeIndex)
	if err != nil {
		it.err = err
		return false
	}
	ix := v.(*FileIndex)
	if err := checkIndex(ix, s.ref); err != nil {
		it.err = fmt.Errorf("tablets: index %s: %w", key, err)
		return false
	}
	s.ix = ix
	s.block = ix.Seek(it.rng.Start) - 1
	if !s.nextBlock() {
		return false
	}
	if len(it.rng.Start) > 0 {
		off := s.blk.seek(it.rng.Start)
		if off == s.blk.end() { // cannot happen with a verified index
			it.err = fmt.Errorf("%w: block %s has no key >= its index's last key", ErrCorrupt, BlockKey(s.ref.GetId(), s.block))
			return false
		}
		s.cur, s.next_ = s.blk.entry(off)
	}
	return s.inRange()
}

// initAt is init from the position at, which a Prover found in this
// source's file with the same lower bound: the index and the block
// checked as init checks them.
func (s *source) initAt(at *startAt) bool {
	s.countFetch(true, at.indexCached)
	s.ix, s.block = at.ix, at.block
	if h := s.ix.Blocks[s.block]; len(s.it.rng.End) > 0 && bytes.Compare(h.FirstKey, s.it.rng.End) >= 0 {
		return false // as nextBlock: the block lies past the range's end
	}
	s.countFetch(false, at.blkCached)
	s.blk = at.blk
	s.cur, s.next_ = s.blk.entry(at.off)
	return s.inRange()
}

func checkIndex(ix *FileIndex, ref *messages.FileRef) error {
	if ix.FileID != ref.GetId() {
		return fmt.Errorf("%w: index belongs to file %q", ErrCorrupt, ix.FileID)
	}
	if (ref.GetBlocks() != 0 && uint64(len(ix.Blocks)) != uint64(ref.GetBlocks())) ||
		(ref.GetEntries() != 0 && ix.Entries != ref.GetEntries()) {
		return fmt.Errorf("%w: index has %d blocks and %d entries, metadata says %d and %d",
			ErrCorrupt, len(ix.Blocks), ix.Entries, ref.GetBlocks(), ref.GetEntries())
	}
	return nil
}

// nextBlock loads block s.block+1 if it may hold keys in range and
// positions on its first entry.
func (s *source) nextBlock() bool {
	it := s.it
	s.block++
	s.blk, s.cur = nil, Entry{}
	if s.block >= len(s.ix.Blocks) {
		return false
	}
	h := s.ix.Blocks[s.block]
	if len(it.rng.End) > 0 && bytes.Compare(h.FirstKey, it.rng.End) >= 0 {
		return false
	}
	key := BlockKey(s.ref.GetId(), s.block)
	v, err := s.fetch(key, false, func(data []byte) (any, int64, error) {
		b, err := VerifyBlock(data, h)
		if err != nil {
			return nil, 0, &decodeError{err}
		}
		return b, b.Cost(), nil
	})
	if err != nil {
		it.err = err
		return false
	}
	b := v.(*Block)
	// A Block from a cache was verified against the handle of whichever
	// reader cached it: check it is the one this index describes.
	if !b.Matches(h) {
		it.err = fmt.Errorf("tablets: block %s: %w: cached block (%d entries, checksum %08x) does not match its index handle (%d entries, checksum %08x)",
			key, ErrCorrupt, b.entries, b.crc, h.Entries, h.Checksum)
		return false
	}
	s.blk = b
	s.cur, s.next_ = b.entry(0)
	return true
}

func (s *source) inRange() bool {
	end := s.it.rng.End
	return len(end) == 0 || bytes.Compare(s.cur.Key, end) < 0
}

// next moves to the next key in range; false when exhausted or on error.
func (s *source) next() bool {
	if s.next_ >= s.blk.end() {
		if !s.nextBlock() {
			return false
		}
	} else {
		s.cur, s.next_ = s.blk.entry(s.next_)
	}
	return s.inRange()
}
