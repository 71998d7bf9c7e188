package bus

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// manifestIngestConfig puts every file list in manifests.
func manifestIngestConfig(seed uint64) tablets.IngestConfig {
	cfg := tablets.DefaultIngestConfig()
	cfg.BlockSize = 256
	cfg.Tablets = 2
	cfg.InlineFileBytes = -1
	cfg.Writers = 4
	cfg.Rand = rand.NewChaCha8([32]byte{byte(seed)})
	return cfg
}

// readGeneration reads every row of a stored generation through Get
// (manifests filled in) and the tablet reader.
func readGeneration(ctx context.Context, store tablets.BlockStore, meta *MetaStore, table string, gen uint64) ([]tablets.Entry, error) {
	tm, err := meta.Get(ctx, table, gen)
	if err != nil {
		return nil, err
	}
	var out []tablets.Entry
	for _, tab := range tm.GetTablets() {
		it := tablets.NewTabletReader(tab.GetFiles(), tablets.StoreFetcher{Store: store}).Scan(ctx, tablets.Range{}, nil)
		for it.Next() {
			e := it.Entry()
			out = append(out, tablets.Entry{Key: bytes.Clone(e.Key), Value: bytes.Clone(e.Value)})
		}
		if err := it.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func sameRows(a, b []tablets.Entry) bool {
	return slices.EqualFunc(a, b, func(x, y tablets.Entry) bool {
		return bytes.Equal(x.Key, y.Key) && bytes.Equal(x.Value, y.Value)
	})
}

// A manifest replaced in the metadata bucket (another manifest's bytes
// under its name) makes Get fail; it never returns other files.
func TestManifestTamperInBucket(t *testing.T) {
	ctx := testCtx(t)
	conn := connect(t, startServer(t))
	store, meta := blockStore(t, conn), metaStore(t, conn)
	rows := tablets.GenerateRows(4000)
	rec, err := tablets.Ingest(ctx, store, meta, "tm", rows, manifestIngestConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	ids := tablets.RecordManifests(rec)
	if len(ids) < 2 {
		t.Fatalf("%d manifests", len(ids))
	}
	if got, err := readGeneration(ctx, store, meta, "tm", rec.GetGeneration()); err != nil || !sameRows(got, rows) {
		t.Fatalf("read back %d rows, %v; want %d", len(got), err, len(rows))
	}
	orig, err := meta.GetManifest(ctx, "tm", ids[0].Gen, ids[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	other, err := meta.GetManifest(ctx, "tm", ids[1].Gen, ids[1].Digest)
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(orig)
	flipped[len(flipped)-1] ^= 0x40 // a byte of a block root
	for name, data := range map[string][]byte{"another manifest": other, "flipped byte": flipped} {
		if err := meta.PutManifest(ctx, "tm", ids[0].Gen, ids[0].Digest, data); err != nil {
			t.Fatal(err)
		}
		if _, err := meta.Get(ctx, "tm", rec.GetGeneration()); !errors.Is(err, tablets.ErrCorrupt) {
			t.Fatalf("%s: Get = %v, want %v", name, err, tablets.ErrCorrupt)
		}
	}
	if err := meta.PutManifest(ctx, "tm", ids[0].Gen, ids[0].Digest, orig); err != nil {
		t.Fatal(err)
	}
	if _, err := meta.Get(ctx, "tm", rec.GetGeneration()); err != nil {
		t.Fatalf("restored: %v", err)
	}
}

// crashAfter counts the writes of an ingest to both stores; from write
// limit on, every write fails without effect, as if the writing process
// had been killed there (it can remove nothing either). Reads go through.
type crashAfter struct {
	limit     int64
	writes    atomic.Int64
	publishAt atomic.Int64 // the write that publishes
}

var errKilled = errors.New("test: process killed")

func (c *crashAfter) write() error {
	if c.writes.Add(1) > c.limit {
		return errKilled
	}
	return nil
}

type crashBlocks struct {
	*BlockStore
	c *crashAfter
}

func (s crashBlocks) Put(ctx context.Context, key string, data []byte) error {
	if err := s.c.write(); err != nil {
		return err
	}
	return s.BlockStore.Put(ctx, key, data)
}

// PutAsync counts a write when the Put is sent, as Put does.
func (s crashBlocks) PutAsync(ctx context.Context, key string, data []byte) (func() error, error) {
	if err := s.c.write(); err != nil {
		return nil, err
	}
	return s.BlockStore.PutAsync(ctx, key, data)
}

func (s crashBlocks) Delete(ctx context.Context, key string) error {
	if err := s.c.write(); err != nil {
		return err
	}
	return s.BlockStore.Delete(ctx, key)
}

type crashMeta struct {
	*MetaStore
	c *crashAfter
}

func (s crashMeta) Publish(ctx context.Context, m *messages.TableMeta, prev uint64) error {
	if err := s.c.write(); err != nil {
		return err
	}
	s.c.publishAt.Store(s.c.writes.Load())
	return s.MetaStore.Publish(ctx, m, prev)
}

func (s crashMeta) DeleteGeneration(ctx context.Context, table string, gen uint64) error {
	if err := s.c.write(); err != nil {
		return err
	}
	return s.MetaStore.DeleteGeneration(ctx, table, gen)
}

func (s crashMeta) PutManifest(ctx context.Context, table string, gen uint64, d [sha256.Size]byte, data []byte) error {
	if err := s.c.write(); err != nil {
		return err
	}
	return s.MetaStore.PutManifest(ctx, table, gen, d, data)
}

func (s crashMeta) DeleteManifest(ctx context.Context, table string, gen uint64, d [sha256.Size]byte) error {
	if err := s.c.write(); err != nil {
		return err
	}
	return s.MetaStore.DeleteManifest(ctx, table, gen, d)
}

// TestIngestKilledAtAnyWrite: an ingest of generation 3 (over 1 and 2,
// so publishing it deletes generation 1) stopped dead at write n, for n
// from the first write to past the last (blocks, indexes, manifests,
// the publish, the deletion of generation 1, the sweep), leaves the
// table at generation 2 or 3, and every stored generation reads back
// exactly its rows. The next ingest that succeeds removes every object
// and manifest no stored generation names.
func TestIngestKilledAtAnyWrite(t *testing.T) {
	// Some 60 ingests: a bound for a slow machine, not testCtx's.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	conn := connect(t, startServer(t))
	store, meta := blockStore(t, conn), metaStore(t, conn)
	// truth[i]: the rows of the table's i-th ingest (1-based).
	truth := map[uint64][]tablets.Entry{}
	for i := uint64(1); i <= 4; i++ {
		rows := tablets.GenerateRows(300 + 50*int(i))
		for j := range rows {
			rows[j].Value = fmt.Appendf(nil, "ingest%d-%s", i, rows[j].Value)
		}
		truth[i] = rows
	}
	setup := func(table string) {
		t.Helper()
		for g := uint64(1); g <= 2; g++ {
			if _, err := tablets.Ingest(ctx, store, meta, table, truth[g], manifestIngestConfig(g)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A run without a crash counts the writes.
	setup("count")
	counter := &crashAfter{limit: 1 << 40}
	if _, err := tablets.Ingest(ctx, crashBlocks{store, counter}, crashMeta{meta, counter}, "count", truth[3], manifestIngestConfig(3)); err != nil {
		t.Fatal(err)
	}
	total, pub := counter.writes.Load(), counter.publishAt.Load()
	// Kill points: the start, the middle of writing, the last writes
	// before the publish (the last manifests), the publish itself, the
	// deletion of generation 1 and the end.
	points := []int64{0, 1, pub / 3, pub / 2, pub - 3, pub - 2, pub - 1, pub, pub + 1, pub + 2, (pub + total) / 2, total - 1, total}
	r := rand.New(rand.NewPCG(7, 8))
	for range 2 {
		points = append(points, r.Int64N(total))
	}
	t.Logf("an ingest makes %d writes, the publish is write %d; killing it after %v", total, pub, points)
	for _, n := range points {
		table := fmt.Sprintf("k%d", n)
		setup(table)
		c := &crashAfter{limit: n}
		_, ierr := tablets.Ingest(ctx, crashBlocks{store, c}, crashMeta{meta, c}, table, truth[3], manifestIngestConfig(3))
		cur, err := meta.Current(ctx, table)
		if err != nil {
			t.Fatal(err)
		}
		if cur != 2 && cur != 3 || (cur == 2) != (ierr != nil && !errors.Is(ierr, tablets.ErrCleanup)) {
			t.Fatalf("killed after %d writes (%v): table at generation %d", n, ierr, cur)
		}
		want := map[uint64][]tablets.Entry{1: truth[1], 2: truth[2], 3: truth[3]} // generation -> rows
		checkStored := func(when string) []uint64 {
			t.Helper()
			gens, err := meta.Generations(ctx, table)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(gens, cur) {
				t.Fatalf("%s: current generation %d is not stored (%v)", when, cur, gens)
			}
			for _, g := range gens {
				got, err := readGeneration(ctx, store, meta, table, g)
				if err != nil || !sameRows(got, want[g]) {
					t.Fatalf("%s: generation %d reads %d rows, %v; want its %d rows", when, g, len(got), err, len(want[g]))
				}
			}
			return gens
		}
		checkStored(fmt.Sprintf("killed after %d writes", n))
		// The next ingest that succeeds sweeps what the killed one left.
		next, err := tablets.Ingest(ctx, store, meta, table, truth[4], manifestIngestConfig(4))
		if err != nil {
			t.Fatal(err)
		}
		if cur, err = meta.Current(ctx, table); err != nil || cur != next.GetGeneration() {
			t.Fatalf("after the next ingest: generation %d, %v; want %d", cur, err, next.GetGeneration())
		}
		want[cur] = truth[4]
		gens := checkStored("after the next ingest")
		namedKeys, namedManifests := map[string]bool{}, map[tablets.ManifestID]bool{}
		for _, g := range gens {
			tm, err := meta.Get(ctx, table, g)
			if err != nil {
				t.Fatal(err)
			}
			for _, tab := range tm.GetTablets() {
				for _, f := range tab.GetFiles() {
					namedKeys[tablets.IndexKey(f.GetId())] = true
					for b := range int(f.GetBlocks()) {
						namedKeys[tablets.BlockKey(f.GetId(), b)] = true
					}
				}
			}
			for _, id := range tablets.RecordManifests(tm) {
				namedManifests[id] = true
			}
		}
		keys, err := store.TableKeys(ctx, table)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if !namedKeys[k] {
				t.Fatalf("killed after %d writes: orphan object %s left after the next ingest", n, k)
			}
		}
		ids, err := meta.Manifests(ctx, table)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if !namedManifests[id] {
				t.Fatalf("killed after %d writes: orphan manifest %s left after the next ingest", n, tablets.ManifestName(id))
			}
		}
		if len(keys) != len(namedKeys) || len(ids) != len(namedManifests) {
			t.Fatalf("killed after %d writes: %d objects and %d manifests stored, %d and %d named",
				n, len(keys), len(ids), len(namedKeys), len(namedManifests))
		}
	}
}
