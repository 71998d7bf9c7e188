package coordinator

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/messages"
	"golang.org/x/sync/singleflight"
)

// MetaSource is where table metadata comes from (bus.MetaStore, or
// tablets.DirMetaStore).
type MetaSource interface {
	Current(ctx context.Context, table string) (uint64, error)
	Get(ctx context.Context, table string, gen uint64) (*messages.TableMeta, error)
	Tables(ctx context.Context) ([]string, error)
}

type tableGen struct {
	table string
	gen   uint64
}

// metaCache caches table generations (immutable once published). Safe for
// concurrent use.
type metaCache struct {
	src    MetaSource
	mu     sync.Mutex
	tables map[tableGen]*messages.TableMeta
	// current: the newest current generation seen per table (metadata
	// watch, look-ups of missing generations).
	current map[string]uint64
	sf      singleflight.Group
}

func newMetaCache(src MetaSource) *metaCache {
	return &metaCache{src: src, tables: map[tableGen]*messages.TableMeta{}, current: map[string]uint64{}}
}

// noteCurrent records that gen is (or was) table's current generation;
// 0: the table was removed.
func (m *metaCache) noteCurrent(table string, gen uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case gen == 0:
		delete(m.current, table)
	case gen > m.current[table]:
		m.current[table] = gen
	}
}

// Current implements GenerationSource from what was seen, without IO
// (0 if nothing was).
func (m *metaCache) Current(_ context.Context, table string) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.current[table], nil
}

func (m *metaCache) cached(table string, gen uint64) *messages.TableMeta {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tables[tableGen{table, gen}]
}

// get returns a generation, loading it once; a missing generation of an
// existing table is ErrorCode STALE_GENERATION, a missing table NO_SUCH_TABLE.
func (m *metaCache) get(ctx context.Context, table string, gen uint64) (*messages.TableMeta, messages.ErrorCode, error) {
	if t := m.cached(table, gen); t != nil {
		return t, 0, nil
	}
	key := table + "/" + strconv.FormatUint(gen, 10)
	v, err, _ := m.sf.Do(key, func() (any, error) {
		t, err := m.getRetrying(ctx, table, gen)
		if err != nil {
			return nil, err
		}
		if t.GetName() != table || t.GetGeneration() != gen {
			return nil, fmt.Errorf("metadata of %s/g%d names %s/g%d", table, gen, t.GetName(), t.GetGeneration())
		}
		m.mu.Lock()
		m.tables[tableGen{table, gen}] = t
		m.mu.Unlock()
		return t, nil
	})
	if err != nil {
		if bus.IsNotFound(err) {
			cur, cerr := m.src.Current(ctx, table)
			if cerr == nil && cur > 0 {
				m.noteCurrent(table, cur)
				return nil, messages.ErrorCode_ERROR_CODE_STALE_GENERATION,
					fmt.Errorf("table %q generation %d is gone (current %d); rescan", table, gen, cur)
			}
			return nil, messages.ErrorCode_ERROR_CODE_NO_SUCH_TABLE, fmt.Errorf("no table %q", table)
		}
		return nil, messages.ErrorCode_ERROR_CODE_INTERNAL, fmt.Errorf("metadata of %q: %w", table, err)
	}
	return v.(*messages.TableMeta), 0, nil
}

// getRetrying reads a generation from the metadata bucket, again while
// the bucket is unavailable and ctx lasts (bus.RetryUnavailable): losing
// one NATS node of three must not fail the scans that arrive while
// JetStream elects a new leader (e2e TestCoordinatorKilledAndRestarted saw
// INTERNAL here).
func (m *metaCache) getRetrying(ctx context.Context, table string, gen uint64) (t *messages.TableMeta, err error) {
	err = bus.RetryUnavailable(ctx, 0, func() error {
		t, err = m.load(ctx, table, gen)
		return err
	})
	return t, err
}

// recordSource is a MetaSource that returns records without loading the
// tablets' manifests (bus.MetaStore, tablets.DirMetaStore).
type recordSource interface {
	Record(ctx context.Context, table string, gen uint64) (*messages.TableMeta, error)
}

// load reads a generation's record. A coordinator needs no file list
// kept in manifests: a scan request names the tablet's manifests and the
// scan server loads them (tablets.DispatchFiles), so it reads the record
// alone when the source can.
func (m *metaCache) load(ctx context.Context, table string, gen uint64) (*messages.TableMeta, error) {
	if r, ok := m.src.(recordSource); ok {
		return r.Record(ctx, table, gen)
	}
	return m.src.Get(ctx, table, gen)
}

// tableStatus lists the tables seen (current generations from the
// metadata watch, cached generations), sorted by name.
func (m *metaCache) tableStatus() []*messages.TableStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	byName := map[string]*messages.TableStatus{}
	get := func(name string) *messages.TableStatus {
		t := byName[name]
		if t == nil {
			t = &messages.TableStatus{Name: name, CachedGenerations: []uint64{}}
			byName[name] = t
		}
		return t
	}
	for name, gen := range m.current {
		get(name).CurrentGeneration = gen
	}
	for k := range m.tables {
		t := get(k.table)
		t.CachedGenerations = append(t.CachedGenerations, k.gen)
	}
	out := make([]*messages.TableStatus, 0, len(byName))
	for _, t := range byName {
		slices.Sort(t.CachedGenerations)
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *messages.TableStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// forget drops cached generations of a table older than keepFrom.
func (m *metaCache) forget(table string, keepFrom uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.tables {
		if k.table == table && k.gen < keepFrom {
			delete(m.tables, k)
		}
	}
}
