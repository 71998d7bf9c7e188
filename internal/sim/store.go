package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// memStore is the run's block store and metadata store, in memory; the
// table is ingested with the real tablets.Ingest, so the scan servers
// read real files.
type memStore struct {
	mu     sync.Mutex
	blocks map[string][]byte
	metas  map[string]map[uint64]*messages.TableMeta
	cur    map[string]uint64
}

func newMemStore() *memStore {
	return &memStore{blocks: map[string][]byte{}, metas: map[string]map[uint64]*messages.TableMeta{}, cur: map[string]uint64{}}
}

func (m *memStore) Put(_ context.Context, key string, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.blocks[key] = data
	return nil
}

// Get returns a copy of the stored block: the caller may change it.
func (m *memStore) Get(_ context.Context, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.blocks[key]
	if !ok {
		return nil, fmt.Errorf("block %s: %w", key, tablets.ErrNotFound)
	}
	return slices.Clone(b), nil
}

func (m *memStore) Delete(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.blocks, key)
	return nil
}

func (mm metaSource) Current(_ context.Context, table string) (uint64, error) {
	m := mm.m
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cur[table], nil
}

// Publish makes meta current if prev is (the tablets.MetaStore
// contract: a retried publish that succeeded succeeds again; a lost
// compare-and-set, or other bytes under an existing generation, is
// tablets.ErrConflict; a generation not above prev tablets.ErrBadInput).
func (mm metaSource) Publish(_ context.Context, meta *messages.TableMeta, prev uint64) error {
	m := mm.m
	m.mu.Lock()
	defer m.mu.Unlock()
	name, gen := meta.GetName(), meta.GetGeneration()
	if gen <= prev {
		return fmt.Errorf("sim: publish %s/g%d over g%d: %w", name, gen, prev, tablets.ErrBadInput)
	}
	if old, ok := m.metas[name][gen]; ok {
		if m.cur[name] == gen && proto.Equal(old, meta) {
			return nil
		}
		return fmt.Errorf("sim: publish %s/g%d: the generation exists: %w", name, gen, tablets.ErrConflict)
	}
	if m.cur[name] != prev {
		return fmt.Errorf("sim: publish %s/g%d: current is %d, not %d: %w", name, gen, m.cur[name], prev, tablets.ErrConflict)
	}
	if m.metas[name] == nil {
		m.metas[name] = map[uint64]*messages.TableMeta{}
	}
	m.metas[name][gen] = proto.Clone(meta).(*messages.TableMeta)
	m.cur[name] = gen
	return nil
}

// DeleteGeneration deletes an old generation; the current one is
// tablets.ErrConflict, a missing one nothing to do.
func (mm metaSource) DeleteGeneration(_ context.Context, table string, gen uint64) error {
	m := mm.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if gen != 0 && m.cur[table] == gen {
		return fmt.Errorf("sim: delete %s/g%d: it is current: %w", table, gen, tablets.ErrConflict)
	}
	delete(m.metas[table], gen)
	return nil
}

func (mm metaSource) Tables(context.Context) ([]string, error) {
	m := mm.m
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for t := range m.cur {
		out = append(out, t)
	}
	slices.Sort(out)
	return out, nil
}

// metaSource is memStore's metadata: the coordinators' MetaSource and
// the ingest's MetaStore.
type metaSource struct{ m *memStore }

// Get returns a copy of the stored generation: the caller may change it.
func (s metaSource) Get(_ context.Context, table string, gen uint64) (*messages.TableMeta, error) {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if t := s.m.metas[table][gen]; t != nil {
		return proto.Clone(t).(*messages.TableMeta), nil
	}
	return nil, fmt.Errorf("table %s/g%d: %w", table, gen, tablets.ErrNotFound)
}

// fetcher is a scan server's block reader: the store, with a cold read
// now and then that parks the reading goroutine for a while.
type fetcher struct {
	w *world
}

// FetchBlock implements tablets.BlockFetcher.
func (f fetcher) FetchBlock(ctx context.Context, key string) ([]byte, bool, error) {
	w := f.w
	if w.s.current != nil && w.s.chance(w.cfg.Server.ColdRead) {
		if err := w.s.sleep(ctx, w.s.uniform(w.cfg.Server.ColdReadMin, w.cfg.Server.ColdReadMax)); err != nil {
			return nil, false, err
		}
	}
	b, err := w.store.Get(ctx, key)
	if err == nil && w.mut.block != nil {
		b = w.mut.block(key, b)
	}
	return b, false, err
}

// ingest writes the run's table: rows "row000000".. with random values,
// split into tablets at random row boundaries.
func (w *world) ingest(rng *rand.Rand) error {
	n, k := w.cfg.Rows, w.cfg.Tablets
	rows := make([]tablets.Entry, n)
	for i := range n {
		v := make([]byte, 1+rng.IntN(12))
		for j := range v {
			v[j] = byte(rng.UintN(256))
		}
		rows[i] = tablets.Entry{Key: fmt.Appendf(nil, "row%06d", i), Value: v}
	}
	cuts := map[int]bool{}
	for len(cuts) < k-1 && len(cuts) < n-1 {
		cuts[1+rng.IntN(n-1)] = true
	}
	var splits [][]byte
	for i := range n {
		if cuts[i] {
			splits = append(splits, rows[i].Key)
		}
	}
	cfg := tablets.DefaultIngestConfig()
	cfg.BlockSize = 512
	cfg.SplitKeys = splits
	cfg.Tablets = len(splits) + 1
	cfg.Now = func() time.Time { return epoch }
	cfg.Rand = seededReader{rng}
	meta, err := tablets.Ingest(context.Background(), w.store, metaSource{w.store}, "sim", rows, cfg)
	if err != nil {
		return fmt.Errorf("sim: ingest: %w", err)
	}
	w.truth = &truthTable{name: "sim", rows: rows}
	for _, t := range meta.GetTablets() {
		w.truth.refs = append(w.truth.refs, t.GetRef())
		var roots []tablets.Digest
		for _, f := range t.GetFiles() {
			for b := range int(f.GetBlocks()) {
				d, ok := tablets.RootAt(f.GetBlockRoots(), b)
				if !ok {
					return fmt.Errorf("sim: file %s has no root for block %d", f.GetId(), b)
				}
				roots = append(roots, d)
			}
		}
		w.truth.roots = append(w.truth.roots, roots)
	}
	return nil
}

type seededReader struct{ r *rand.Rand }

func (s seededReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(s.r.UintN(256))
	}
	return len(p), nil
}
