package tablets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/scanplane/scanplane/messages"
)

// memStore is an in-memory BlockStore for tests.
type memStore struct {
	mu   sync.Mutex
	objs map[string][]byte
	gets int
}

func newMemStore() *memStore { return &memStore{objs: map[string][]byte{}} }

func (m *memStore) Put(_ context.Context, key string, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[key] = data
	return nil
}

func (m *memStore) Get(_ context.Context, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gets++
	d, ok := m.objs[key]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return d, nil
}

func (m *memStore) Delete(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objs, key)
	return nil
}

// hitFetcher reports every second fetch of the same key as a cache hit.
type hitFetcher struct {
	s    BlockStore
	seen map[string]bool
}

func (h *hitFetcher) FetchBlock(ctx context.Context, key string) ([]byte, bool, error) {
	d, err := h.s.Get(ctx, key)
	hit := h.seen[key]
	h.seen[key] = true
	return d, hit, err
}

func writeFile(t testing.TB, s BlockStore, id string, blockSize int, entries []Entry) *messages.FileRef {
	t.Helper()
	f := encodeEntries(t, id, blockSize, entries)
	if err := StoreFile(context.Background(), s, f); err != nil {
		t.Fatal(err)
	}
	return f.Ref()
}

func collect(t testing.TB, it *Iterator) []Entry {
	t.Helper()
	var out []Entry
	for it.Next() {
		e := it.Entry()
		out = append(out, Entry{Key: bytes.Clone(e.Key), Value: bytes.Clone(e.Value)})
	}
	if err := it.Err(); err != nil {
		t.Fatalf("scan: %v", err)
	}
	return out
}

// TestTabletReaderMerge merges three files with overlapping keys and
// compares random range / after scans with a sorted-map reference.
func TestTabletReaderMerge(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 8))
	store := newMemStore()
	truth := map[string]string{}
	var refs []*messages.FileRef
	for fi := range 3 {
		set := map[int]bool{}
		for range 2000 + fi*500 {
			set[rnd.IntN(6000)] = true
		}
		var entries []Entry
		for n := range set {
			key := fmt.Sprintf("k%05d", n)
			if n%7 == 0 {
				key += "\x00\xff" // binary keys too
			}
			val := fmt.Sprintf("file%d-%d", fi, n)
			entries = append(entries, Entry{Key: []byte(key), Value: []byte(val)})
			truth[key] = val // later files win
		}
		sort.Slice(entries, func(i, j int) bool { return bytes.Compare(entries[i].Key, entries[j].Key) < 0 })
		refs = append(refs, writeFile(t, store, fmt.Sprintf("merge.f%d", fi), 300+fi*200, entries))
	}
	keys := make([]string, 0, len(truth))
	for key := range truth {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	reader := NewTabletReader(refs, StoreFetcher{Store: store})
	randKey := func() []byte {
		switch rnd.IntN(4) {
		case 0:
			return nil
		case 1:
			return []byte(keys[rnd.IntN(len(keys))]) // an existing key
		default:
			return []byte(fmt.Sprintf("k%05d", rnd.IntN(6100)))
		}
	}
	for iter := range 200 {
		rng := Range{Start: randKey(), End: randKey()}
		if rng.Validate() != nil {
			rng.Start, rng.End = rng.End, rng.Start
		}
		var after []byte
		if iter%2 == 0 {
			after = randKey()
		}
		var want []Entry
		for _, key := range keys {
			if rng.Contains([]byte(key)) && (after == nil || key > string(after)) {
				want = append(want, Entry{Key: []byte(key), Value: []byte(truth[key])})
			}
		}
		it := reader.Scan(context.Background(), rng, after)
		got := collect(t, it)
		if len(got) != len(want) {
			t.Fatalf("scan %v after %q: %d rows, want %d", rng, after, len(got), len(want))
		}
		sameEntries(t, got, want)
	}
	// The full scan reads every block and every index exactly once.
	it := reader.Scan(context.Background(), Range{}, nil)
	if got := collect(t, it); len(got) != len(keys) {
		t.Fatalf("full scan: %d rows, want %d", len(got), len(keys))
	}
	var blocks uint64
	for _, r := range refs {
		blocks += uint64(r.Blocks)
	}
	if st := it.Stats(); st.BlocksRead != blocks || st.IndexReads != 3 || st.CacheHits != 0 {
		t.Errorf("stats = %+v, want %d blocks, 3 indexes", st, blocks)
	}
}

func TestTabletReaderLazyAndStats(t *testing.T) {
	store := newMemStore()
	rows := GenerateRows(10000)
	ref := writeFile(t, store, "lazy", 1024, rows)
	if ref.Blocks < 100 {
		t.Fatalf("only %d blocks", ref.Blocks)
	}
	f := &hitFetcher{s: store, seen: map[string]bool{}}
	reader := NewTabletReader([]*messages.FileRef{ref}, f)
	// A range within one block fetches one block.
	rng := Range{Start: RowKey(5000), End: RowKey(5003)}
	for pass := range 2 {
		it := reader.Scan(context.Background(), rng, nil)
		got := collect(t, it)
		sameEntries(t, got, rows[5000:5003])
		st := it.Stats()
		if st.BlocksRead != 1 || st.IndexReads != 1 || st.CacheHits != uint64(pass) || st.IndexHits != uint64(pass) {
			t.Errorf("pass %d: stats %+v", pass, st)
		}
	}
	// Nothing is fetched before Next, and an empty range fetches nothing.
	before := store.gets
	it := reader.Scan(context.Background(), Range{Start: []byte("b"), End: []byte("b")}, nil)
	if it.Next() || it.Err() != nil || store.gets != before {
		t.Errorf("empty range: next/err/gets = %v/%v/%d", false, it.Err(), store.gets-before)
	}
	// Stopping early reads only the blocks needed so far.
	it = reader.Scan(context.Background(), Range{}, nil)
	for i := 0; i < 10 && it.Next(); i++ {
	}
	if st := it.Stats(); st.BlocksRead != 1 {
		t.Errorf("10 rows read %d blocks", st.BlocksRead)
	}
	// Scanning after the last key yields nothing.
	it = reader.Scan(context.Background(), Range{}, RowKey(9999))
	if it.Next() || it.Err() != nil {
		t.Errorf("after last key: %v", it.Err())
	}
	// An inverted range is an error.
	it = reader.Scan(context.Background(), Range{Start: []byte("b"), End: []byte("a")}, nil)
	if it.Next() || !errors.Is(it.Err(), ErrBadRange) {
		t.Errorf("inverted range: %v", it.Err())
	}
	// No files: no rows.
	it = NewTabletReader(nil, f).Scan(context.Background(), Range{}, nil)
	if it.Next() || it.Err() != nil {
		t.Errorf("no files: %v", it.Err())
	}
}

func TestTabletReaderCorruptAndMissing(t *testing.T) {
	ctx := context.Background()
	store := newMemStore()
	rows := GenerateRows(2000)
	ref := writeFile(t, store, "bad", 1024, rows)
	reader := NewTabletReader([]*messages.FileRef{ref}, StoreFetcher{Store: store})

	// Corrupt block 3: rows before it come out, then ErrCorrupt naming it.
	key := BlockKey("bad", 3)
	orig, _ := store.Get(ctx, key)
	bad := bytes.Clone(orig)
	bad[len(bad)/2] ^= 0x20
	_ = store.Put(ctx, key, bad)
	it := reader.Scan(ctx, Range{}, nil)
	n := 0
	for it.Next() {
		if !bytes.Equal(it.Entry().Key, rows[n].Key) || !bytes.Equal(it.Entry().Value, rows[n].Value) {
			t.Fatalf("row %d wrong", n)
		}
		n++
	}
	if !errors.Is(it.Err(), ErrCorrupt) || !strings.Contains(it.Err().Error(), key) {
		t.Fatalf("err = %v, want ErrCorrupt naming %s", it.Err(), key)
	}
	if it.Next() {
		t.Fatal("Next after an error")
	}
	// Missing block.
	_ = store.Delete(ctx, key)
	it = reader.Scan(ctx, Range{}, nil)
	for it.Next() {
	}
	if !errors.Is(it.Err(), ErrNotFound) || !strings.Contains(it.Err().Error(), key) {
		t.Fatalf("err = %v, want ErrNotFound naming %s", it.Err(), key)
	}
	_ = store.Put(ctx, key, orig)

	// Corrupt index.
	ik := IndexKey("bad")
	idx, _ := store.Get(ctx, ik)
	_ = store.Put(ctx, ik, idx[:len(idx)-1])
	it = reader.Scan(ctx, Range{}, nil)
	if it.Next() || !errors.Is(it.Err(), ErrCorrupt) || !strings.Contains(it.Err().Error(), ik) {
		t.Fatalf("err = %v, want ErrCorrupt naming %s", it.Err(), ik)
	}
	// An index of another file under this name.
	other := encodeEntries(t, "other", 1024, rows)
	_ = store.Put(ctx, ik, other.Index)
	it = reader.Scan(ctx, Range{}, nil)
	if it.Next() || !errors.Is(it.Err(), ErrCorrupt) {
		t.Fatalf("foreign index: err = %v, want ErrCorrupt", it.Err())
	}
	// An index that disagrees with the metadata.
	_ = store.Put(ctx, ik, idx)
	ref2 := &messages.FileRef{Id: ref.Id, Blocks: ref.Blocks + 1, Entries: ref.Entries}
	it = NewTabletReader([]*messages.FileRef{ref2}, StoreFetcher{Store: store}).Scan(ctx, Range{}, nil)
	if it.Next() || !errors.Is(it.Err(), ErrCorrupt) {
		t.Fatalf("metadata mismatch: err = %v, want ErrCorrupt", it.Err())
	}
}

func TestTabletReaderCancel(t *testing.T) {
	store := newMemStore()
	rows := GenerateRows(20000)
	ref := writeFile(t, store, "cancel", 2048, rows)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	it := NewTabletReader([]*messages.FileRef{ref}, StoreFetcher{Store: store}).Scan(ctx, Range{}, nil)
	n := 0
	for it.Next() {
		n++
		if n == 100 {
			cancel()
		}
	}
	if !errors.Is(it.Err(), context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", it.Err())
	}
	if n >= 100+ctxCheckEvery+40 || n < 100 {
		t.Fatalf("read %d rows after cancelling at 100", n)
	}
	// Cancelled before the start: nothing is fetched.
	before := store.gets
	it = NewTabletReader([]*messages.FileRef{ref}, StoreFetcher{Store: store}).Scan(ctx, Range{}, nil)
	if it.Next() || !errors.Is(it.Err(), context.Canceled) || store.gets != before {
		t.Fatalf("pre-cancelled: %v, %d gets", it.Err(), store.gets-before)
	}
}

func BenchmarkTabletScan100k(b *testing.B) {
	ctx := context.Background()
	store, err := NewDirStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	rows := GenerateRows(100000)
	ref := writeFile(b, store, "bench.g1.t0", DefaultBlockSize, rows)
	reader := NewTabletReader([]*messages.FileRef{ref}, StoreFetcher{Store: store})
	b.SetBytes(int64(ref.Bytes))
	b.ReportAllocs()
	for b.Loop() {
		it := reader.Scan(ctx, Range{}, nil)
		n := 0
		for it.Next() {
			n++
		}
		if it.Err() != nil || n != len(rows) {
			b.Fatalf("scanned %d rows: %v", n, it.Err())
		}
	}
	b.ReportMetric(float64(len(rows))*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

func BenchmarkTabletScanMerge3x100k(b *testing.B) {
	ctx := context.Background()
	store := newMemStore()
	var refs []*messages.FileRef
	for f := range 3 {
		rows := GenerateRows(100000)
		refs = append(refs, writeFile(b, store, fmt.Sprintf("merge%d", f), DefaultBlockSize, rows))
	}
	reader := NewTabletReader(refs, StoreFetcher{Store: store})
	b.ReportAllocs()
	for b.Loop() {
		it := reader.Scan(ctx, Range{}, nil)
		n := 0
		for it.Next() {
			n++
		}
		if it.Err() != nil || n != 100000 {
			b.Fatalf("scanned %d rows: %v", n, it.Err())
		}
	}
	b.ReportMetric(float64(100000)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}
