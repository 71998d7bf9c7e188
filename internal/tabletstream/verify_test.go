package tabletstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"google.golang.org/protobuf/proto"
)

// memFetcher serves blocks and indexes from memory.
type memFetcher map[string][]byte

func (m memFetcher) FetchBlock(_ context.Context, key string) ([]byte, bool, error) {
	if d, ok := m[key]; ok {
		return d, false, nil
	}
	return nil, false, fmt.Errorf("%w: %s", tablets.ErrNotFound, key)
}

// verifyTablet is a tablet of rows k0000.. (row i has key 2i) in files
// of perFile rows each (disjoint, ascending, as ingest writes them),
// blocks of about blockSize bytes.
func verifyTablet(t testing.TB, rows, perFile, blockSize int) ([]*messages.FileRef, memFetcher, []tablets.Entry) {
	t.Helper()
	f := memFetcher{}
	var refs []*messages.FileRef
	var truth []tablets.Entry
	for lo := 0; lo < rows; lo += perFile {
		w := tablets.NewFileWriter(fmt.Sprintf("f%d", lo), blockSize)
		for i := lo; i < min(lo+perFile, rows); i++ {
			e := tablets.Entry{Key: fmt.Appendf(nil, "k%04d", 2*i), Value: fmt.Appendf(nil, "v%d", i)}
			truth = append(truth, e)
			if err := w.Add(e.Key, e.Value); err != nil {
				t.Fatal(err)
			}
		}
		ef, err := w.Finish()
		if err != nil {
			t.Fatal(err)
		}
		for i, b := range ef.Blocks {
			f[tablets.BlockKey(ef.ID, i)] = b
		}
		f[tablets.IndexKey(ef.ID)] = ef.Index
		refs = append(refs, ef.Ref())
	}
	return refs, f, truth
}

// serve runs a scan as a scan server does: the reader's rows in batches
// of batch rows, with the prover's proofs; the last batch carries the
// end's proofs, or, when the rows ended with a full batch, a separate
// ScanFinished (returned as the final element with no rows).
type served struct {
	rows   []tablets.Entry
	proofs []*messages.BlockProof
}

func serve(t *testing.T, files []*messages.FileRef, f memFetcher, rng tablets.Range, after []byte, limit uint64, batch int) []served {
	t.Helper()
	ctx := context.Background()
	it := tablets.NewTabletReader(files, f).Scan(ctx, rng, after)
	p := tablets.NewProver(ctx, files, f, rng, after)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	var out []served
	var cur []tablets.Entry
	var sent uint64
	flush := func(last bool) {
		if err := p.Rows(len(cur)); err != nil {
			t.Fatal(err)
		}
		sent += uint64(len(cur))
		if last {
			if err := p.Finish(limit > 0 && sent >= limit); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, served{rows: cur, proofs: p.Take()})
		cur = nil
	}
	for it.Next() {
		e := it.Entry()
		cur = append(cur, tablets.Entry{Key: bytes.Clone(e.Key), Value: bytes.Clone(e.Value)})
		if limit > 0 && sent+uint64(len(cur)) >= limit {
			break
		}
		if len(cur) == batch {
			flush(false)
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if len(cur) > 0 {
		flush(true)
	} else {
		if err := p.Finish(limit > 0 && sent >= limit); err != nil {
			t.Fatal(err)
		}
		out = append(out, served{proofs: p.Take()})
	}
	return out
}

// packRows is a batch's rows as a client decodes them from the packed bytes.
func packRows(t testing.TB, rows []tablets.Entry) ([]byte, []tablets.Entry) {
	var b []byte
	for _, r := range rows {
		b = tablets.AppendPackedRow(b, r.Key, r.Value)
	}
	out, err := tablets.UnpackRows(b, len(rows))
	if err != nil {
		t.Fatal(err)
	}
	return b, out
}

// check feeds what a server sent to a verifier and returns the rows it
// released and the first error.
func check(t testing.TB, roots []tablets.Digest, rng tablets.Range, after []byte, limit uint64, batches []served) ([]tablets.Entry, error) {
	return checkKept(t, nil, roots, rng, after, limit, batches)
}

// checkKept is check with a verifier that uses the proven leaves pc.
func checkKept(t testing.TB, pc *ProvenLeaves, roots []tablets.Digest, rng tablets.Range, after []byte, limit uint64, batches []served) ([]tablets.Entry, error) {
	v := newVerifier(roots, rng, after, limit)
	v.leaves = pc
	var got []tablets.Entry
	for _, b := range batches {
		packed, rows := packRows(t, b.rows)
		rows, err := v.batch(packed, rows, b.proofs)
		if err != nil {
			return got, err
		}
		got = append(got, rows...)
	}
	return got, v.finish()
}

func want(truth []tablets.Entry, rng tablets.Range, after []byte, limit uint64) []tablets.Entry {
	var out []tablets.Entry
	r := rng.After(after)
	for _, e := range truth {
		if r.Contains(e.Key) && !r.Empty() && (limit == 0 || uint64(len(out)) < limit) {
			out = append(out, e)
		}
	}
	return out
}

func equalEntries(a, b []tablets.Entry) bool {
	return slices.EqualFunc(a, b, func(x, y tablets.Entry) bool {
		return bytes.Equal(x.Key, y.Key) && bytes.Equal(x.Value, y.Value)
	})
}

// TestVerifierHonestScans: every row an honest server sends is released
// and the stream checks out complete, for ranges that start and end on
// rows, between rows, at block and file boundaries, outside the tablet,
// resumed after a key, limited, and in batches that cut blocks anywhere.
func TestVerifierHonestScans(t *testing.T) {
	key := func(i int) []byte { return fmt.Appendf(nil, "k%04d", i) } // even i: a row; odd: between rows
	t.Run("small blocks", func(t *testing.T) {
		// Blocks of one chunk or less: every block boundary is a chunk's.
		files, f, truth := verifyTablet(t, 100, 40, 100)
		bounds := [][]byte{nil, key(0), key(1), key(39), key(78), key(79), key(80), key(81), key(130), key(198), key(199), key(200), key(400)}
		verifyScans(t, files, f, truth, bounds, [][]byte{nil, key(20), key(79)}, []uint64{0, 1, 7}, []int{1, 3, 50})
	})
	t.Run("chunks", func(t *testing.T) {
		// Blocks of several chunks: ranges, resumes and limits that start
		// and end on a chunk's first row, its last, inside it, and at
		// block and file boundaries.
		files, f, truth := verifyTablet(t, 500, 200, 600)
		bounds := [][]byte{nil, key(0), key(31), key(32), key(34), key(63), key(98), key(201), key(398), key(400), key(997), key(998), key(1000)}
		verifyScans(t, files, f, truth, bounds, [][]byte{nil, key(40), key(62), key(64)}, []uint64{0, 1, 15, 16, 17}, []int{1, 5, 64})
	})
	t.Run("kept chunks", func(t *testing.T) {
		// The same scans twice with one set of proven leaves: the second
		// pass checks most proofs against kept leaves; a small budget
		// evicts as it goes.
		files, f, truth := verifyTablet(t, 500, 200, 600)
		bounds := [][]byte{nil, key(0), key(31), key(32), key(34), key(63), key(98), key(201), key(398), key(400), key(997), key(998), key(1000)}
		for _, budget := range []int{1 << 12, 8 * leafShards} {
			pc := NewProvenLeaves(budget)
			for range 2 {
				verifyScansKept(t, pc, files, f, truth, bounds, [][]byte{nil, key(62)}, []uint64{0, 17}, []int{5, 64})
			}
			if pc.Len() == 0 {
				t.Fatalf("budget %d: no leaf kept", budget)
			}
		}
	})
}

// verifyScans checks scans of every range between bounds, resumed after
// each of afters, with each limit and batch size.
func verifyScans(t *testing.T, files []*messages.FileRef, f memFetcher, truth []tablets.Entry, bounds, afters [][]byte, limits []uint64, batches []int) {
	verifyScansKept(t, nil, files, f, truth, bounds, afters, limits, batches)
}

// verifyScansKept is verifyScans with verifiers that use the proven
// leaves pc.
func verifyScansKept(t *testing.T, pc *ProvenLeaves, files []*messages.FileRef, f memFetcher, truth []tablets.Entry, bounds, afters [][]byte, limits []uint64, batches []int) {
	roots, err := Roots(&messages.TabletMeta{Files: files})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 || len(roots) < 10 {
		t.Fatalf("%d files, %d blocks: want several of each", len(files), len(roots))
	}
	n := 0
	for _, s := range bounds {
		for _, e := range bounds {
			rng := tablets.Range{Start: s, End: e}
			if rng.Validate() != nil {
				continue
			}
			for _, after := range afters {
				for _, limit := range limits {
					for _, batch := range batches {
						got, err := checkKept(t, pc, roots, rng, after, limit, serve(t, files, f, rng, after, limit, batch))
						if err != nil || !equalEntries(got, want(truth, rng, after, limit)) {
							t.Fatalf("%s after %q limit %d batch %d: %d rows, want %d, err %v", rng, after, limit, batch,
								len(got), len(want(truth, rng, after, limit)), err)
						}
						n++
					}
				}
			}
		}
	}
	t.Logf("%d scans verified", n)
}

// TestVerifierCatchesLies: rows changed, dropped, added, reordered, an
// empty answer, a stream cut short, a block left out or proofs left out
// are refused with tablets.ErrBadProof (what the API client's caller
// sees); no row past the lie is released.
func TestVerifierCatchesLies(t *testing.T) {
	t.Run("small blocks", func(t *testing.T) { verifyLies(t, 100, 40, 100, false) })
	t.Run("chunks", func(t *testing.T) { verifyLies(t, 500, 200, 600, false) })
	// The leaves of the honest answer proven and kept before the lie
	// (blocks of several chunks: a block of one is proven whole).
	t.Run("kept leaves", func(t *testing.T) { verifyLies(t, 500, 200, 600, true) })
}

func verifyLies(t *testing.T, rowsN, perFile, blockSize int, kept bool) {
	files, f, truth := verifyTablet(t, rowsN, perFile, blockSize)
	roots, err := Roots(&messages.TabletMeta{Files: files})
	if err != nil {
		t.Fatal(err)
	}
	rng := tablets.Range{Start: []byte("k0021"), End: []byte("k0153")}
	honest := func() []served { return serve(t, files, f, rng, nil, 0, 4) }
	for name, lie := range map[string]func(*testing.T, []served) []served{
		"forged value": func(t *testing.T, bs []served) []served {
			bs[3].rows[1].Value = []byte("EVIL")
			return bs
		},
		"dropped row": func(t *testing.T, bs []served) []served {
			bs[2].rows = slices.Delete(bs[2].rows, 0, 1)
			return bs
		},
		"added row": func(t *testing.T, bs []served) []served {
			bs[2].rows = slices.Insert(bs[2].rows, 1, tablets.Entry{Key: append(bytes.Clone(bs[2].rows[0].Key), 'x'), Value: []byte("v")})
			return bs
		},
		"swapped rows": func(t *testing.T, bs []served) []served {
			bs[1].rows[0], bs[1].rows[1] = bs[1].rows[1], bs[1].rows[0]
			return bs
		},
		"empty answer": func(*testing.T, []served) []served { return []served{{}} },
		"cut short": func(t *testing.T, bs []served) []served {
			return bs[:len(bs)/2]
		},
		"no proofs": func(t *testing.T, bs []served) []served {
			for i := range bs {
				bs[i].proofs = nil
			}
			return bs
		},
		"first proof dropped": func(t *testing.T, bs []served) []served {
			for i := range bs {
				if len(bs[i].proofs) > 0 {
					bs[i].proofs = bs[i].proofs[1:]
					break
				}
			}
			return bs
		},
		"rows of a later range": func(*testing.T, []served) []served {
			return serve(t, files, f, tablets.Range{Start: []byte("k0031"), End: rng.End}, nil, 0, 4)
		},
		"rows of an earlier range": func(*testing.T, []served) []served {
			return serve(t, files, f, tablets.Range{Start: []byte("k0011"), End: rng.End}, nil, 0, 4)
		},
		"forged head row": func(t *testing.T, bs []served) []served {
			p := firstProof(bs, func(p *messages.BlockProof) bool { return len(p.Head) > 0 })
			p.Head = bytes.Clone(p.Head)
			p.Head[len(p.Head)-1] ^= 1
			return bs
		},
		"forged tail row": func(t *testing.T, bs []served) []served {
			p := lastProof(bs)
			p.Tail = bytes.Clone(p.Tail)
			p.Tail[len(p.Tail)-1] ^= 1
			return bs
		},
		"tail left out": func(t *testing.T, bs []served) []served {
			lastProof(bs).Tail = nil
			return bs
		},
		"tail cut short": func(t *testing.T, bs []served) []served {
			p := lastProof(bs)
			tail, _ := tablets.UnpackRows(p.Tail, 0)
			p.Tail = repack(tail[:len(tail)-1])
			return bs
		},
		"row below the range yielded from the head": func(t *testing.T, bs []served) []served {
			p := firstProof(bs, func(p *messages.BlockProof) bool { return len(p.Head) > 0 })
			head, _ := tablets.UnpackRows(p.Head, 0)
			p.Head, p.Rows = repack(head[:len(head)-1]), p.Rows+1
			bs[0].rows = slices.Insert(bs[0].rows, 0, head[len(head)-1])
			return bs
		},
		"last row hidden in the tail": func(t *testing.T, bs []served) []served {
			last := &bs[len(bs)-1]
			p := lastProof(bs)
			tail, _ := tablets.UnpackRows(p.Tail, 0)
			p.Tail, p.Rows = repack(append([]tablets.Entry{last.rows[len(last.rows)-1]}, tail...)), p.Rows-1
			last.rows = last.rows[:len(last.rows)-1]
			return bs
		},
		"forged rows of a chunk proven by its sibling": func(t *testing.T, bs []served) []served {
			// The last chunk, which holds the last rows of the stream,
			// left out of the leaves: its true hash passed as a sibling
			// instead, and its stream rows forged.
			p := lastProof(bs)
			head, _ := tablets.UnpackRows(p.Head, 0)
			tail, _ := tablets.UnpackRows(p.Tail, 0)
			first := int(p.First)
			end := first + len(head) + int(p.Rows) + len(tail)
			last := (end - 1) / tablets.ChunkRows
			if first+len(head)+int(p.Rows) <= last*tablets.ChunkRows || last == first/tablets.ChunkRows {
				t.Skipf("the last proof (rows %d..%d) has no stream rows in a chunk of its own", first, end)
			}
			var m tablets.MerkleHasher
			p.Tail, p.SiblingsPacked = nil, blockOf(t, files, f, int(p.Block)).RangeProof(&m, first/tablets.ChunkRows, last)
			rows := bs[len(bs)-1].rows
			rows[len(rows)-1].Value = []byte("EVIL")
			return bs
		},
		"ends early with a false end row": func(t *testing.T, bs []served) []served {
			return serve(t, files, f, tablets.Range{Start: rng.Start, End: []byte("k0101")}, nil, 0, 4)
		},
		"block left out": func(t *testing.T, bs []served) []served {
			// One batch per proof, with the rows it covers; then a block
			// in the middle left out, its rows and its proof.
			var rows []tablets.Entry
			var ps []*messages.BlockProof
			for _, b := range bs {
				rows, ps = append(rows, b.rows...), append(ps, b.proofs...)
			}
			var out []served
			for _, p := range ps {
				k := int(p.GetRows())
				out = append(out, served{rows: rows[:k], proofs: []*messages.BlockProof{p}})
				rows = rows[k:]
			}
			if len(out) < 3 {
				t.Skipf("%d proofs: no block in the middle", len(out))
			}
			return slices.Delete(out, len(out)/2, len(out)/2+1)
		},
	} {
		t.Run(name, func(t *testing.T) {
			var pc *ProvenLeaves
			if kept {
				pc = NewProvenLeaves(1 << 12)
				if _, err := checkKept(t, pc, roots, rng, nil, 0, honest()); err != nil {
					t.Fatal(err)
				}
				if pc.Len() == 0 {
					t.Fatal("the honest answer kept no leaf")
				}
			}
			bs := lie(t, honest())
			got, err := checkKept(t, pc, roots, rng, nil, 0, bs)
			if !errors.Is(err, tablets.ErrBadProof) {
				t.Fatalf("lie: %d rows released, %v; want %v", len(got), err, tablets.ErrBadProof)
			}
			// What was released is a true prefix of the answer.
			if w := want(truth, rng, nil, 0); len(got) > len(w) || !equalEntries(got, w[:len(got)]) {
				t.Fatalf("released rows that are not the range's first %d", len(got))
			}

		})
	}
}

// TestVerifierWholeBlocks: a scan of whole blocks is proven by their
// rows' BLAKE3 hashes; a forged, dropped, added or swapped row in any of
// them is refused with tablets.ErrBadProof, in the last block of a batch
// too (a proof that covers more rows than came, a row no proof covers).
func TestVerifierWholeBlocks(t *testing.T) {
	files, f, truth := verifyTablet(t, 500, 200, 600)
	roots, err := Roots(&messages.TabletMeta{Files: files})
	if err != nil {
		t.Fatal(err)
	}
	whole := func() []served { return serve(t, files, f, tablets.Range{}, nil, 0, 1000) }
	for _, bs := range [][]served{whole()} {
		for _, p := range bs[0].proofs {
			if p.First != 0 || len(p.Head) > 0 || len(p.Tail) > 0 || p.Rows != p.Leaves || len(p.SiblingsPacked) != tablets.DigestSize {
				t.Fatalf("proof of block %d is not a whole block's: %v", p.Block, p)
			}
		}
	}
	if got, err := check(t, roots, tablets.Range{}, nil, 0, whole()); err != nil || !equalEntries(got, truth) {
		t.Fatalf("honest: %d rows, %v", len(got), err)
	}
	for i := 0; i < len(truth); i += 37 {
		for name, lie := range map[string]func([]tablets.Entry) []tablets.Entry{
			"forged": func(rows []tablets.Entry) []tablets.Entry {
				rows[i].Value = append(bytes.Clone(rows[i].Value), 'x')
				return rows
			},
			"dropped": func(rows []tablets.Entry) []tablets.Entry { return slices.Delete(rows, i, i+1) },
			"added": func(rows []tablets.Entry) []tablets.Entry {
				return slices.Insert(rows, i+1, tablets.Entry{Key: append(bytes.Clone(rows[i].Key), 'x')})
			},
			"swapped": func(rows []tablets.Entry) []tablets.Entry {
				j := min(i+1, len(rows)-1)
				if j == i {
					j = i - 1
				}
				rows[i], rows[j] = rows[j], rows[i]
				return rows
			},
		} {
			bs := whole()
			bs[0].rows = lie(bs[0].rows)
			if got, err := check(t, roots, tablets.Range{}, nil, 0, bs); !errors.Is(err, tablets.ErrBadProof) {
				t.Fatalf("row %d %s: %d rows, %v; want %v", i, name, len(got), err, tablets.ErrBadProof)
			}
		}
	}
}

// TestVerifierRowPastTheLastProof: a row after the last row the proofs
// cover is never released, and the stream fails with tablets.ErrBadProof.
func TestVerifierRowPastTheLastProof(t *testing.T) {
	files, f, truth := verifyTablet(t, 500, 200, 600)
	roots, err := Roots(&messages.TabletMeta{Files: files})
	if err != nil {
		t.Fatal(err)
	}
	bs := serve(t, files, f, tablets.Range{}, nil, 0, 1000)
	last := truth[len(truth)-1]
	bs[0].rows = append(bs[0].rows, tablets.Entry{Key: append(bytes.Clone(last.Key), 'x'), Value: []byte("v")})
	if got, err := check(t, roots, tablets.Range{}, nil, 0, bs); !errors.Is(err, tablets.ErrBadProof) || !equalEntries(got, truth) {
		t.Fatalf("%d rows released, %v; want the %d true rows and %v", len(got), err, len(truth), tablets.ErrBadProof)
	}
}

// blockOf is block g of the tablet of files (numbered across them).
func blockOf(t testing.TB, files []*messages.FileRef, f memFetcher, g int) *tablets.Block {
	for _, ref := range files {
		if g >= int(ref.GetBlocks()) {
			g -= int(ref.GetBlocks())
			continue
		}
		ix, err := tablets.DecodeIndex(f[tablets.IndexKey(ref.GetId())])
		if err != nil {
			t.Fatal(err)
		}
		blk, err := tablets.VerifyBlock(f[tablets.BlockKey(ref.GetId(), g)], ix.Blocks[g])
		if err != nil {
			t.Fatal(err)
		}
		return blk
	}
	t.Fatalf("no block %d", g)
	return nil
}

// firstProof is the first proof of bs that ok accepts.
func firstProof(bs []served, ok func(*messages.BlockProof) bool) *messages.BlockProof {
	for _, b := range bs {
		for _, p := range b.proofs {
			if ok(p) {
				return p
			}
		}
	}
	panic("no such proof")
}

// lastProof is the last proof of bs.
func lastProof(bs []served) *messages.BlockProof {
	for i := len(bs) - 1; i >= 0; i-- {
		if n := len(bs[i].proofs); n > 0 {
			return bs[i].proofs[n-1]
		}
	}
	panic("no proofs")
}

func repack(rows []tablets.Entry) []byte {
	var b []byte
	for _, r := range rows {
		b = tablets.AppendPackedRow(b, r.Key, r.Value)
	}
	return b
}

// TestNoDigests: a tablet whose files have no block roots cannot be
// verified.
func TestNoDigests(t *testing.T) {
	_, err := Roots(&messages.TabletMeta{Files: []*messages.FileRef{{Id: "f", Blocks: 2}}})
	if !errors.Is(err, ErrNoDigests) {
		t.Fatalf("%v", err)
	}
}

// BenchmarkVerifyWholeBlocks: the client's cost of checking rows of
// whole blocks (64 KiB blocks of 100-byte rows), per row.
func BenchmarkVerifyWholeBlocks(b *testing.B) {
	w := tablets.NewFileWriter("f", tablets.DefaultBlockSize)
	var rows []tablets.Entry
	for i := 0; i < 20000; i++ {
		e := tablets.Entry{Key: fmt.Appendf(nil, "row%09d", i), Value: bytes.Repeat([]byte("v"), 88)}
		rows = append(rows, e)
		if err := w.Add(e.Key, e.Value); err != nil {
			b.Fatal(err)
		}
	}
	f, err := w.Finish()
	if err != nil {
		b.Fatal(err)
	}
	ref := f.Ref()
	roots, err := Roots(&messages.TabletMeta{Files: []*messages.FileRef{ref}})
	if err != nil {
		b.Fatal(err)
	}
	ix, _ := tablets.DecodeIndex(f.Index)
	var proofs []*messages.BlockProof
	var m tablets.MerkleHasher
	for i, h := range ix.Blocks {
		blk, err := tablets.VerifyBlock(f.Blocks[i], h)
		if err != nil {
			b.Fatal(err)
		}
		proofs = append(proofs, &messages.BlockProof{Block: uint32(i), Leaves: h.Entries, Rows: h.Entries,
			SiblingsPacked: blk.RangeProof(&m, 0, tablets.Chunks(blk.Entries()))})
	}
	packed, rows := packRows(b, rows)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		v := newVerifier(roots, tablets.Range{}, nil, 0)
		if _, err := v.batch(packed, rows, proofs); err != nil {
			b.Fatal(err)
		}
		if err := v.finish(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rows)), "ns/row")
}

// shortScan is what an honest server sends for a scan of rows [lo, hi)
// of a tablet of blocks of several chunks (keys as verifyTablet's), in
// one batch, and the tablet's roots.
func shortScan(t testing.TB, lo, hi int) ([]tablets.Digest, tablets.Range, []byte, []tablets.Entry, []*messages.BlockProof) {
	t.Helper()
	files, f, _ := verifyTablet(t, 2000, 2000, 4096)
	roots, err := Roots(&messages.TabletMeta{Files: files})
	if err != nil {
		t.Fatal(err)
	}
	rng := tablets.Range{Start: fmt.Appendf(nil, "k%04d", 2*lo), End: fmt.Appendf(nil, "k%04d", 2*hi)}
	ctx := context.Background()
	it := tablets.NewTabletReader(files, f).Scan(ctx, rng, nil)
	p := tablets.NewProver(ctx, files, f, rng, nil)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	var rows []tablets.Entry
	for it.Next() {
		e := it.Entry()
		rows = append(rows, tablets.Entry{Key: bytes.Clone(e.Key), Value: bytes.Clone(e.Value)})
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if err := p.Rows(len(rows)); err != nil {
		t.Fatal(err)
	}
	if err := p.Finish(false); err != nil {
		t.Fatal(err)
	}
	packed, rows := packRows(t, rows)
	return roots, rng, packed, rows, p.Take()
}

// TestVerifyShortScanAllocs: checking a short scan's rows inside one
// block (a proof with head and tail rows) allocates the verifier, its
// list of segments and its hash state only: head and tail rows are not
// decoded into new slices, and the leaves, the leaf sums and the root's
// input need no buffer of their own.
func TestVerifyShortScanAllocs(t *testing.T) {
	roots, rng, packed, rows, proofs := shortScan(t, 103, 141)
	if len(proofs) != 1 || len(proofs[0].GetHead()) == 0 || len(proofs[0].GetTail()) == 0 {
		t.Fatalf("want one proof with head and tail rows, got %v", proofs)
	}
	allocs := testing.AllocsPerRun(100, func() {
		v := newVerifier(roots, rng, nil, 0)
		got, err := v.batch(packed, rows, proofs)
		if err != nil || len(got) != len(rows) {
			t.Fatalf("%d rows of %d, %v", len(got), len(rows), err)
		}
		if err := v.finish(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 3 {
		t.Errorf("%.0f allocations per short scan, want at most 3 (the verifier, its segments, its hash state)", allocs)
	}
}

// TestVerifyShortScanProvenLeaves: a short scan whose leaves were
// proven before is checked against the kept leaves, without the proof's
// siblings; the same scan with a forged row in any chunk, or another
// scan's rows, still fails.
func TestVerifyShortScanProvenLeaves(t *testing.T) {
	roots, rng, packed, rows, proofs := shortScan(t, 103, 141)
	run := func(pc *ProvenLeaves, packed []byte, rows []tablets.Entry, proofs []*messages.BlockProof) error {
		v := newVerifier(roots, rng, nil, 0)
		v.leaves = pc
		got, err := v.batch(packed, rows, proofs)
		if err != nil {
			return err
		}
		if len(got) != len(rows) {
			return fmt.Errorf("%d rows of %d", len(got), len(rows))
		}
		return v.finish()
	}
	noSiblings := func() []*messages.BlockProof {
		p := proto.Clone(proofs[0]).(*messages.BlockProof)
		p.Siblings, p.SiblingsPacked = nil, nil
		return []*messages.BlockProof{p}
	}
	pc := NewProvenLeaves(1 << 12)
	if err := run(pc, packed, rows, noSiblings()); err == nil {
		t.Fatal("a proof without siblings passed with no leaf kept")
	}
	if err := run(pc, packed, rows, proofs); err != nil {
		t.Fatal(err)
	}
	if n := pc.Len(); n != 1 {
		t.Fatalf("leaves of %d blocks kept, want the proof's one", n)
	}
	if err := run(pc, packed, rows, noSiblings()); err != nil {
		t.Fatalf("kept leaves not used: %v", err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if err := run(pc, packed, rows, proofs); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 3 {
		t.Errorf("%.0f allocations per short scan with its leaves kept, want at most 3 (the verifier, its segments, its hash state)", allocs)
	}
	for i := range rows {
		p2 := bytes.Clone(packed)
		r2, err := tablets.UnpackRows(p2, len(rows))
		if err != nil {
			t.Fatal(err)
		}
		r2[i].Value[0] ^= 1
		if err := run(pc, p2, r2, proofs); err == nil {
			t.Fatalf("row %d forged: accepted", i)
		}
	}
	for _, lo := range []int{87, 104, 119} {
		_, _, p3, r3, _ := shortScan(t, lo, lo+38)
		if err := run(pc, p3, r3, proofs); err == nil {
			t.Fatalf("rows from %d under the proof of rows from 103: accepted", lo)
		}
	}
}

// TestRootsAllocs: a tablet's roots come in one slice of their size.
func TestRootsAllocs(t *testing.T) {
	tm := &messages.TabletMeta{Files: []*messages.FileRef{
		{Id: "f", Blocks: 3, BlockRoots: make([]byte, 3*tablets.DigestSize)},
		{Id: "g", Blocks: 4, BlockRoots: make([]byte, 4*tablets.DigestSize)}}}
	if n := testing.AllocsPerRun(100, func() {
		if r, err := Roots(tm); err != nil || len(r) != 7 {
			t.Fatalf("%d roots, %v", len(r), err)
		}
	}); n != 1 {
		t.Errorf("Roots of 7 blocks: %.0f allocations, want 1", n)
	}
}

// BenchmarkVerifyShortScan: the client's cost of checking a short scan
// (38 rows inside one block, a proof with head and tail rows), per scan.
func BenchmarkVerifyShortScan(b *testing.B) {
	roots, rng, packed, rows, proofs := shortScan(b, 103, 141)
	b.ReportAllocs()
	for b.Loop() {
		v := newVerifier(roots, rng, nil, 0)
		if _, err := v.batch(packed, rows, proofs); err != nil {
			b.Fatal(err)
		}
		if err := v.finish(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyShortScanProvenLeaves: BenchmarkVerifyShortScan with the
// scan's leaves proven before (ProvenLeaves): no inner hashes.
func BenchmarkVerifyShortScanProvenLeaves(b *testing.B) {
	roots, rng, packed, rows, proofs := shortScan(b, 103, 141)
	pc := NewProvenLeaves(1 << 12)
	b.ReportAllocs()
	for b.Loop() {
		v := newVerifier(roots, rng, nil, 0)
		v.leaves = pc
		if _, err := v.batch(packed, rows, proofs); err != nil {
			b.Fatal(err)
		}
		if err := v.finish(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestVerifierSiblingsEitherField: a proof's siblings are read from
// BlockProof.siblings_packed, which the Prover fills, or from the
// repeated siblings field; a proof with both, a repeated sibling not of
// tablets.DigestSize bytes (even when the bytes together are right) or a
// changed sibling byte is refused with tablets.ErrBadProof.
func TestVerifierSiblingsEitherField(t *testing.T) {
	roots, rng, packed, rows, proofs := shortScan(t, 103, 141)
	if len(proofs) != 1 || len(proofs[0].GetSiblingsPacked()) < 2*tablets.DigestSize || len(proofs[0].GetSiblings()) > 0 {
		t.Fatalf("want one proof with its siblings packed, got %v", proofs)
	}
	split := func(b []byte, at ...int) [][]byte {
		var out [][]byte
		for _, k := range at {
			out = append(out, bytes.Clone(b[:k]))
			b = b[k:]
		}
		return append(out, bytes.Clone(b))
	}
	d := tablets.DigestSize
	sib := proofs[0].GetSiblingsPacked()
	var each []int
	for k := d; k < len(sib); k += d {
		each = append(each, d)
	}
	for name, tc := range map[string]struct {
		change func(p *messages.BlockProof)
		ok     bool
	}{
		"packed":  {func(p *messages.BlockProof) {}, true},
		"each":    {func(p *messages.BlockProof) { p.Siblings, p.SiblingsPacked = split(p.SiblingsPacked, each...), nil }, true},
		"both":    {func(p *messages.BlockProof) { p.Siblings = split(p.SiblingsPacked, each...) }, false},
		"shifted": {func(p *messages.BlockProof) { p.Siblings, p.SiblingsPacked = split(p.SiblingsPacked, d-1), nil }, false},
		"packed, a byte flipped": {func(p *messages.BlockProof) {
			p.SiblingsPacked = bytes.Clone(p.SiblingsPacked)
			p.SiblingsPacked[d+3] ^= 1
		}, false},
		"each, a byte flipped": {func(p *messages.BlockProof) {
			p.Siblings, p.SiblingsPacked = split(p.SiblingsPacked, each...), nil
			p.Siblings[1][3] ^= 1
		}, false},
		"packed, a byte short": {func(p *messages.BlockProof) { p.SiblingsPacked = p.SiblingsPacked[:len(p.SiblingsPacked)-1] }, false},
	} {
		t.Run(name, func(t *testing.T) {
			p := proto.Clone(proofs[0]).(*messages.BlockProof)
			tc.change(p)
			v := newVerifier(roots, rng, nil, 0)
			got, err := v.batch(packed, rows, []*messages.BlockProof{p})
			if err == nil {
				err = v.finish()
			}
			if tc.ok && (err != nil || !equalEntries(got, rows)) {
				t.Fatalf("%d rows of %d, %v", len(got), len(rows), err)
			}
			if !tc.ok && !errors.Is(err, tablets.ErrBadProof) {
				t.Fatalf("released %d rows, err %v, want ErrBadProof", len(got), err)
			}
		})
	}
}

// TestBlockProofDecodeAllocs: a short scan's proof, as the Prover
// builds it, decodes in at most 4 allocations (the message, its head,
// tail and siblings), however many siblings it has.
func TestBlockProofDecodeAllocs(t *testing.T) {
	_, _, _, _, proofs := shortScan(t, 103, 141)
	b, err := proto.Marshal(&messages.RowBatch{Proofs: proofs})
	if err != nil {
		t.Fatal(err)
	}
	var rb messages.RowBatch
	allocs := testing.AllocsPerRun(100, func() {
		rb = messages.RowBatch{}
		if err := proto.Unmarshal(b, &rb); err != nil || len(rb.Proofs) != 1 {
			t.Fatalf("%v, %d proofs", err, len(rb.Proofs))
		}
	})
	// RowBatch's proofs slice and the BlockProof, head, tail, siblings.
	if allocs > 5 {
		t.Errorf("%.0f allocations to decode a batch with one proof of %d siblings, want at most 5", allocs,
			(len(proofs[0].GetSiblingsPacked())+32*len(proofs[0].GetSiblings()))/tablets.DigestSize)
	}
}
