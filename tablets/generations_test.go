package tablets

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// genDirMeta is a GenerationStore over DirMetaStore for these tests: it
// lists the g<N>.pb files and writes or removes CURRENT itself (not
// atomically: the tests run one operation at a time).
type genDirMeta struct{ *DirMetaStore }

func (m genDirMeta) Generations(_ context.Context, table string) ([]uint64, error) {
	ents, err := os.ReadDir(filepath.Join(m.Dir, table))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var gens []uint64
	for _, e := range ents {
		if d, ok := strings.CutPrefix(strings.TrimSuffix(e.Name(), ".pb"), "g"); ok && strings.HasSuffix(e.Name(), ".pb") {
			if g, err := strconv.ParseUint(d, 10, 64); err == nil {
				gens = append(gens, g)
			}
		}
	}
	slices.Sort(gens)
	return gens, nil
}

func (m genDirMeta) SetCurrent(ctx context.Context, table string, gen, prev uint64) error {
	if cur, err := m.Current(ctx, table); err != nil || cur != prev {
		return errors.Join(ErrConflict, err)
	}
	return os.WriteFile(filepath.Join(m.Dir, table, currentFile), []byte(strconv.FormatUint(gen, 10)), 0o644)
}

func (m genDirMeta) DeleteTable(ctx context.Context, table string, prev uint64) error {
	if cur, err := m.Current(ctx, table); err != nil || cur != prev {
		return errors.Join(ErrConflict, err)
	}
	return os.Remove(filepath.Join(m.Dir, table, currentFile))
}

func TestUnkept(t *testing.T) {
	for _, tc := range []struct {
		stored    []uint64
		gen, prev uint64
		keep      int
		want      []uint64
	}{
		{nil, 1, 0, 2, nil},
		{[]uint64{1}, 2, 1, 2, nil},
		{[]uint64{1, 2}, 3, 2, 2, []uint64{1}},
		{[]uint64{1, 2}, 3, 2, 1, []uint64{2, 1}},
		{[]uint64{1, 2, 3}, 4, 3, 3, []uint64{1}},
		// After a rollback from 5 to 4: 5 goes, 4 (replaced) stays.
		{[]uint64{4, 5}, 6, 4, 2, []uint64{5}},
		{[]uint64{1, 2, 3}, 4, 1, 3, []uint64{3, 2}},
		// A newer generation is another writer's, under way: kept.
		{[]uint64{3, 4, 7}, 5, 4, 2, []uint64{3}},
	} {
		if got := unkept(tc.stored, tc.gen, tc.prev, tc.keep); !slices.Equal(got, tc.want) {
			t.Errorf("unkept(%v, gen %d, prev %d, keep %d) = %v, want %v", tc.stored, tc.gen, tc.prev, tc.keep, got, tc.want)
		}
	}
}

// TestRollbackThenIngest: Rollback makes the previous generation current
// again (its rows readable); the next ingest numbers past the generation
// rolled back from and deletes it, keeping the one it replaced.
func TestRollbackThenIngest(t *testing.T) {
	ctx := context.Background()
	store, dm := newDirStores(t)
	ms := genDirMeta{dm}
	cfg := testIngestConfig(3)
	rows1, rows2 := GenerateRows(100), GenerateRows(150)
	g1, err := Ingest(ctx, store, ms, "t", rows1, cfg)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := Ingest(ctx, store, ms, "t", rows2, cfg)
	if err != nil {
		t.Fatal(err)
	}
	prev, err := Rollback(ctx, store, ms, "t", 1)
	if err != nil || prev != 2 {
		t.Fatalf("Rollback to 1 = %d, %v; want prev 2", prev, err)
	}
	if cur, _ := ms.Current(ctx, "t"); cur != 1 {
		t.Fatalf("current %d after rollback, want 1", cur)
	}
	sameEntries(t, readTable(t, store, g1), rows1)
	expectObjects(t, store, g1, g2)

	g3, err := Ingest(ctx, store, ms, "t", GenerateRows(20), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if g3.GetGeneration() != 3 {
		t.Fatalf("ingest after the rollback made generation %d, want 3", g3.GetGeneration())
	}
	expectObjects(t, store, g1, g3)
	if gens, _ := ms.Generations(ctx, "t"); !slices.Equal(gens, []uint64{1, 3}) {
		t.Fatalf("generations %v, want [1 3]", gens)
	}
}

// TestRollbackRefusals: a missing table or generation, and a generation
// whose blocks are gone, are clear errors that change nothing; rolling
// back to the current generation changes nothing.
func TestRollbackRefusals(t *testing.T) {
	ctx := context.Background()
	store, dm := newDirStores(t)
	ms := genDirMeta{dm}
	cfg := testIngestConfig(4)
	g1, err := Ingest(ctx, store, ms, "t", GenerateRows(100), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Ingest(ctx, store, ms, "t", GenerateRows(50), cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := Rollback(ctx, store, ms, "nope", 1); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `no table "nope"`) {
		t.Errorf("Rollback of a missing table: %v", err)
	}
	if _, err := Rollback(ctx, store, ms, "t", 7); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `table "t" has no generation 7 (it has 1 and 2)`) {
		t.Errorf("Rollback to a missing generation: %v", err)
	}
	if prev, err := Rollback(ctx, store, ms, "t", 2); err != nil || prev != 2 {
		t.Errorf("Rollback to the current generation = %d, %v", prev, err)
	}
	f := g1.GetTablets()[0].GetFiles()[0]
	if err := store.Delete(ctx, IndexKey(f.GetId())); err != nil {
		t.Fatal(err)
	}
	if _, err := Rollback(ctx, store, ms, "t", 1); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "generation 1: file "+f.GetId()) {
		t.Errorf("Rollback to a generation without its blocks: %v", err)
	}
	if cur, _ := ms.Current(ctx, "t"); cur != 2 {
		t.Fatalf("current %d after refused rollbacks, want 2", cur)
	}
}

// TestDrop: the current generation cannot be dropped alone; a
// non-current one goes with its objects; DropTable removes the pointer,
// every generation and every object.
func TestDrop(t *testing.T) {
	ctx := context.Background()
	store, dm := newDirStores(t)
	ms := genDirMeta{dm}
	cfg := testIngestConfig(5)
	if _, err := Ingest(ctx, store, ms, "t", GenerateRows(100), cfg); err != nil {
		t.Fatal(err)
	}
	g2, err := Ingest(ctx, store, ms, "t", GenerateRows(50), cfg)
	if err != nil {
		t.Fatal(err)
	}
	keep, err := Ingest(ctx, store, ms, "other", GenerateRows(10), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := DropGeneration(ctx, store, ms, "t", 2); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "current") {
		t.Errorf("DropGeneration of the current one: %v", err)
	}
	if err := DropGeneration(ctx, store, ms, "t", 5); !errors.Is(err, ErrNotFound) {
		t.Errorf("DropGeneration of a missing one: %v", err)
	}
	if err := DropGeneration(ctx, store, ms, "t", 1); err != nil {
		t.Fatal(err)
	}
	expectObjects(t, store, g2, keep)
	gens, err := DropTable(ctx, store, ms, "t")
	if err != nil || !slices.Equal(gens, []uint64{2}) {
		t.Fatalf("DropTable = %v, %v; want [2]", gens, err)
	}
	expectObjects(t, store, keep)
	if cur, _ := ms.Current(ctx, "t"); cur != 0 {
		t.Fatalf("current %d after DropTable", cur)
	}
	if _, err := DropTable(ctx, store, ms, "t"); !errors.Is(err, ErrNotFound) {
		t.Errorf("DropTable of a dropped table: %v", err)
	}
}
