package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// writeFile stores a tablet file of rows in s.
func writeFile(tb testing.TB, s tablets.BlockStore, id string, rows []tablets.Entry) *messages.FileRef {
	tb.Helper()
	w := tablets.NewFileWriter(id, 0)
	for _, e := range rows {
		if err := w.Add(e.Key, e.Value); err != nil {
			tb.Fatal(err)
		}
	}
	f, err := w.Finish()
	if err != nil {
		tb.Fatal(err)
	}
	if err := tablets.StoreFile(context.Background(), s, f); err != nil {
		tb.Fatal(err)
	}
	return f.Ref()
}

// scanAll scans the file in full and compares with rows.
func scanAll(tb testing.TB, f tablets.BlockFetcher, ref *messages.FileRef, rows []tablets.Entry) error {
	tb.Helper()
	it := tablets.NewTabletReader([]*messages.FileRef{ref}, f).Scan(context.Background(), tablets.Range{}, nil)
	i := 0
	for it.Next() {
		e := it.Entry()
		if i >= len(rows) || !bytes.Equal(e.Key, rows[i].Key) || !bytes.Equal(e.Value, rows[i].Value) {
			tb.Fatalf("row %d: %q, want %q", i, e.Key, rows[min(i, len(rows)-1)].Key)
		}
		i++
	}
	if it.Err() == nil && i != len(rows) {
		tb.Fatalf("%d rows, want %d", i, len(rows))
	}
	return it.Err()
}

// TestFetchDecodedOnce: a decoded value is decoded once and then served
// from the cache; the raw bytes stay readable through Get and FetchBlock.
func TestFetchDecodedOnce(t *testing.T) {
	ctx := context.Background()
	data := block(1000, 3)
	store := &countingStore{BlockStore: storeWith(t, "k", data)}
	c := newCache(t, DefaultConfig())
	f := c.Fetcher(store)
	decodes := 0
	decode := func(b []byte) (any, int64, error) {
		decodes++
		return len(b), int64(len(b)) + 100, nil
	}
	for i := 0; i < 3; i++ {
		v, cached, err := f.FetchDecoded(ctx, "k", decode)
		if err != nil || v.(int) != len(data) || cached != (i > 0) {
			t.Fatalf("fetch %d: %v, cached %v, %v", i, v, cached, err)
		}
	}
	if decodes != 1 || store.gets.Load() != 1 {
		t.Fatalf("%d decodes, %d store reads; want 1 and 1", decodes, store.gets.Load())
	}
	if got, ok := c.Get("k"); !ok || !bytes.Equal(got, data) {
		t.Fatalf("Get of a decoded entry: %v", ok)
	}
	if st := c.Stats(); st.Bytes != int64(len(data))+100 {
		t.Fatalf("cached bytes %d, want the decoded cost %d", st.Bytes, len(data)+100)
	}
}

// TestFetchDecodedRefusedNeverCached: a value decode refuses is an error
// wrapping decode's, is not cached, and the next fetch reads the store
// again; raw bytes cached by FetchBlock that decode refuses are dropped.
func TestFetchDecodedRefusedNeverCached(t *testing.T) {
	ctx := context.Background()
	store := &countingStore{BlockStore: storeWith(t, "k", block(100, 4))}
	c := newCache(t, DefaultConfig())
	f := c.Fetcher(store)
	errBad := errors.New("bad bytes")
	refuse := func([]byte) (any, int64, error) { return nil, 0, errBad }
	for i := 0; i < 2; i++ {
		if _, _, err := f.FetchDecoded(ctx, "k", refuse); !errors.Is(err, errBad) {
			t.Fatalf("fetch %d: %v", i, err)
		}
		c.Wait()
		if _, ok := c.Get("k"); ok {
			t.Fatalf("fetch %d: a refused value was cached", i)
		}
	}
	if n := store.gets.Load(); n != 2 {
		t.Fatalf("%d store reads, want 2 (nothing cached)", n)
	}
	// Raw bytes cached by FetchBlock, then refused by decode: dropped.
	if _, _, err := f.FetchBlock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get("k"); !ok {
		t.Fatal("FetchBlock did not cache the block")
	}
	if _, _, err := f.FetchDecoded(ctx, "k", refuse); !errors.Is(err, errBad) {
		t.Fatalf("decode of cached raw bytes: %v", err)
	}
	c.Wait()
	if _, ok := c.Get("k"); ok {
		t.Fatal("raw bytes decode refused stayed cached")
	}
	// Raw bytes accepted by decode are replaced by the value.
	if _, _, err := f.FetchBlock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	ok := func([]byte) (any, int64, error) { return "v", 1000, nil }
	if v, cached, err := f.FetchDecoded(ctx, "k", ok); err != nil || v != "v" || !cached {
		t.Fatalf("decode of cached raw bytes: %v %v %v", v, cached, err)
	}
	c.Wait()
	if v, cached, err := f.FetchDecoded(ctx, "k", refuse); err != nil || v != "v" || !cached {
		t.Fatalf("the value did not replace the raw bytes: %v %v %v", v, cached, err)
	}
}

// corruptStore serves a copy of one object with one byte flipped.
type corruptStore struct {
	tablets.BlockStore
	key string
	off int
}

func (s *corruptStore) Get(ctx context.Context, key string) ([]byte, error) {
	d, err := s.BlockStore.Get(ctx, key)
	if err != nil || key != s.key {
		return d, err
	}
	d = bytes.Clone(d)
	d[s.off%len(d)] ^= 0x40
	return d, nil
}

// TestCorruptBlockNeverCached: through the host cache, a scan of a file
// one of whose blocks is corrupt fails with ErrCorrupt on every scan (the
// block never enters the cache, so no later scan is served from it), for
// a flip anywhere in the block; once the store serves the good block the
// scan returns every row. The same holds for the index.
func TestCorruptBlockNeverCached(t *testing.T) {
	rows := tablets.GenerateRows(5000)
	ds := dirStore(t)
	ref := writeFile(t, ds, "corrupt.g1.t0", rows)
	if ref.Blocks < 3 {
		t.Fatalf("%d blocks", ref.Blocks)
	}
	for _, key := range []string{tablets.BlockKey(ref.Id, 1), tablets.IndexKey(ref.Id)} {
		for _, off := range []int{0, 1, 17, 4000, 30001, -1, -5} {
			t.Run(fmt.Sprintf("%s@%d", key, off), func(t *testing.T) {
				c := newCache(t, DefaultConfig())
				raw, err := ds.Get(context.Background(), key)
				if err != nil {
					t.Fatal(err)
				}
				cs := &corruptStore{BlockStore: ds, key: key, off: (off + len(raw)) % len(raw)}
				for i := 0; i < 2; i++ {
					if err := scanAll(t, c.Fetcher(cs), ref, rows); !errors.Is(err, tablets.ErrCorrupt) {
						t.Fatalf("scan %d of a corrupt %s: %v", i, key, err)
					}
					c.Wait()
					if _, ok := c.Get(key); ok {
						t.Fatalf("scan %d: the corrupt %s entered the cache", i, key)
					}
				}
				if err := scanAll(t, c.Fetcher(ds), ref, rows); err != nil {
					t.Fatalf("scan after the store is good: %v", err)
				}
			})
		}
	}
}

// BenchmarkSeekOneRowHostCache times a one-row scan of one file of
// 100 000 rows whose index and blocks are in the host cache (warmed by one
// full scan): the reader's part of a one-row scan on a scan server.
func BenchmarkSeekOneRowHostCache(b *testing.B) {
	ctx := context.Background()
	rows := tablets.GenerateRows(100000)
	ds := dirStore(b)
	ref := writeFile(b, ds, "seek.g1.t0", rows)
	f := newCache(b, DefaultConfig()).Fetcher(ds)
	if err := scanAll(b, f, ref, rows); err != nil {
		b.Fatal(err)
	}
	reader := tablets.NewTabletReader([]*messages.FileRef{ref}, f)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := (i * 7919) % len(rows)
		key := rows[k].Key
		it := reader.Scan(ctx, tablets.Range{Start: key, End: append(key[:len(key):len(key)], 0)}, nil)
		if !it.Next() || !bytes.Equal(it.Entry().Key, key) || !bytes.Equal(it.Entry().Value, rows[k].Value) {
			b.Fatalf("row %d: %q, %v", k, it.Entry().Key, it.Err())
		}
		if it.Next() || it.Err() != nil {
			b.Fatalf("row %d: a second row or %v", k, it.Err())
		}
		if st := it.Stats(); st.CacheHits != st.BlocksRead || st.IndexHits != st.IndexReads {
			b.Fatalf("row %d: not all from the cache: %+v", k, st)
		}
	}
}
