package bus

import (
	"context"
	"errors"
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
	store, err := conn.BlockStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := conn.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
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
