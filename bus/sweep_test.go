package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/scanplane/scanplane/tablets"
)

// failingStore is a BlockStore that refuses every write after the first
// okPuts and every delete: a store that ran out of space in the middle
// of an ingest, so the ingest cannot remove what it wrote.
type failingStore struct {
	*BlockStore
	okPuts int64
	puts   atomic.Int64
}

var errFull = errors.New("test: store full")

func (s *failingStore) Put(ctx context.Context, key string, data []byte) error {
	if s.puts.Add(1) > s.okPuts {
		return errFull
	}
	return s.BlockStore.Put(ctx, key, data)
}

func (s *failingStore) PutAsync(ctx context.Context, key string, data []byte) (func() error, error) {
	if s.puts.Add(1) > s.okPuts {
		return func() error { return errFull }, nil
	}
	return s.BlockStore.PutAsync(ctx, key, data)
}

func (s *failingStore) Delete(context.Context, string) error { return errFull }

// TestIngestSweepsOrphans: the objects an ingest wrote but could not
// remove when it failed are deleted by the next ingest of the table that
// succeeds; every object left is named by a stored generation.
func TestIngestSweepsOrphans(t *testing.T) {
	ctx := testCtx(t)
	conn := connect(t, startServer(t))
	store, meta := blockStore(t, conn), metaStore(t, conn)
	rows := tablets.GenerateRows(20000)
	cfg := tablets.DefaultIngestConfig()
	cfg.Tablets = 4
	if _, err := tablets.Ingest(ctx, store, meta, "t", rows, cfg); err != nil {
		t.Fatal(err)
	}
	_, ierr := tablets.Ingest(ctx, &failingStore{BlockStore: store, okPuts: 20}, meta, "t", rows, cfg)
	if !errors.Is(ierr, errFull) {
		t.Fatalf("ingest on a failing store: %v", ierr)
	}
	left, err := store.TableKeys(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	named := func() map[string]bool {
		gens, err := meta.Generations(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for _, g := range gens {
			tm, err := meta.Get(ctx, "t", g)
			if err != nil {
				t.Fatal(err)
			}
			for _, tab := range tm.GetTablets() {
				for _, f := range tab.GetFiles() {
					m[tablets.IndexKey(f.GetId())] = true
					for b := range int(f.GetBlocks()) {
						m[tablets.BlockKey(f.GetId(), b)] = true
					}
				}
			}
		}
		return m
	}
	orphans := func(keys []string) (n int) {
		m := named()
		for _, k := range keys {
			if !m[k] {
				n++
			}
		}
		return n
	}
	before := orphans(left)
	if before == 0 {
		t.Fatalf("the failed ingest left no objects (%v)", ierr)
	}
	t.Logf("failed ingest: %v; %d orphan objects", ierr, before)
	if _, err := tablets.Ingest(ctx, store, meta, "t", rows[:10000], cfg); err != nil {
		t.Fatal(err)
	}
	after, err := store.TableKeys(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if n := orphans(after); n != 0 {
		t.Fatalf("%d of %d objects no generation names after the next ingest", n, len(after))
	}
	m := named()
	for k := range m {
		if !slices.Contains(after, k) {
			t.Fatalf("object %s of a stored generation is gone", k)
		}
	}
}

// laggingMeta lists a table's generations as a replica one write behind
// does: without the newest.
type laggingMeta struct{ *MetaStore }

func (m laggingMeta) Generations(ctx context.Context, table string) ([]uint64, error) {
	gens, err := m.MetaStore.Generations(ctx, table)
	if len(gens) > 0 {
		gens = gens[:len(gens)-1]
	}
	return gens, err
}

// TestSweepKeepsWhatAStaleListingMisses: an ingest whose generation
// listing does not show the generation it just published yet (a lagging
// replica's answer) deletes none of that generation's objects, whether
// its record lists the files or names manifests; the generation reads
// back whole.
func TestSweepKeepsWhatAStaleListingMisses(t *testing.T) {
	ctx := testCtx(t)
	conn := connect(t, startServer(t))
	store, meta := blockStore(t, conn), metaStore(t, conn)
	rows := tablets.GenerateRows(20000)
	for _, inline := range []int64{1 << 20, 1} {
		table := fmt.Sprintf("inline%d", inline)
		cfg := tablets.DefaultIngestConfig()
		cfg.Tablets, cfg.InlineFileBytes = 4, inline
		for gen := 1; gen <= 2; gen++ {
			if _, err := tablets.Ingest(ctx, store, laggingMeta{meta}, table, rows, cfg); err != nil {
				t.Fatalf("%s generation %d: %v", table, gen, err)
			}
			tm, err := meta.Get(ctx, table, uint64(gen))
			if err != nil {
				t.Fatal(err)
			}
			if manifests := len(tablets.RecordManifests(tm)); (manifests > 0) != (inline == 1) {
				t.Fatalf("%s: %d manifests", table, manifests)
			}
			var got []tablets.Entry
			for _, tab := range tm.GetTablets() {
				it := tablets.NewTabletReader(tab.GetFiles(), tablets.StoreFetcher{Store: store}).Scan(ctx, tablets.Range{}, nil)
				for it.Next() {
					got = append(got, tablets.Entry{Key: slices.Clone(it.Entry().Key), Value: slices.Clone(it.Entry().Value)})
				}
				if err := it.Err(); err != nil {
					t.Fatalf("%s generation %d: %v", table, gen, err)
				}
			}
			if len(got) != len(rows) {
				t.Fatalf("%s generation %d: read %d rows, want %d", table, gen, len(got), len(rows))
			}
		}
	}
}
