package tabletstream

import (
	"bytes"
	"fmt"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// Roots returns the block roots of the tablet's files in block order
// (messages.BlockProof numbers blocks so), or an error wrapping
// ErrNoDigests naming the first file that has none.
func Roots(tm *messages.TabletMeta) ([]tablets.Digest, error) {
	n := 0
	for _, f := range tm.GetFiles() {
		n += len(f.GetBlockRoots()) / tablets.DigestSize
	}
	roots := make([]tablets.Digest, 0, n)
	for _, f := range tm.GetFiles() {
		r := f.GetBlockRoots()
		if len(r) != int(f.GetBlocks())*tablets.DigestSize {
			return nil, fmt.Errorf("%w: file %s: %d bytes of block roots for %d blocks", ErrNoDigests, f.GetId(), len(r), f.GetBlocks())
		}
		for b := range int(f.GetBlocks()) {
			d, _ := tablets.RootAt(r, b)
			roots = append(roots, d)
		}
	}
	return roots, nil
}

// verifier checks one request's row stream against the tablet's block
// roots and holds rows back until a proof covers them
// (messages.BlockProof). Every row it releases is a row of the ingest, in
// order; when the stream ends it checks that nothing is missing: the
// rows run from the one just below the request's lower bound (or the
// tablet's first row) to the one at or past its end (or the tablet's
// last row, or the request's limit). It hashes the rows' packed bytes as
// they arrived, a chunk of rows (tablets.ChunkRows) per leaf. A
// count-only stream's counted blocks (BlockProof.counted) add to the
// count (takeCounted) once rows sent before and after them show them to
// be in the range. Every error it returns wraps tablets.ErrBadProof: the
// roots are the ingest's, so rows or proofs that do not line up with
// them are the server's (or a relay's) fault, whichever check sees it.
type verifier struct {
	roots []tablets.Digest
	rng   tablets.Range // what the request still asks for (its lower bound inclusive)
	limit uint64        // the request's row limit; 0 = none
	m     tablets.MerkleHasher

	started bool // the position below is known
	ended   bool // a proof showed the row past the range's end
	g, l    int  // position of the next row: block g, its row l
	rows    uint64
	// blind: rows of counted blocks (BlockProof.counted) since the last
	// row the stream sent; counted: counted rows a sent row after them
	// showed to be in the range, not yet taken (takeCounted).
	blind, counted uint64
	pending        []tablets.Entry // rows received that no proof covered yet
	segs           []segment       // the packed bytes of the pending rows, in order
	feed           leafFeed
	sibBuf         []byte // siblings of a proof that has them in BlockProof.siblings, packed
	// leaves: proven leaf hashes shared with other verifiers (nil: none).
	leaves *ProvenLeaves
}

// segment is packed bytes whose first rows rows are pending rows.
type segment struct {
	b    []byte
	rows int
}

func newVerifier(roots []tablets.Digest, rng tablets.Range, lastKey []byte, limit uint64) *verifier {
	v := &verifier{roots: roots, rng: rng.After(lastKey), limit: limit}
	v.feed.m = &v.m
	v.feed.leaves = v.feed.leafBuf[:0]
	return v
}

// batch takes the rows of a batch, packed (the rows, as UnpackRows
// decodes them from packed), and its proofs and returns the rows now
// proven, in order (the others wait for a later proof).
func (v *verifier) batch(packed []byte, rows []tablets.Entry, proofs []*messages.BlockProof) ([]tablets.Entry, error) {
	if len(rows) > 0 {
		v.segs = append(v.segs, segment{b: packed, rows: len(rows)})
	}
	if len(v.pending) == 0 {
		v.pending = rows // no copy while every batch carries its own proofs
	} else {
		v.pending = append(v.pending, rows...)
	}
	n := 0
	for _, p := range proofs {
		if p.GetCounted() {
			if err := v.countedProof(p); err != nil {
				return nil, err
			}
			continue
		}
		k := int(p.GetRows())
		if k > len(v.pending)-n {
			return nil, fmt.Errorf("%w: proof of block %d covers %d rows, %d received", tablets.ErrBadProof, p.GetBlock(), k, len(v.pending)-n)
		}
		if err := v.proof(p, v.pending[n:n+k]); err != nil {
			return nil, err
		}
		n += k
	}
	out := v.pending[:n:n]
	if rest := v.pending[n:]; len(rest) > 0 {
		v.pending = append([]tablets.Entry(nil), rest...)
	} else {
		v.pending = nil
	}
	return out, nil
}

// proof checks one block proof covering rows (the next rows of the stream).
func (v *verifier) proof(p *messages.BlockProof, rows []tablets.Entry) error {
	g, first, n := int(p.GetBlock()), int(p.GetFirst()), int(p.GetLeaves())
	// Head and tail hold less than a chunk's rows each in an honest
	// proof: decoded into arrays on the stack.
	var headRows, tailRows [tablets.ChunkRows]tablets.Entry
	head, err := tablets.AppendUnpacked(headRows[:0], p.GetHead())
	if err != nil {
		return fmt.Errorf("%w: proof of block %d: head: %w", tablets.ErrBadProof, g, err)
	}
	tail, err := tablets.AppendUnpacked(tailRows[:0], p.GetTail())
	if err != nil {
		return fmt.Errorf("%w: proof of block %d: tail: %w", tablets.ErrBadProof, g, err)
	}
	switch {
	case v.ended:
		return fmt.Errorf("%w: proof of block %d after the row past the range's end", tablets.ErrBadProof, g)
	case g >= len(v.roots):
		return fmt.Errorf("%w: proof of block %d: the tablet has %d blocks", tablets.ErrBadProof, g, len(v.roots))
	case n < 1 || n > tablets.MaxProofLeaves || first%tablets.ChunkRows != 0 || first+len(head)+len(rows)+len(tail) > n:
		return fmt.Errorf("%w: proof of block %d: rows %d..%d+%d+%d of %d, not from a chunk's first row", tablets.ErrBadProof,
			g, first, len(head), len(rows), len(tail), n)
	case !v.started && len(head) > 0:
		if before := head[len(head)-1].Key; len(v.rng.Start) == 0 || bytes.Compare(before, v.rng.Start) >= 0 {
			return fmt.Errorf("%w: block %d row %d: key %s is not below the range %s", tablets.ErrBadProof, g, first+len(head)-1, tablets.FormatKey(before), v.rng)
		}
	case !v.started && (g != 0 || first != 0):
		return fmt.Errorf("%w: the first proof (block %d row %d) shows neither the tablet's first row nor the row below the range %s", tablets.ErrBadProof, g, first, v.rng)
	case v.started && (len(head) > 0 || g != v.g || first != v.l):
		return fmt.Errorf("%w: proof of block %d row %d (%d head rows), the stream is at block %d row %d", tablets.ErrBadProof, g, first, len(head), v.g, v.l)
	}
	// Rows are consecutive rows of the ingest, in key order: the range
	// holds them all if it holds the first of the stream and the last.
	if len(rows) > 0 && (v.rows == 0 && !v.rng.Contains(rows[0].Key) || !v.rng.Contains(rows[len(rows)-1].Key)) {
		return fmt.Errorf("%w: block %d: rows outside the range %s", tablets.ErrBadProof, g, v.rng)
	}
	v.feed.start(n, first, first == 0 && first+len(head)+len(rows)+len(tail) == n)
	v.feed.rows(p.GetHead(), head)
	for k := len(rows); k > 0; {
		s := &v.segs[0]
		t := min(k, s.rows)
		used := v.feed.rows(s.b, rows[len(rows)-k:len(rows)-k+t])
		s.b, s.rows, k = s.b[used:], s.rows-t, k-t
		if s.rows == 0 {
			v.segs = v.segs[1:]
		}
	}
	v.feed.rows(p.GetTail(), tail)
	sib, err := v.siblings(p)
	if err != nil {
		return err
	}
	var root tablets.Digest
	switch {
	case v.feed.whole:
		root, err = v.m.WholeRoot(n, v.m.EndWhole(), sib)
	case v.feed.open > 0:
		return fmt.Errorf("%w: proof of block %d ends at row %d, inside a chunk", tablets.ErrBadProof, g, v.feed.row)
	case v.leaves != nil && v.leaves.proven(v.roots[g], n, first/tablets.ChunkRows, v.feed.leaves):
		root = v.roots[g] // every leaf proven against this root before
	default:
		root, err = v.m.RangeRoot(n, first/tablets.ChunkRows, v.feed.leaves, sib)
		if err == nil && root == v.roots[g] && v.leaves != nil {
			v.leaves.add(root, n, first/tablets.ChunkRows, v.feed.leaves)
		}
	}
	if err != nil {
		return fmt.Errorf("block %d: %w", g, err)
	}
	if root != v.roots[g] {
		return fmt.Errorf("%w: block %d rows %d..%d", tablets.ErrBadProof, g, first, v.feed.row-1)
	}
	v.started = true
	v.g, v.l = g, first+len(head)+len(rows)
	if len(tail) > 0 && len(v.rng.End) > 0 && bytes.Compare(tail[0].Key, v.rng.End) >= 0 {
		v.ended = true // the row past the range's end; otherwise the tail only completes a chunk
	}
	if v.l == n {
		v.g, v.l = g+1, 0
	}
	v.rows += uint64(len(rows))
	if len(rows) > 0 {
		// The counted blocks before these rows lie below a row in the
		// range, and above one: they are in it.
		v.counted += v.blind
		v.blind = 0
	}
	return nil
}

// countedProof checks a counted proof: all the rows of the block at the
// stream's position, none sent, after a row the stream sent (which shows
// that the counted rows are at or above the range's lower bound).
func (v *verifier) countedProof(p *messages.BlockProof) error {
	g, n := int(p.GetBlock()), int(p.GetLeaves())
	switch {
	case v.limit > 0:
		return fmt.Errorf("%w: counted proof of block %d in a scan with a limit", tablets.ErrBadProof, g)
	case v.rows == 0:
		return fmt.Errorf("%w: counted proof of block %d before any row of the stream", tablets.ErrBadProof, g)
	case v.ended:
		return fmt.Errorf("%w: counted proof of block %d after the row past the range's end", tablets.ErrBadProof, g)
	case g != v.g || v.l != 0:
		return fmt.Errorf("%w: counted proof of block %d, the stream is at block %d row %d", tablets.ErrBadProof, g, v.g, v.l)
	case g >= len(v.roots):
		return fmt.Errorf("%w: counted proof of block %d: the tablet has %d blocks", tablets.ErrBadProof, g, len(v.roots))
	case p.GetFirst() != 0 || int(p.GetRows()) != n || len(p.GetHead()) > 0 || len(p.GetTail()) > 0:
		return fmt.Errorf("%w: counted proof of block %d: rows %d..+%d of %d with %d head and %d tail bytes, not the whole block",
			tablets.ErrBadProof, g, p.GetFirst(), p.GetRows(), n, len(p.GetHead()), len(p.GetTail()))
	}
	sib, err := v.siblings(p)
	if err != nil {
		return err
	}
	root, err := v.m.CountRoot(n, sib)
	if err != nil {
		return fmt.Errorf("block %d: %w", g, err)
	}
	if root != v.roots[g] {
		return fmt.Errorf("%w: block %d counted as %d rows", tablets.ErrBadProof, g, n)
	}
	v.g, v.l = g+1, 0
	v.blind += uint64(n)
	return nil
}

// siblings returns p's siblings packed, 32 bytes each, from either of
// its fields (BlockProof.siblings_packed, or siblings copied into
// v.sibBuf). A proof with both, or a sibling of the repeated field not of
// tablets.DigestSize bytes, is an error wrapping tablets.ErrBadProof.
func (v *verifier) siblings(p *messages.BlockProof) ([]byte, error) {
	packed, each := p.GetSiblingsPacked(), p.GetSiblings()
	switch {
	case len(each) == 0:
		return packed, nil
	case len(packed) > 0:
		return nil, fmt.Errorf("%w: proof of block %d has siblings in both fields", tablets.ErrBadProof, p.GetBlock())
	}
	v.sibBuf = v.sibBuf[:0]
	for i, s := range each {
		if len(s) != tablets.DigestSize {
			return nil, fmt.Errorf("%w: proof of block %d: sibling %d has %d bytes, want %d", tablets.ErrBadProof, p.GetBlock(), i, len(s), tablets.DigestSize)
		}
		v.sibBuf = append(v.sibBuf, s...)
	}
	return v.sibBuf, nil
}

// takeCounted returns the counted rows shown to be in the range since
// the last call.
func (v *verifier) takeCounted() uint64 {
	n := v.counted
	v.counted = 0
	return n
}

// leafFeed hashes a proof's rows, in order: all of them with one BLAKE3
// pass when they are the whole block, else into the leaves of the chunks
// they make up.
type leafFeed struct {
	m      *tablets.MerkleHasher
	whole  bool
	n      int // rows of the block
	row    int // block row of the next row
	end    int // the row past the chunk being hashed
	open   int // rows of that chunk hashed so far
	leaves []tablets.Digest
	// leafBuf holds the leaves of a short scan's proof.
	leafBuf [8]tablets.Digest
}

// start begins the chunks from row first (a chunk's first row) of a
// block of n rows, or the whole block's hash.
func (f *leafFeed) start(n, first int, whole bool) {
	f.n, f.row, f.end, f.open, f.leaves, f.whole = n, first, tablets.ChunkEnd(first, n), 0, f.leaves[:0], whole
	if whole {
		f.m.BeginWhole()
		return
	}
	f.m.BeginLeaf()
}

// rows hashes rows, whose packed encoding is at the start of b, and
// returns how many bytes of b they take: one hash Write per chunk, or
// for a whole block per call.
func (f *leafFeed) rows(b []byte, rows []tablets.Entry) int {
	start, off := 0, 0
	if f.whole {
		for _, r := range rows {
			off += tablets.PackedRowSize(len(r.Key), len(r.Value))
		}
		f.m.WriteWhole(b[:off])
		f.row += len(rows)
		return off
	}
	for _, r := range rows {
		off += tablets.PackedRowSize(len(r.Key), len(r.Value))
		f.row++
		f.open++
		if f.row == f.end {
			f.m.Write(b[start:off])
			f.leaves = append(f.leaves, f.m.EndLeaf())
			start, f.open, f.end = off, 0, tablets.ChunkEnd(f.row, f.n)
			f.m.BeginLeaf()
		}
	}
	if start < off {
		f.m.Write(b[start:off])
	}
	return off
}

// finish checks the end of a successful stream, after the proofs of its
// ScanFinished (if it came alone): every row proven, and the range
// complete.
func (v *verifier) finish() error {
	if v.blind > 0 {
		// Counted rows after the last row sent are in the range only if
		// it runs to the tablet's end and they reach it.
		if len(v.rng.End) > 0 || v.g < len(v.roots) {
			return fmt.Errorf("%w: %d counted rows after the last row sent, not shown to be below the range's end %s", tablets.ErrBadProof, v.blind, v.rng)
		}
		v.counted += v.blind
		v.blind = 0
	}
	switch {
	case len(v.pending) > 0:
		return fmt.Errorf("%w: %d rows without a proof", tablets.ErrBadProof, len(v.pending))
	case v.ended, v.limit > 0 && v.rows >= v.limit, v.rng.Empty(), len(v.roots) == 0:
		return nil
	case v.started && v.g >= len(v.roots):
		return nil // the tablet's last row was proven
	case !v.started:
		return fmt.Errorf("%w: no proof for the range %s", tablets.ErrBadProof, v.rng)
	}
	return fmt.Errorf("%w: the stream ended at block %d row %d without showing the end of the range %s", tablets.ErrBadProof, v.g, v.l, v.rng)
}

// Siblings returns p's siblings one digest a slice, from either of its
// fields (the public API's BlockProof has them so); the slices share
// p's bytes. Packed bytes that are not a whole number of digests end in
// a shorter slice, which the proof's check refuses.
func Siblings(p *messages.BlockProof) [][]byte {
	packed := p.GetSiblingsPacked()
	if len(packed) == 0 {
		return p.GetSiblings()
	}
	out := make([][]byte, 0, (len(packed)+tablets.DigestSize-1)/tablets.DigestSize)
	for len(packed) > 0 {
		k := min(len(packed), tablets.DigestSize)
		out = append(out, packed[:k:k])
		packed = packed[k:]
	}
	return append(out, p.GetSiblings()...)
}
