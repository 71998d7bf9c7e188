package client

import (
	"bytes"
	"fmt"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// tabletRoots returns the block roots of the tablet's files in block
// order (messages.BlockProof numbers blocks so), or an error wrapping
// ErrUnverified when a file has none.
func tabletRoots(table string, gen uint64, tm *messages.TabletMeta) ([]tablets.Digest, error) {
	var roots []tablets.Digest
	for _, f := range tm.GetFiles() {
		r := f.GetBlockRoots()
		if len(r) != int(f.GetBlocks())*tablets.DigestSize {
			return nil, fmt.Errorf("%w: table %s generation %d, file %s: %d bytes of block roots for %d blocks (ingested without digests: ingest it again, or scan with AllowUnverified)",
				ErrUnverified, table, gen, f.GetId(), len(r), f.GetBlocks())
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
// last row, or the request's limit).
type verifier struct {
	roots []tablets.Digest
	rng   tablets.Range // what the request still asks for (its lower bound inclusive)
	limit uint64        // the request's row limit; 0 = none
	m     tablets.MerkleHasher

	started bool // the position below is known
	ended   bool // a proof showed the row past the range's end
	g, l    int  // position of the next row: block g, its row l
	rows    uint64
	pending []tablets.Entry // rows received that no proof covered yet
	leaves  []tablets.Digest
}

func newVerifier(roots []tablets.Digest, rng tablets.Range, lastKey []byte, limit uint64) *verifier {
	return &verifier{roots: roots, rng: rng.After(lastKey), limit: limit}
}

// batch takes the rows of a batch and its proofs and returns the rows now
// proven, in order (the others wait for a later proof).
func (v *verifier) batch(rows []tablets.Entry, proofs []*messages.BlockProof) ([]tablets.Entry, error) {
	if len(v.pending) == 0 {
		v.pending = rows // no copy while every batch carries its own proofs
	} else {
		v.pending = append(v.pending, rows...)
	}
	n := 0
	for _, p := range proofs {
		k := int(p.GetRows())
		if k > len(v.pending)-n {
			return nil, fmt.Errorf("proof of block %d covers %d rows, %d received", p.GetBlock(), k, len(v.pending)-n)
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
	before, after := p.GetBefore(), p.GetAfter()
	switch {
	case v.ended:
		return fmt.Errorf("proof of block %d after the row past the range's end", g)
	case g >= len(v.roots):
		return fmt.Errorf("proof of block %d: the tablet has %d blocks", g, len(v.roots))
	case !v.started && before != nil:
		if len(v.rng.Start) == 0 || bytes.Compare(before.GetKey(), v.rng.Start) >= 0 {
			return fmt.Errorf("block %d row %d: key %s is not below the range %s", g, first, tablets.FormatKey(before.GetKey()), v.rng)
		}
	case !v.started && (g != 0 || first != 0):
		return fmt.Errorf("the first proof (block %d row %d) shows neither the tablet's first row nor the row below the range %s", g, first, v.rng)
	case v.started && (before != nil || g != v.g || first != v.l):
		return fmt.Errorf("proof of block %d row %d, the stream is at block %d row %d", g, first, v.g, v.l)
	}
	// Rows are consecutive rows of the ingest, in key order: the range
	// holds them all if it holds the first of the stream and the last.
	if len(rows) > 0 && (!v.started && !v.rng.Contains(rows[0].Key) || !v.rng.Contains(rows[len(rows)-1].Key)) {
		return fmt.Errorf("block %d: rows outside the range %s", g, v.rng)
	}
	v.leaves = v.leaves[:0]
	if before != nil {
		v.leaves = append(v.leaves, v.m.Leaf(before.GetKey(), before.GetValue()))
	}
	for _, r := range rows {
		v.leaves = append(v.leaves, v.m.Leaf(r.Key, r.Value))
	}
	if after != nil {
		v.leaves = append(v.leaves, v.m.Leaf(after.GetKey(), after.GetValue()))
	}
	root, err := v.m.RangeRoot(n, first, v.leaves, p.GetSiblings())
	if err != nil {
		return fmt.Errorf("block %d: %w", g, err)
	}
	if root != v.roots[g] {
		return fmt.Errorf("%w: block %d rows %d..%d", tablets.ErrBadProof, g, first, first+len(v.leaves)-1)
	}
	v.started = true
	v.g, v.l = g, first+len(v.leaves)
	if after != nil {
		v.l--
		if len(v.rng.End) == 0 || bytes.Compare(after.GetKey(), v.rng.End) < 0 {
			return fmt.Errorf("block %d row %d: key %s is inside the range %s", g, v.l, tablets.FormatKey(after.GetKey()), v.rng)
		}
		v.ended = true
	}
	if v.l == n {
		v.g, v.l = g+1, 0
	}
	v.rows += uint64(len(rows))
	return nil
}

// finish checks the end of a successful stream, after the proofs of its
// ScanFinished (if it came alone): every row proven, and the range
// complete.
func (v *verifier) finish() error {
	switch {
	case len(v.pending) > 0:
		return fmt.Errorf("%d rows without a proof", len(v.pending))
	case v.ended, v.limit > 0 && v.rows >= v.limit, v.rng.Empty(), len(v.roots) == 0:
		return nil
	case v.started && v.g >= len(v.roots):
		return nil // the tablet's last row was proven
	case !v.started:
		return fmt.Errorf("no proof for the range %s", v.rng)
	}
	return fmt.Errorf("the stream ended at block %d row %d without showing the end of the range %s", v.g, v.l, v.rng)
}
