package tablets

import (
	"bytes"
	"context"
	"fmt"
	"sort"

	"github.com/scanplane/scanplane/messages"
)

// Prover builds the block proofs (messages.BlockProof) of one scan of a
// tablet, for the rows a TabletReader scan of the same files and range
// yields, in order. It relies on what Ingest writes: a tablet's files
// hold disjoint key ranges, ascending in file order, so the scan's rows
// are consecutive rows of the blocks numbered across the files.
//
// Usage: Start, then Rows(n) after each n rows sent, Finish at a
// successful end; Take returns the proofs completed since the last Take.
// Every proof's block is read through the fetcher (the Prover keeps the
// last two it read) for its siblings, which the block computes once and
// keeps, and, for a block cut by the scan's bounds, the rows that
// complete the chunks at the cut (head, tail). A Prover belongs to one
// goroutine.
type Prover struct {
	ctx   context.Context
	r     TabletReader
	rng   Range
	m     MerkleHasher
	ixs   []*FileIndex // loaded on demand
	ixHit []bool       // ixs[i] came from the fetcher's cache
	base  []int        // number of the first block of each file
	empty bool         // nothing to prove: the range holds no key, or the files have no block roots

	// The position of the next row of the stream: file f, its block b,
	// row l of that block; f == len(files) at the end of the tablet.
	f, b, l int
	seg     *messages.BlockProof // the proof of the block at (f, b), open
	extra   int                  // head and tail rows of seg
	out     []*messages.BlockProof
	// countF, countB: the block a count-only scan counts up to
	// (CountSpan), exclusive.
	countF, countB int
	dc             *DigestCache // nil: none (UseDigests)
	// ixBuf, baseBuf back ixs and base for tablets of up to two files.
	ixBuf    [2]*FileIndex
	ixHitBuf [2]bool
	baseBuf  [2]int
	// last: the two blocks the method block returned last, most
	// recent first; a short scan's proof needs its block several times
	// (its first row, its head, its tail, its siblings).
	last [2]provenBlock
	// at: where Start found the scan's first row, for ScanAt (at.blk
	// nil: Start read no block for it).
	at startAt
	// rd: the iterator state of the Prover's reads (readIndex,
	// readBlock), reused.
	rd Iterator
}

// provenBlock is block b of file f.
type provenBlock struct {
	f, b int
	blk  *Block
	hit  bool // from the fetcher's cache
}

// NewProver returns a Prover for a scan of files (as NewTabletReader's,
// which must not change while the Prover is in use) over rng, resumed
// after the key after (nil: none). It does no IO. When
// a file has no block roots (ingested without digests) it proves
// nothing.
func NewProver(ctx context.Context, files []*messages.FileRef, f BlockFetcher, rng Range, after []byte) *Prover {
	// The files are the caller's: a Prover lives as long as one scan of them.
	p := &Prover{ctx: ctx, r: TabletReader{files: files, f: f}, rng: rng.After(after)}
	if len(files) <= len(p.ixBuf) {
		p.ixs, p.ixHit, p.base = p.ixBuf[:len(files)], p.ixHitBuf[:len(files)], p.baseBuf[:len(files)]
	} else {
		p.ixs, p.ixHit, p.base = make([]*FileIndex, len(files)), make([]bool, len(files)), make([]int, len(files))
	}
	for i := 1; i < len(files); i++ {
		p.base[i] = p.base[i-1] + int(files[i-1].GetBlocks())
	}
	p.empty = p.rng.Empty()
	for _, f := range files {
		// Files ingested without digests: no client can check a proof.
		if !HasBlockRoots(f) {
			p.empty = true
		}
	}
	return p
}

// HasBlockRoots reports whether f has blocks and the root of each
// (FileRef.block_roots), which the rows read from it are proven
// against.
func HasBlockRoots(f *messages.FileRef) bool {
	return f.GetBlocks() > 0 && len(f.GetBlockRoots()) == int(f.GetBlocks())*DigestSize
}

// Proves reports whether p proves the scan's rows: false when the files
// have no block roots or the range holds no key.
func (p *Prover) Proves() bool { return !p.empty }

// RootsLeftOut tells p that the files have block roots that its caller
// was not given (messages.StartScan.roots_left_out): p proves the rows
// as it would with them. Call it before Start.
func (p *Prover) RootsLeftOut() {
	p.empty = p.rng.Empty()
	for _, f := range p.r.files {
		if f.GetBlocks() == 0 {
			p.empty = true
		}
	}
}

// UseDigests makes p take the digests of the blocks it proves from c
// when their Block has none yet, and keep there those it computes. Call
// it before Start.
func (p *Prover) UseDigests(c *DigestCache) { p.dc = c }

// digests makes sure block b of file f, blk, has its digests, through
// p's DigestCache.
func (p *Prover) digests(f, b int, blk *Block) {
	if blk.nodes.Load() == nil {
		p.dc.withDigests(BlockKey(p.r.files[f].GetId(), b), blk, &p.m)
	}
}

// Start finds the scan's first row and proves what precedes it: the row
// just below the lower bound (in the same block, or the last row of the
// block before), unless the scan starts at the tablet's first row.
func (p *Prover) Start() error {
	if p.empty {
		return nil
	}
	p.f = len(p.r.files)
	for i := range p.r.files {
		ix, err := p.index(i)
		if err != nil {
			return err
		}
		b := ix.Seek(p.rng.Start)
		if b >= len(ix.Blocks) {
			continue
		}
		l := 0
		if len(p.rng.Start) > 0 {
			blk, err := p.block(i, b)
			if err != nil {
				return err
			}
			off := blk.seek(p.rng.Start)
			l = blk.index(off)
			if off < blk.end() {
				p.at = startAt{file: i, block: b, off: off, ix: ix, blk: blk, indexCached: p.ixHit[i], blkCached: p.last[0].hit}
			}
		}
		p.f, p.b, p.l = i, b, l
		break
	}
	// The row before the first, and the rows of its chunk before it: in
	// this block, or the last chunk of the block before (in this file or
	// an earlier one).
	if p.f < len(p.r.files) && p.l > 0 {
		blk, err := p.block(p.f, p.b)
		if err != nil {
			return err
		}
		first := (p.l - 1) / ChunkRows * ChunkRows
		p.seg = &messages.BlockProof{Block: uint32(p.base[p.f] + p.b), Leaves: blk.entries, First: uint32(first),
			Head: blk.PackedRows(first, p.l)}
		p.extra = p.l - first
		return nil
	}
	pf, pb := p.prevBlock(p.f, p.b)
	if pf < 0 {
		return nil // the scan starts at the tablet's first row
	}
	blk, err := p.block(pf, pb)
	if err != nil {
		return err
	}
	n := int(blk.entries)
	first := (n - 1) / ChunkRows * ChunkRows
	proof := &messages.BlockProof{Block: uint32(p.base[pf] + pb), Leaves: blk.entries, First: uint32(first),
		Head: blk.PackedRows(first, n)}
	return p.close(proof, pf, pb, n-first)
}

// prevBlock is the block before block b of file f (f may be
// len(files): the end); -1 when there is none.
func (p *Prover) prevBlock(f, b int) (int, int) {
	if f < len(p.r.files) && b > 0 {
		return f, b - 1
	}
	for f--; f >= 0; f-- {
		if n := int(p.r.files[f].GetBlocks()); n > 0 {
			return f, n - 1
		}
	}
	return -1, 0
}

// Rows records that the next n rows of the stream were sent; the proofs
// of the blocks they complete become ready for Take.
func (p *Prover) Rows(n int) error {
	for n > 0 && !p.empty {
		if p.f >= len(p.r.files) {
			return fmt.Errorf("%w: the scan sent rows past the end of the tablet's files", ErrCorrupt)
		}
		ix, err := p.index(p.f)
		if err != nil {
			return err
		}
		leaves := int(ix.Blocks[p.b].Entries)
		if p.seg == nil {
			p.seg = &messages.BlockProof{Block: uint32(p.base[p.f] + p.b), Leaves: uint32(leaves), First: uint32(p.l)}
		}
		take := min(n, leaves-p.l)
		p.seg.Rows += uint32(take)
		p.l += take
		n -= take
		if p.l == leaves {
			seg, extra := p.seg, p.extra
			p.seg, p.extra = nil, 0
			if err := p.close(seg, p.f, p.b, extra); err != nil {
				return err
			}
			p.next()
		}
	}
	return nil
}

// next moves the position to the first row of the next block.
func (p *Prover) next() {
	p.b, p.l = p.b+1, 0
	for p.f < len(p.r.files) && p.b >= int(p.r.files[p.f].GetBlocks()) {
		p.f, p.b = p.f+1, 0
	}
}

// Finish ends a successful scan: limited says it stopped at its row
// limit; otherwise it stopped at the end of its range, and the row there
// (the first at or past the range's end) starts the proof's tail, unless
// the tablet ended. The tail runs to the end of that row's chunk; a
// limited scan that stopped inside a chunk gets the rest of it as tail.
func (p *Prover) Finish(limited bool) error {
	if p.empty {
		return nil
	}
	if p.f < len(p.r.files) && (!limited || p.seg != nil && p.l%ChunkRows != 0) {
		blk, err := p.block(p.f, p.b)
		if err != nil {
			return err
		}
		if p.seg == nil {
			p.seg = &messages.BlockProof{Block: uint32(p.base[p.f] + p.b), Leaves: blk.entries, First: uint32(p.l)}
		}
		end := ChunkEnd(p.l, int(blk.entries))
		p.seg.Tail = blk.PackedRows(p.l, end)
		p.extra += end - p.l
	}
	if p.seg == nil {
		return nil
	}
	seg, extra := p.seg, p.extra
	p.seg, p.extra = nil, 0
	return p.close(seg, p.f, p.b, extra)
}

// close completes proof (of block b of file f; extra: its head and tail
// rows) with its siblings and queues it. The block's digests are
// computed once, by the first proof of it, and kept with it.
func (p *Prover) close(proof *messages.BlockProof, f, b, extra int) error {
	lo, hi := int(proof.First), int(proof.First)+extra+int(proof.Rows)
	blk, err := p.block(f, b)
	if err != nil {
		return err
	}
	p.digests(f, b, blk)
	proof.SiblingsPacked = blk.RangeProof(&p.m, lo/ChunkRows, Chunks(hi))
	p.out = append(p.out, proof)
	return nil
}

// Take returns the proofs completed since the last call.
func (p *Prover) Take() []*messages.BlockProof {
	out := p.out
	p.out = nil
	return out
}

// index returns file i's index.
func (p *Prover) index(i int) (*FileIndex, error) {
	if ix := p.ixs[i]; ix != nil {
		return ix, nil
	}
	ix, hit, err := p.r.readIndex(p.reader(), i)
	if err != nil {
		return nil, err
	}
	p.ixs[i], p.ixHit[i] = ix, hit
	return ix, nil
}

// block returns block b of file i: one of the last two it returned, or
// read through the fetcher.
func (p *Prover) block(i, b int) (*Block, error) {
	for n, l := range p.last {
		if l.blk != nil && l.f == i && l.b == b {
			p.last[0], p.last[n] = l, p.last[0] // most recent first
			return l.blk, nil
		}
	}
	ix, err := p.index(i)
	if err != nil {
		return nil, err
	}
	blk, hit, err := p.r.readBlock(p.reader(), i, ix, b)
	if err != nil {
		return nil, err
	}
	p.last[1], p.last[0] = p.last[0], provenBlock{f: i, b: b, blk: blk, hit: hit}
	return blk, nil
}

// reader returns p.rd reset for a read of p's.
func (p *Prover) reader() *Iterator {
	p.rd = Iterator{ctx: p.ctx, f: p.r.f}
	return &p.rd
}

// readIndex fetches and checks the index of file i, as a scan does,
// with it (a fresh Iterator of r's fetcher: Prover.reader); hit: it
// came from the fetcher's cache.
func (r *TabletReader) readIndex(it *Iterator, i int) (_ *FileIndex, hit bool, err error) {
	s := &source{it: it, ref: r.files[i]}
	key := IndexKey(s.ref.GetId())
	v, err := s.fetch(key, true, decodeIndex)
	if err != nil {
		return nil, false, err
	}
	ix := v.(*FileIndex)
	if err := checkIndex(ix, s.ref); err != nil {
		return nil, false, fmt.Errorf("tablets: index %s: %w", key, err)
	}
	return ix, s.it.stats.IndexHits > 0, nil
}

// readBlock fetches and checks block b of file i, as a scan does, with
// it (a fresh Iterator of r's fetcher: Prover.reader); hit: it came
// from the fetcher's cache.
func (r *TabletReader) readBlock(it *Iterator, i int, ix *FileIndex, b int) (_ *Block, hit bool, err error) {
	s := &source{it: it, ref: r.files[i], ix: ix, block: b - 1}
	// nextBlock stops at a block past the range's end: the range is open.
	if !s.nextBlock() {
		if s.it.err != nil {
			return nil, false, s.it.err
		}
		return nil, false, fmt.Errorf("%w: file %s has no block %d", ErrCorrupt, r.files[i].GetId(), b)
	}
	return s.blk, s.it.stats.CacheHits > 0, nil
}

// Cut returns the largest k <= n such that the stream's next k rows end
// at the end of a block (0 when none of the next n rows ends one): a
// batch of those k rows carries the proofs of all its rows, and the
// client releases them without holding any back. It reads only file
// indexes.
func (p *Prover) Cut(n int) (int, error) {
	within, _, err := p.Cuts(n)
	return within, err
}

// CutPast returns the smallest k >= n such that the stream's next k
// rows end at the end of a block, or the rows left in the stream's
// files when fewer: a batch that may hold more than n rows takes whole
// blocks up to the first block end at or past n. It reads only file
// indexes.
func (p *Prover) CutPast(n int) (int, error) {
	_, past, err := p.Cuts(n)
	return past, err
}

// Cuts returns Cut(n) and CutPast(n) from one walk of the block ends.
func (p *Prover) Cuts(n int) (within, past int, err error) {
	if p.empty {
		return 0, 0, nil
	}
	k, f, b, l := 0, p.f, p.b, p.l
	for f < len(p.r.files) && k < n {
		ix, err := p.index(f)
		if err != nil {
			return 0, 0, err
		}
		k += int(ix.Blocks[b].Entries) - l
		if k <= n {
			within = k
		}
		b, l = b+1, 0
		for f < len(p.r.files) && b >= int(p.r.files[f].GetBlocks()) {
			f, b = f+1, 0
		}
	}
	return within, k, nil
}

// CountSpan plans a count-only scan (messages.BlockProof.counted), after
// Start: the blocks after the stream's first block and before the last
// block that holds rows of the range are counted whole instead of sent.
// It returns the first keys of the first counted block (from) and of the
// last block (to): the scan sends the rows of [its start, from), then
// the counted blocks' proofs (Count), then the rows of [to, its end).
// ok is false when no block lies between the first and the last (or
// there is nothing to prove): the scan sends every row. It reads only
// file indexes.
func (p *Prover) CountSpan() (from, to []byte, ok bool, err error) {
	if p.empty || p.f >= len(p.r.files) {
		return nil, nil, false, nil
	}
	f1, b1 := p.f, p.b+1
	for f1 < len(p.r.files) && b1 >= int(p.r.files[f1].GetBlocks()) {
		f1, b1 = f1+1, 0
	}
	if f1 >= len(p.r.files) {
		return nil, nil, false, nil
	}
	// The last block holding a row below the range's end: the last block
	// whose first key is below it.
	fl, bl := -1, 0
	for i := len(p.r.files) - 1; i >= f1 && fl < 0; i-- {
		ix, err := p.index(i)
		if err != nil {
			return nil, nil, false, err
		}
		n := len(ix.Blocks)
		if end := p.rng.End; len(end) > 0 {
			n = sort.Search(n, func(k int) bool { return bytes.Compare(ix.Blocks[k].FirstKey, end) >= 0 })
		}
		if n > 0 {
			fl, bl = i, n-1
		}
	}
	if fl < f1 || fl == f1 && bl <= b1 {
		return nil, nil, false, nil
	}
	ix1, err := p.index(f1)
	if err != nil {
		return nil, nil, false, err
	}
	ixl, err := p.index(fl)
	if err != nil {
		return nil, nil, false, err
	}
	p.countF, p.countB = fl, bl
	return ix1.Blocks[b1].FirstKey, ixl.Blocks[bl].FirstKey, true, nil
}

// Count proves up to max (>= 1) of the blocks CountSpan planned to
// count, from the stream's position, which must be the first row of a
// block (every row of [start, from) recorded with Rows), and returns
// their rows and whether more remain. Their proofs become ready for Take;
// the stream's position moves past them (to the first row of the last
// block once none remain).
func (p *Prover) Count(max int) (rows uint64, more bool, err error) {
	if p.empty {
		return 0, false, nil
	}
	if p.seg != nil || p.l != 0 {
		return 0, false, fmt.Errorf("tablets: count from row %d of block %d, not a block's first row", p.l, p.base[min(p.f, len(p.base)-1)]+p.b)
	}
	left := func() bool { return p.f < len(p.r.files) && (p.f < p.countF || p.f == p.countF && p.b < p.countB) }
	for k := 0; k < max && left(); k++ {
		blk, err := p.block(p.f, p.b)
		if err != nil {
			return rows, false, err
		}
		p.digests(p.f, p.b, blk)
		p.out = append(p.out, &messages.BlockProof{Block: uint32(p.base[p.f] + p.b), Leaves: blk.entries, Rows: blk.entries,
			Counted: true, SiblingsPacked: blk.CountProof(&p.m)})
		rows += uint64(blk.entries)
		p.next()
	}
	return rows, left(), nil
}

// CountProof returns the siblings of a counted proof of b
// (messages.BlockProof.counted), packed: the top of its chunk tree, then
// whole(b), 32 bytes each.
func (b *Block) CountProof(m *MerkleHasher) []byte {
	d := b.digests(m)
	flat := make([]byte, 0, 2*DigestSize)
	flat = append(flat, d.nodes[0][:]...)
	return append(flat, d.whole[:]...)
}

// CountRoot is the block root that a block of n rows and a counted
// proof's siblings (packed: the top of its chunk tree, then the BLAKE3
// hash of its rows) make: the root binds n, so a proof that checks out
// shows the block's row count. Siblings of any other size are an error
// wrapping ErrBadProof.
func (m *MerkleHasher) CountRoot(n int, siblings []byte) (Digest, error) {
	if n < 1 || n > MaxProofLeaves || len(siblings) != 2*DigestSize {
		return Digest{}, fmt.Errorf("%w: a counted proof of a block of %d rows has %d bytes of siblings, want 2 digests of %d bytes", ErrBadProof, n, len(siblings), DigestSize)
	}
	return m.seal(n, Digest(siblings[:DigestSize]), Digest(siblings[DigestSize:])), nil
}
