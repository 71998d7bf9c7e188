package tablets

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/messages"
)

type mapFetcher map[string][]byte

// fetcherOf is a mapFetcher of f's index and blocks, raw bytes: every
// fetch decodes a new Block.
func fetcherOf(f *EncodedFile) mapFetcher {
	m := mapFetcher{IndexKey(f.ID): f.Index}
	for i, b := range f.Blocks {
		m[BlockKey(f.ID, i)] = b
	}
	return m
}

func (m mapFetcher) FetchBlock(_ context.Context, key string) ([]byte, bool, error) {
	if d, ok := m[key]; ok {
		return d, false, nil
	}
	return nil, false, fmt.Errorf("%w: %s", ErrNotFound, key)
}

// fiftyRowFile is file "f" of the rows k000..k049, in blocks of 64 bytes.
func fiftyRowFile(t *testing.T) *EncodedFile {
	t.Helper()
	w := NewFileWriter("f", 64)
	for i := range 50 {
		if err := w.Add(fmt.Appendf(nil, "k%03d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	f, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestProverWithoutRoots: files ingested without block roots get no
// proofs, and proving them never fails a scan.
func TestProverWithoutRoots(t *testing.T) {
	f := fiftyRowFile(t)
	m := fetcherOf(f)
	ref := f.Ref()
	var withRoots []*messages.BlockProof
	for _, name := range []string{"with roots", "without roots", "roots left out"} {
		if name != "with roots" {
			ref.BlockRoots = nil
		}
		p := NewProver(context.Background(), []*messages.FileRef{ref}, m, Range{Start: []byte("k010"), End: []byte("k020")}, nil)
		if name == "roots left out" {
			p.RootsLeftOut()
		}
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		if err := p.Rows(10); err != nil {
			t.Fatal(err)
		}
		if err := p.Finish(false); err != nil {
			t.Fatal(err)
		}
		got := p.Take()
		if (len(got) > 0) != (name != "without roots") {
			t.Errorf("%s: %d proofs", name, len(got))
		}
		switch name {
		case "with roots":
			withRoots = got
		case "roots left out":
			// The roots only say that the rows can be proven.
			if len(got) != len(withRoots) {
				t.Fatalf("%s: %d proofs, %d with the roots", name, len(got), len(withRoots))
			}
			for i := range got {
				if !proto.Equal(got[i], withRoots[i]) {
					t.Errorf("%s: proof %d %v, with the roots %v", name, i, got[i], withRoots[i])
				}
			}
		}
	}
}

// TestDispatchFiles: a scan request carries a tablet's files without
// their block roots when every file has them, and says so; files
// without roots go as they are, and a tablet kept in manifests sends
// none. The tablet's own record is left as it was.
func TestDispatchFiles(t *testing.T) {
	f := fiftyRowFile(t)
	ref := f.Ref()
	if len(ref.GetBlockRoots()) == 0 {
		t.Fatal("the test file has no block roots")
	}
	meta := &messages.TabletMeta{Files: []*messages.FileRef{ref}}
	files, leftOut := DispatchFiles(meta)
	if !leftOut || len(files) != 1 || len(files[0].GetBlockRoots()) != 0 {
		t.Fatalf("with roots: %v, left out %v; want the file without its roots", files, leftOut)
	}
	want := proto.CloneOf(ref)
	want.BlockRoots = nil
	if !proto.Equal(files[0], want) {
		t.Fatalf("dispatched %v, want %v", files[0], want)
	}
	if len(meta.GetFiles()[0].GetBlockRoots()) != int(ref.GetBlocks())*DigestSize {
		t.Fatal("the record lost its roots")
	}
	if files, leftOut := DispatchFiles(&messages.TabletMeta{Files: []*messages.FileRef{ref, want}}); leftOut || len(files) != 2 || files[0] != ref {
		t.Fatalf("one file without roots: %v, left out %v; want the files as they are", files, leftOut)
	}
	if files, leftOut := DispatchFiles(&messages.TabletMeta{Manifests: []*messages.ManifestRef{{Files: 1}}}); leftOut || files != nil {
		t.Fatalf("manifests: %v, left out %v; want none", files, leftOut)
	}
}

// twoFileTablet is a tablet of two files of 90 rows each in blocks of
// 200 bytes: its fetcher, its files, the stream's row count at each
// block end, and its rows.
func twoFileTablet(t *testing.T) (m mapFetcher, files []*messages.FileRef, ends []int, rows int) {
	t.Helper()
	m = mapFetcher{}
	for fi := range 2 {
		w := NewFileWriter(fmt.Sprintf("f%d", fi), 200)
		for i := range 90 {
			if err := w.Add(fmt.Appendf(nil, "k%d%03d", fi, i), []byte("value")); err != nil {
				t.Fatal(err)
			}
		}
		f, err := w.Finish()
		if err != nil {
			t.Fatal(err)
		}
		maps.Copy(m, fetcherOf(f))
		ix, err := DecodeIndex(f.Index)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range ix.Blocks {
			rows += int(h.Entries)
			ends = append(ends, rows)
		}
		files = append(files, f.Ref())
	}
	if len(ends) < 6 {
		t.Fatalf("%d blocks: want several per file", len(ends))
	}
	return m, files, ends, rows
}

// TestProverCut: from any position of a scan, Cut(n) is the largest
// k <= n such that the next k rows end at a block end, counted from the
// blocks' row counts in the file indexes.
func TestProverCut(t *testing.T) {
	m, files, ends, rows := twoFileTablet(t)
	for pos := 0; pos < rows; pos += 7 {
		p := NewProver(context.Background(), files, m, Range{}, nil)
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		if err := p.Rows(pos); err != nil {
			t.Fatal(err)
		}
		for n := 0; n <= rows-pos; n += 5 {
			want := 0
			for _, e := range ends {
				if e > pos && e-pos <= n {
					want = e - pos
				}
			}
			if got, err := p.Cut(n); err != nil || got != want {
				t.Fatalf("at row %d, Cut(%d) = %d, %v; want %d", pos, n, got, err, want)
			}
		}
	}
}

// TestProverCutPast: from any position of a scan, CutPast(n) is the
// smallest k >= n such that the next k rows end at a block end, or the
// rows left when none does.
func TestProverCutPast(t *testing.T) {
	m, files, ends, rows := twoFileTablet(t)
	for pos := 0; pos < rows; pos += 7 {
		p := NewProver(context.Background(), files, m, Range{}, nil)
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		if err := p.Rows(pos); err != nil {
			t.Fatal(err)
		}
		for n := 0; n <= rows-pos+3; n += 5 {
			want := rows - pos
			if n == 0 {
				want = 0
			}
			for i := len(ends) - 1; i >= 0 && n > 0; i-- {
				if e := ends[i] - pos; e > 0 && e >= n {
					want = e
				}
			}
			if got, err := p.CutPast(n); err != nil || got != want {
				t.Fatalf("at row %d, CutPast(%d) = %d, %v; want %d", pos, n, got, err, want)
			}
		}
	}
}

// TestProverShortScanAllocs: proving a short scan inside one block (a
// proof with head and tail rows), its index and block in the scan's
// memo, takes at most 7 allocations: the Prover (its reader, its reads'
// iterator and its per-file state for a one-file tablet inside it), the
// keys of the index and the block, the proof, its siblings.
func TestProverShortScanAllocs(t *testing.T) {
	scan := shortProof(t)
	scan() // fills the memo and the block's digests
	if got := testing.AllocsPerRun(100, scan); got > 7 {
		t.Errorf("%.0f allocations per short scan's proof, want at most 7", got)
	}
}

// BenchmarkProveShortScan: the scan server's cost of proving a short
// scan (38 rows inside one block, its index and block in the scan's
// memo, its digests computed), per scan.
func BenchmarkProveShortScan(b *testing.B) {
	scan := shortProof(b)
	scan()
	b.ReportAllocs()
	for b.Loop() {
		scan()
	}
}

// shortProof returns a function that proves a scan of 38 rows inside a
// block of a file of 2000 rows, the scan's memo shared by its calls.
func shortProof(t testing.TB) func() {
	w := NewFileWriter("f", 4096)
	for i := range 2000 {
		if err := w.Add(fmt.Appendf(nil, "k%04d", i), []byte("value")); err != nil {
			t.Fatal(err)
		}
	}
	f, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	m := fetcherOf(f)
	files := []*messages.FileRef{f.Ref()}
	rng := Range{Start: []byte("k0103"), End: []byte("k0141")}
	memo := NewScanMemo(m)
	ctx := context.Background()
	scan := func() {
		p := NewProver(ctx, files, memo, rng, nil)
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		if err := p.Rows(38); err != nil {
			t.Fatal(err)
		}
		if err := p.Finish(false); err != nil {
			t.Fatal(err)
		}
		ps := p.Take()
		if len(ps) != 1 || len(ps[0].GetHead()) == 0 || len(ps[0].GetTail()) == 0 {
			t.Fatalf("want one proof with head and tail rows, got %v", ps)
		}
	}
	return scan
}

// TestScanAt: an iterator from ScanAt, after its Prover started, yields
// the rows and counts the fetches a Scan of the same range does, without
// fetching again the index and the block in which the prover found the
// first row.
func TestScanAt(t *testing.T) {
	ctx := context.Background()
	m, files, _, _ := twoFileTablet(t)
	key := func(f, i int) []byte { return fmt.Appendf(nil, "k%d%03d", f, i) }
	bounds := [][]byte{nil, []byte("a"), key(0, 0), key(0, 1), key(0, 17), append(key(0, 17), 0), key(0, 40), key(0, 89),
		append(key(0, 89), 0), key(1, 0), key(1, 33), key(1, 89), []byte("z")}
	afters := [][]byte{nil, key(0, 20), key(1, 5)}
	hinted := 0
	for _, s := range bounds {
		for _, e := range bounds {
			rng := Range{Start: s, End: e}
			if rng.Validate() != nil {
				continue
			}
			for _, after := range afters {
				cf := &countFetcher{objs: m, n: map[string]int{}, cached: true}
				p := NewProver(ctx, files, cf, rng, after)
				if err := p.Start(); err != nil {
					t.Fatal(err)
				}
				before := maps.Clone(cf.n)
				it := NewTabletReader(files, cf).ScanAt(ctx, rng, after, p)
				got := drainEntries(t, it)
				plain := NewTabletReader(files, m).Scan(ctx, rng, after)
				want := drainEntries(t, plain)
				name := fmt.Sprintf("%s after %q", rng, after)
				if !slices.EqualFunc(got, want, func(a, b Entry) bool {
					return bytes.Equal(a.Key, b.Key) && bytes.Equal(a.Value, b.Value)
				}) {
					t.Fatalf("%s: %d rows, want %d", name, len(got), len(want))
				}
				st, wst := it.Stats(), plain.Stats()
				if st.BlocksRead != wst.BlocksRead || st.IndexReads != wst.IndexReads || st.CacheHits != st.BlocksRead || st.IndexHits != st.IndexReads {
					t.Fatalf("%s: stats %+v, want the reads of %+v, all hits", name, st, wst)
				}
				if at := p.at; at.blk != nil {
					hinted++
					id := files[at.file].GetId()
					for _, k := range []string{IndexKey(id), BlockKey(id, at.block)} {
						if cf.n[k] != before[k] {
							t.Fatalf("%s: %s fetched again", name, k)
						}
					}
				}
			}
		}
	}
	if hinted == 0 {
		t.Fatal("no scan started from its prover's position")
	}
}

// drainEntries is every row of it, copied.
func drainEntries(t *testing.T, it *Iterator) []Entry {
	t.Helper()
	var out []Entry
	for it.Next() {
		e := it.Entry()
		out = append(out, Entry{Key: bytes.Clone(e.Key), Value: bytes.Clone(e.Value)})
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
