package bus

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/internal/backoff"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// ErrConflict is wrapped when a compare-and-set on metadata fails: the
// table's current generation is not the one the caller expected, or the
// generation it wants to publish exists already.
var ErrConflict = errors.New("bus: conflict")

// abandonedAfter is how old an existing, never-switched-to generation entry
// must be before Publish replaces it: a writer that died between writing a
// generation and switching the pointer leaves one behind, while a live
// competing writer switches within milliseconds.
const abandonedAfter = 30 * time.Second

// errUndecodable is wrapped when a stored record does not decode.
var errUndecodable = errors.New("undecodable record")

// watchSetupTimeout bounds how long Watch waits for the initial values.
const watchSetupTimeout = 10 * time.Second

const (
	tablesPrefix      = "tables."
	currentSuffix     = ".current"
	currentWatchKeys  = tablesPrefix + "*" + currentSuffix
	metaBucketHistory = 8
)

// MetaStore keeps table metadata in a JetStream KV bucket:
//
//	tables.<name>.g<gen>    TableMeta (protobuf) of one generation
//	tables.<name>.current   the current generation, in decimal
//	tables.<name>.g<gen>.m<sha256>   a manifest (tablets.ManifestStore)
//
// <name> is the table name with characters outside [A-Za-z0-9_-] escaped as
// "=XX". A generation is written first and then made current by a
// compare-and-set on the pointer, so readers never see a pointer to a
// missing generation. Every operation is bounded by Config.OpTimeout per
// request, and store failures wrap a sentinel (see BlockStore). Safe for
// concurrent use.
type MetaStore struct {
	conn     *Conn
	kv       jetstream.KeyValue
	stream   jetstream.Stream // the bucket's stream (purges)
	subjects string           // "$KV.<bucket>."
}

var _ tablets.ManifestStore = (*MetaStore)(nil)

// MetaStore binds the metadata bucket, creating it if missing (file
// storage, Config.Replicas; see Conn.bucket).
func (c *Conn) MetaStore(ctx context.Context) (*MetaStore, error) {
	kv, err := c.bucket(ctx, jetstream.KeyValueConfig{
		Bucket:      c.cfg.MetaBucket,
		Description: "scanplane table metadata",
		History:     metaBucketHistory,
		Storage:     jetstream.FileStorage,
		Replicas:    c.cfg.Replicas,
	})
	if err != nil {
		return nil, err
	}
	st, err := c.kvStream(ctx, c.cfg.MetaBucket)
	if err != nil {
		return nil, err
	}
	return &MetaStore{conn: c, kv: kv, stream: st, subjects: kvSubjectPrefix + c.cfg.MetaBucket + "."}, nil
}

func currentKey(table string) string {
	return tablesPrefix + escapeKey(table, false) + currentSuffix
}

func genKey(table string, gen uint64) string {
	return tablesPrefix + escapeKey(table, false) + ".g" + strconv.FormatUint(gen, 10)
}

// tableOfCurrentKey returns the table of a tables.<name>.current key.
func tableOfCurrentKey(key string) (string, bool) {
	esc, ok := strings.CutPrefix(key, tablesPrefix)
	if !ok {
		return "", false
	}
	esc, ok = strings.CutSuffix(esc, currentSuffix)
	if !ok || esc == "" || strings.Contains(esc, ".") {
		return "", false
	}
	return unescapeKey(esc)
}

func parseGen(v []byte) (uint64, error) {
	g, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil || g == 0 {
		return 0, fmt.Errorf("bus: bad current-generation value %q", v)
	}
	return g, nil
}

// current returns the table's current generation and the pointer's
// revision; 0, 0 if the table has none.
func (m *MetaStore) current(ctx context.Context, table string) (gen, rev uint64, err error) {
	e, err := m.get(ctx, currentKey(table))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, m.conn.storeErr(ctx, fmt.Sprintf("current generation of %q", table), err)
	}
	gen, err = parseGen(e.Value())
	if err != nil {
		return 0, 0, fmt.Errorf("%w (table %q)", err, table)
	}
	return gen, e.Revision(), nil
}

// Current returns the table's current generation, or 0 if there is no such
// table.
func (m *MetaStore) Current(ctx context.Context, table string) (uint64, error) {
	gen, _, err := m.current(ctx, table)
	return gen, err
}

// Get returns one generation of a table; a missing one gives an error
// wrapping ErrNotFound. The files of tablets kept in manifests are filled
// in from the manifests, each checked against the record
// (tablets.LoadManifests).
func (m *MetaStore) Get(ctx context.Context, table string, gen uint64) (*messages.TableMeta, error) {
	meta, err := m.record(ctx, table, gen)
	if err != nil {
		return nil, err
	}
	err = tablets.LoadManifests(ctx, meta, func(ctx context.Context, id tablets.ManifestID) ([]byte, error) {
		return m.GetManifest(ctx, table, id.Gen, id.Digest)
	})
	if err != nil {
		return nil, fmt.Errorf("bus: %w", err)
	}
	return meta, nil
}

// Record returns one generation's record as stored, without the files
// of tablets kept in manifests (tablets.ManifestStore); a missing one
// gives an error wrapping ErrNotFound, a newer metadata format one
// wrapping tablets.ErrFormat.
func (m *MetaStore) Record(ctx context.Context, table string, gen uint64) (*messages.TableMeta, error) {
	meta, err := m.record(ctx, table, gen)
	if err != nil {
		return nil, err
	}
	if err := tablets.CheckFormat(meta); err != nil {
		return nil, fmt.Errorf("bus: %w", err)
	}
	return meta, nil
}

// record returns one generation's record as stored.
func (m *MetaStore) record(ctx context.Context, table string, gen uint64) (*messages.TableMeta, error) {
	e, err := m.get(ctx, genKey(table, gen))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("bus: table %q generation %d: %w", table, gen, ErrNotFound)
	}
	if err != nil {
		return nil, m.conn.storeErr(ctx, fmt.Sprintf("get table %q generation %d", table, gen), err)
	}
	meta := new(messages.TableMeta)
	if err := proto.Unmarshal(e.Value(), meta); err != nil {
		return nil, fmt.Errorf("bus: decode table %q generation %d: %w: %w", table, gen, errUndecodable, err)
	}
	return meta, nil
}

// Publish stores meta as generation meta.Generation of table meta.Name and
// makes it current, provided the current generation is still prev (0 = the
// table must not exist yet). Otherwise — or if that generation number was
// already published by someone else — it returns an error wrapping
// ErrConflict and leaves no trace. Repeating a Publish that succeeded (same
// meta, same prev) succeeds again.
func (m *MetaStore) Publish(ctx context.Context, meta *messages.TableMeta, prev uint64) error {
	name, gen := meta.GetName(), meta.GetGeneration()
	switch {
	case name == "":
		return errors.New("bus: publish table meta: empty name")
	case gen == 0 || gen <= prev:
		return fmt.Errorf("bus: publish table %q: generation %d must be > previous %d", name, gen, prev)
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(meta)
	if err != nil {
		return fmt.Errorf("bus: encode table %q generation %d: %w", name, gen, err)
	}
	if err := m.conn.checkSize(fmt.Sprintf("table %q generation %d", name, gen), len(data), math.MaxInt); err != nil {
		return err
	}
	key := genKey(name, gen)
	rev, err := m.create(ctx, key, data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		rev, err = m.reuseGeneration(ctx, name, gen, key, data)
	} else if err != nil {
		err = m.conn.storeErr(ctx, fmt.Sprintf("publish table %q generation %d", name, gen), err)
	}
	if err != nil {
		return err
	}
	if err := m.switchCurrent(ctx, name, gen, prev); err != nil {
		if errors.Is(err, ErrConflict) {
			// Remove what we wrote, unless someone replaced it since.
			_, _ = timed(m.conn, context.WithoutCancel(ctx), func(octx context.Context) (struct{}, error) {
				return struct{}{}, m.kv.Purge(octx, key, jetstream.LastRevision(rev))
			})
		}
		return err
	}
	return nil
}

// reuseGeneration handles a generation key that already exists: the same
// bytes (our own earlier attempt) are kept; an abandoned entry is replaced;
// anything else is a conflict. It returns the entry's revision.
func (m *MetaStore) reuseGeneration(ctx context.Context, name string, gen uint64, key string, data []byte) (uint64, error) {
	what := fmt.Sprintf("publish table %q generation %d", name, gen)
	e, err := m.get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		// Purged since our Create failed: try once more.
		rev, err := m.create(ctx, key, data)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return 0, fmt.Errorf("%w: table %q generation %d is being published concurrently", ErrConflict, name, gen)
		}
		if err != nil {
			return 0, m.conn.storeErr(ctx, what, err)
		}
		return rev, nil
	}
	if err != nil {
		return 0, m.conn.storeErr(ctx, what, err)
	}
	if bytes.Equal(e.Value(), data) {
		return e.Revision(), nil
	}
	cur, _, err := m.current(ctx, name)
	if err != nil {
		return 0, err
	}
	if cur >= gen {
		return 0, fmt.Errorf("%w: table %q generation %d already published (current %d)", ErrConflict, name, gen, cur)
	}
	if time.Since(e.Created()) < abandonedAfter {
		return 0, fmt.Errorf("%w: table %q generation %d is being published concurrently", ErrConflict, name, gen)
	}
	rev, err := m.update(ctx, key, data, e.Revision())
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, fmt.Errorf("%w: table %q generation %d is being published concurrently", ErrConflict, name, gen)
	}
	if err != nil {
		return 0, m.conn.storeErr(ctx, what, err)
	}
	return rev, nil
}

// switchCurrent moves the pointer from prev to gen by compare-and-set. A
// pointer already at gen counts as success: the caller has checked that
// generation gen holds its bytes.
func (m *MetaStore) switchCurrent(ctx context.Context, name string, gen, prev uint64) error {
	key := currentKey(name)
	value := []byte(strconv.FormatUint(gen, 10))
	cur, rev, err := m.current(ctx, name)
	if err != nil {
		return err
	}
	switch {
	case cur == gen:
		return nil
	case cur != prev:
		return fmt.Errorf("%w: table %q is at generation %d, not %d", ErrConflict, name, cur, prev)
	}
	if prev == 0 {
		_, err = m.create(ctx, key, value)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("%w: table %q was created concurrently", ErrConflict, name)
		}
	} else {
		_, err = m.update(ctx, key, value, rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return fmt.Errorf("%w: table %q moved from generation %d concurrently", ErrConflict, name, prev)
		}
	}
	if err != nil {
		return m.conn.storeErr(ctx, fmt.Sprintf("switch table %q to generation %d", name, gen), err)
	}
	return nil
}

// DeleteGeneration removes one generation of a table (a KV purge). It
// refuses, with an error wrapping ErrConflict, to remove the current one.
// Removing a missing generation is not an error.
func (m *MetaStore) DeleteGeneration(ctx context.Context, table string, gen uint64) error {
	cur, err := m.Current(ctx, table)
	if err != nil {
		return err
	}
	if cur == gen && gen != 0 {
		return fmt.Errorf("%w: generation %d of table %q is current", ErrConflict, gen, table)
	}
	old, err := m.record(ctx, table, gen)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil
	case err != nil && !errors.Is(err, errUndecodable):
		return err
	}
	if err := purgeSubject(m.conn, ctx, m.stream, m.subjects+genKey(table, gen)); err != nil {
		return m.conn.storeErr(ctx, fmt.Sprintf("delete table %q generation %d", table, gen), err)
	}
	// An undecodable record's manifests are left to SweepOrphans.
	for _, id := range tablets.RecordManifests(old) {
		if err := m.DeleteManifest(ctx, table, id.Gen, id.Digest); err != nil {
			return err
		}
	}
	return nil
}

// manifestKey is the key of a manifest: tables.<name>.g<gen>.m<sha256>,
// one token more than a generation's key (Generations and Watch do not
// see it).
func manifestKey(table string, id tablets.ManifestID) string {
	return tablesPrefix + escapeKey(table, false) + "." + tablets.ManifestName(id)
}

// PutManifest stores a manifest (tablets.ManifestStore); storing it again
// succeeds.
func (m *MetaStore) PutManifest(ctx context.Context, table string, gen uint64, digest [sha256.Size]byte, data []byte) error {
	key := manifestKey(table, tablets.ManifestID{Gen: gen, Digest: digest})
	if err := m.conn.checkSize("manifest "+key, len(data), math.MaxInt); err != nil {
		return err
	}
	_, err := timed(m.conn, ctx, func(octx context.Context) (uint64, error) { return m.kv.Put(octx, key, data) })
	if err != nil {
		return m.conn.storeErr(ctx, "put "+key, err)
	}
	return nil
}

// GetManifest returns a manifest's bytes (tablets.ManifestStore); a
// missing one gives an error wrapping ErrNotFound.
func (m *MetaStore) GetManifest(ctx context.Context, table string, gen uint64, digest [sha256.Size]byte) ([]byte, error) {
	key := manifestKey(table, tablets.ManifestID{Gen: gen, Digest: digest})
	e, err := m.get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("bus: %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, m.conn.storeErr(ctx, "get "+key, err)
	}
	return e.Value(), nil
}

// DeleteManifest removes a manifest (tablets.ManifestStore); a missing
// one is not an error.
func (m *MetaStore) DeleteManifest(ctx context.Context, table string, gen uint64, digest [sha256.Size]byte) error {
	key := manifestKey(table, tablets.ManifestID{Gen: gen, Digest: digest})
	if err := purgeSubject(m.conn, ctx, m.stream, m.subjects+key); err != nil {
		return m.conn.storeErr(ctx, "delete "+key, err)
	}
	return nil
}

// Manifests lists the table's stored manifests (tablets.ManifestStore).
func (m *MetaStore) Manifests(ctx context.Context, table string) ([]tablets.ManifestID, error) {
	prefix := tablesPrefix + escapeKey(table, false) + "."
	entries, err := m.conn.listEntries(ctx, m.kv, fmt.Sprintf("list manifests of %q", table), true, prefix+"*.*")
	if err != nil {
		return nil, err
	}
	var out []tablets.ManifestID
	for _, e := range entries {
		if id, ok := tablets.ParseManifestName(strings.TrimPrefix(e.Key(), prefix)); ok {
			out = append(out, id)
		}
	}
	return out, nil
}

// Generations lists the generations of a table whose metadata is stored,
// ascending: the current one, those kept for rollback, and any written
// but never made current (an ingest that failed or is under way).
//
// The list is the stream leader's: the subjects its stream info counts,
// each checked with a get from the leader (a purged record leaves a
// marker that the count includes); without a leader it is an error
// wrapping ErrUnavailable. A key listing (an ordered consumer)
// or a direct get may be served by a replica that is behind and miss a
// generation written a moment ago; the orphan sweep deletes the objects
// of every generation this list leaves out, so a stale list would delete
// a live generation's blocks.
func (m *MetaStore) Generations(ctx context.Context, table string) ([]uint64, error) {
	prefix := tablesPrefix + escapeKey(table, false) + "."
	filter := m.subjects + prefix + "*"
	what := fmt.Sprintf("list generations of %q", table)
	counts, err := m.conn.subjectCounts(ctx, m.stream, m.conn.cfg.MetaBucket, filter, what)
	if err != nil {
		return nil, err
	}
	var gens []uint64
	for subj, n := range counts {
		digits, ok := strings.CutPrefix(strings.TrimPrefix(subj, m.subjects+prefix), "g")
		if !ok || n == 0 {
			continue
		}
		g, err := strconv.ParseUint(digits, 10, 64)
		if err != nil || g == 0 {
			continue
		}
		_, _, deleted, err := m.conn.leaderGet(ctx, m.conn.cfg.MetaBucket, subj)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound) || (err == nil && deleted):
			continue // purged since the count, or a purge marker
		case err != nil:
			return nil, m.conn.storeErr(ctx, what, err)
		}
		gens = append(gens, g)
	}
	slices.Sort(gens)
	return gens, nil
}

// SetCurrent makes generation gen of table current again (a rollback, or
// a roll forward), provided the current generation is still prev;
// otherwise it returns an error wrapping ErrConflict. A generation whose
// metadata is not stored is an error wrapping ErrNotFound. Setting the
// generation that is current already succeeds.
func (m *MetaStore) SetCurrent(ctx context.Context, table string, gen, prev uint64) error {
	if gen == 0 {
		return fmt.Errorf("bus: set table %q current: generation 0", table)
	}
	if _, err := m.get(ctx, genKey(table, gen)); errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("bus: table %q generation %d: %w", table, gen, ErrNotFound)
	} else if err != nil {
		return m.conn.storeErr(ctx, fmt.Sprintf("get table %q generation %d", table, gen), err)
	}
	return m.switchCurrent(ctx, table, gen, prev)
}

// DeleteTable removes the table's current-generation pointer, provided
// it is still at generation prev (else an error wrapping ErrConflict):
// the table leaves Tables and watchers see generation 0. Its generations'
// metadata stays until DeleteGeneration removes it.
func (m *MetaStore) DeleteTable(ctx context.Context, table string, prev uint64) error {
	cur, rev, err := m.current(ctx, table)
	if err != nil {
		return err
	}
	switch {
	case cur == 0:
		return nil
	case cur != prev:
		return fmt.Errorf("%w: table %q is at generation %d, not %d", ErrConflict, table, cur, prev)
	}
	_, err = timed(m.conn, ctx, func(octx context.Context) (struct{}, error) {
		return struct{}{}, m.kv.Purge(octx, currentKey(table), jetstream.LastRevision(rev))
	})
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return fmt.Errorf("%w: table %q moved from generation %d concurrently", ErrConflict, table, prev)
	}
	if err != nil {
		return m.conn.storeErr(ctx, fmt.Sprintf("delete table %q", table), err)
	}
	return nil
}

// Tables lists the tables that have a current generation, sorted.
func (m *MetaStore) Tables(ctx context.Context) ([]string, error) {
	entries, err := m.conn.listEntries(ctx, m.kv, "list tables", true, currentWatchKeys)
	if err != nil {
		return nil, err
	}
	var tables []string
	for _, e := range entries {
		if t, ok := tableOfCurrentKey(e.Key()); ok {
			tables = append(tables, t)
		}
	}
	slices.Sort(tables)
	return slices.Compact(tables), nil
}

// Watch calls fn(table, gen) for the current generation of every table and
// then for every change, until ctx is done or the connection closes. gen 0
// means the table's pointer was removed. fn is called from one goroutine,
// one call at a time. Watch returns once the watcher is set up and the
// initial values have been passed to fn (it stops waiting for them after
// ctx ends or 10s).
//
// After every NATS reconnect (a server restart, a switch to another
// cluster member) the watch re-synchronises: it drops its JetStream
// consumer, which may be gone with the server, starts a new one, and
// passes every table's current generation to fn again — so fn sees what
// changed while the connection was down, and later changes, at once
// instead of after the library's idle-heartbeat timeout. If the new
// consumer cannot be set up yet (JetStream still starting), it retries
// with a back-off of up to 2 s, logging at warn.
//
// If the first watcher cannot be set up, Watch returns the error and
// watches nothing (see WatchRetrying).
func (m *MetaStore) Watch(ctx context.Context, fn func(table string, gen uint64)) error {
	return m.watch(ctx, fn, false)
}

// WatchRetrying is Watch for a caller that has no other way to learn of
// new generations: when the first watcher cannot be set up (JetStream
// not ready, no answer), it returns that error at once but keeps setting
// one up in the background, with the back-off Watch uses after a
// reconnect, until one is set up, ctx ends or the connection closes;
// from then on fn gets every table's current generation and every change,
// as from Watch.
func (m *MetaStore) WatchRetrying(ctx context.Context, fn func(table string, gen uint64)) error {
	return m.watch(ctx, fn, true)
}

// watch is Watch, or WatchRetrying when retry is set.
func (m *MetaStore) watch(ctx context.Context, fn func(table string, gen uint64), retry bool) error {
	reconnected := m.conn.reconnectSignal() // before the watcher: no reconnect is missed
	w, err := m.kv.Watch(ctx, currentWatchKeys)
	if err != nil {
		err = m.conn.storeErr(ctx, "watch tables", err)
		if retry && ctx.Err() == nil && !m.conn.nc.IsClosed() {
			go func() {
				if w, reconnected := m.rewatch(ctx, reconnected); w != nil {
					m.watchLoop(ctx, w, reconnected, fn, make(chan struct{}))
				}
			}()
		}
		return err
	}
	initial := make(chan struct{})
	go m.watchLoop(ctx, w, reconnected, fn, initial)
	select {
	case <-initial:
	case <-ctx.Done():
	case <-time.After(watchSetupTimeout):
		m.conn.log.Warn("table watch: initial values not complete, continuing")
	}
	return nil
}

// watchBackoff spaces the attempts to set up a lease or table watcher
// again (see Conn.rewatch).
var watchBackoff = backoff.Config{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.2}

// watchLoop delivers w's updates to fn, replacing w after each reconnect,
// and closes initial once w's initial values have been delivered.
func (m *MetaStore) watchLoop(ctx context.Context, w jetstream.KeyWatcher, reconnected <-chan struct{}, fn func(string, uint64), initial chan struct{}) {
	defer func() {
		if w != nil {
			stopWatcher(w)
		}
	}()
	initDone := false
	revs := revisions{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.conn.closed:
			return
		case <-reconnected:
			reconnected = m.conn.reconnectSignal()
			stopWatcher(w)
			m.conn.log.Info("table watch: re-synchronising after a NATS reconnect")
			if w, reconnected = m.rewatch(ctx, reconnected); w == nil {
				return
			}
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				// The library ended the watcher (its subscription
				// closed): set up a new one unless we are closing.
				if ctx.Err() != nil || m.conn.nc.IsClosed() {
					w = nil
					return
				}
				m.conn.log.Warn("table watch: watcher ended; setting up a new one")
				if w, reconnected = m.rewatch(ctx, reconnected); w == nil {
					return
				}
			case e == nil:
				if !initDone {
					initDone = true
					close(initial)
				}
			default:
				if !revs.fresh(e.Key(), e.Revision()) {
					m.conn.replayed.Add(1)
					continue
				}
				m.deliver(e, fn)
			}
		}
	}
}

// deliver passes one pointer update to fn.
func (m *MetaStore) deliver(e jetstream.KeyValueEntry, fn func(string, uint64)) {
	table, ok := tableOfCurrentKey(e.Key())
	if !ok {
		return
	}
	var gen uint64
	if e.Operation() == jetstream.KeyValuePut {
		g, err := parseGen(e.Value())
		if err != nil {
			m.conn.log.Warn("ignoring bad table pointer", "key", e.Key(), "err", err)
			return
		}
		gen = g
	}
	fn(table, gen)
}

// rewatch sets up a new table watcher (see Conn.rewatch).
func (m *MetaStore) rewatch(ctx context.Context, reconnected <-chan struct{}) (jetstream.KeyWatcher, <-chan struct{}) {
	return m.conn.rewatch(ctx, "table watch", reconnected, func() (jetstream.KeyWatcher, error) { return m.kv.Watch(ctx, currentWatchKeys) })
}

// get, create and update are the KV calls bounded by OpTimeout (get
// tried again after Config.ReadTry, as a block read); their errors are
// the library's (for errors.Is on its sentinels) or ErrUnavailable for
// the timeout.
func (m *MetaStore) get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	return timedRead(m.conn, ctx, func(octx context.Context) (jetstream.KeyValueEntry, error) { return m.kv.Get(octx, key) })
}

func (m *MetaStore) create(ctx context.Context, key string, value []byte) (uint64, error) {
	return timed(m.conn, ctx, func(octx context.Context) (uint64, error) { return m.kv.Create(octx, key, value) })
}

func (m *MetaStore) update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	return timed(m.conn, ctx, func(octx context.Context) (uint64, error) { return m.kv.Update(octx, key, value, rev) })
}
