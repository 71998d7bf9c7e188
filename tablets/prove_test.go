package tablets

import (
	"context"
	"fmt"
	"testing"

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

// TestProverWithoutRoots: files ingested without block roots get no
// proofs, and proving them never fails a scan.
func TestProverWithoutRoots(t *testing.T) {
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
	m := fetcherOf(f)
	ref := f.Ref()
	for _, name := range []string{"with roots", "without roots"} {
		if name == "without roots" {
			ref.BlockRoots = nil
		}
		p := NewProver(context.Background(), []*messages.FileRef{ref}, m, Range{Start: []byte("k010"), End: []byte("k020")}, nil)
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		if err := p.Rows(10); err != nil {
			t.Fatal(err)
		}
		if err := p.Finish(false); err != nil {
			t.Fatal(err)
		}
		if got := len(p.Take()); (got > 0) != (name == "with roots") {
			t.Errorf("%s: %d proofs", name, got)
		}
	}
}

// TestProverCut: from any position of a scan, Cut(n) is the largest
// k <= n such that the next k rows end at a block end, counted from the
// blocks' row counts in the file indexes.
func TestProverCut(t *testing.T) {
	m := mapFetcher{}
	var files []*messages.FileRef
	var ends []int // the stream's row count at each block end
	rows := 0
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
		m[IndexKey(f.ID)] = f.Index
		for i, b := range f.Blocks {
			m[BlockKey(f.ID, i)] = b
		}
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
	m := mapFetcher{}
	var files []*messages.FileRef
	var ends []int // the stream's row count at each block end
	rows := 0
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
		m[IndexKey(f.ID)] = f.Index
		for i, b := range f.Blocks {
			m[BlockKey(f.ID, i)] = b
		}
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
// memo, reads the block once through the fetcher, builds the siblings
// in two allocations (their bytes and the slice of them), and allocates
// the Prover, its reader and its per-file state for a one-file tablet
// at once.
func TestProverShortScanAllocs(t *testing.T) {
	scan := shortProof(t)
	scan() // fills the memo and the block's digests
	if got := testing.AllocsPerRun(100, scan); got > 10 {
		t.Errorf("%.0f allocations per short scan's proof, want at most 10", got)
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
