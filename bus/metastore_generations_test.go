package bus

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/scanplane/scanplane/messages"
)

// TestMetaStoreGenerations: Generations lists a table's stored
// generations (not another table's with a longer name); SetCurrent moves
// the pointer to a stored generation, backwards too, by compare-and-set;
// DeleteTable removes the pointer (watchers see 0, Tables drops the
// table) and keeps the generations until DeleteGeneration.
func TestMetaStoreGenerations(t *testing.T) {
	srv := startServer(t)
	ctx := testCtx(t)
	ms := metaStore(t, connect(t, srv))
	for g := uint64(1); g <= 3; g++ {
		if err := ms.Publish(ctx, &messages.TableMeta{Name: "t", Generation: g, Rows: g}, g-1); err != nil {
			t.Fatal(err)
		}
	}
	if err := ms.Publish(ctx, &messages.TableMeta{Name: "t2", Generation: 1}, 0); err != nil {
		t.Fatal(err)
	}
	gens := func(table string) []uint64 {
		t.Helper()
		g, err := ms.Generations(ctx, table)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	if g := gens("t"); !slices.Equal(g, []uint64{1, 2, 3}) {
		t.Fatalf("Generations(t) = %v, want [1 2 3]", g)
	}
	if g := gens("none"); len(g) != 0 {
		t.Fatalf("Generations(none) = %v", g)
	}

	var mu sync.Mutex
	var seen []uint64
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	if err := metaStore(t, connect(t, srv)).Watch(wctx, func(table string, gen uint64) {
		if table == "t" {
			mu.Lock()
			seen = append(seen, gen)
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	last := func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 {
			return 99
		}
		return seen[len(seen)-1]
	}

	if err := ms.SetCurrent(ctx, "t", 9, 3); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetCurrent to a missing generation: %v, want ErrNotFound", err)
	}
	if err := ms.SetCurrent(ctx, "t", 1, 2); !errors.Is(err, ErrConflict) {
		t.Errorf("SetCurrent with a stale prev: %v, want ErrConflict", err)
	}
	if err := ms.SetCurrent(ctx, "t", 2, 3); err != nil {
		t.Fatal(err)
	}
	if cur, err := ms.Current(ctx, "t"); err != nil || cur != 2 {
		t.Fatalf("Current after SetCurrent(2) = %d, %v", cur, err)
	}
	if err := ms.SetCurrent(ctx, "t", 2, 2); err != nil {
		t.Errorf("SetCurrent to the current generation: %v", err)
	}
	eventually(t, "the watch to see generation 2", func() bool { return last() == 2 })

	if err := ms.DeleteTable(ctx, "t", 3); !errors.Is(err, ErrConflict) {
		t.Errorf("DeleteTable with a stale prev: %v, want ErrConflict", err)
	}
	if err := ms.DeleteTable(ctx, "t", 2); err != nil {
		t.Fatal(err)
	}
	if cur, err := ms.Current(ctx, "t"); err != nil || cur != 0 {
		t.Fatalf("Current after DeleteTable = %d, %v", cur, err)
	}
	eventually(t, "the watch to see the table removed", func() bool { return last() == 0 })
	if tables, err := ms.Tables(ctx); err != nil || !slices.Equal(tables, []string{"t2"}) {
		t.Fatalf("Tables after DeleteTable = %v, %v; want [t2]", tables, err)
	}
	if err := ms.DeleteTable(ctx, "t", 2); err != nil {
		t.Errorf("DeleteTable again: %v", err)
	}
	if g := gens("t"); !slices.Equal(g, []uint64{1, 2, 3}) {
		t.Fatalf("Generations after DeleteTable = %v, want [1 2 3]", g)
	}
	for _, g := range []uint64{1, 2, 3} {
		if err := ms.DeleteGeneration(ctx, "t", g); err != nil {
			t.Fatal(err)
		}
	}
	if g := gens("t"); len(g) != 0 {
		t.Fatalf("Generations after deleting them = %v", g)
	}
}
