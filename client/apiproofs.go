package client

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	scanplanev1 "github.com/scanplane/scanplane/api/scanplane/v1"
	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/tabletstream"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// apiMeta reads tables' metadata from the cluster's NATS for an API
// client with Config.APIReadMeta: it connects on first use and keeps
// the last generation read of each table.
type apiMeta struct {
	cfg Config

	mu     sync.Mutex
	conn   *bus.Conn
	store  *bus.MetaStore
	tables map[string]*messages.TableMeta // by name: the last generation read, its record
	files  *tablets.TabletFiles           // tablets' files loaded from manifests
	closed bool
}

// metaStore connects on first use.
func (m *apiMeta) metaStore(ctx context.Context) (*bus.MetaStore, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return nil, ErrClosed
	case m.store != nil:
		return m.store, nil
	}
	bc := bus.DefaultConfig()
	bc.URL, bc.Name, bc.TLS, bc.ReadOnly = m.cfg.NATSURL, "scanplane-api-client", m.cfg.TLS, true
	conn, err := bus.Connect(ctx, bc)
	if err != nil {
		return nil, fmt.Errorf("client: api: connect to NATS %s (Config.APIReadMeta): %w", m.cfg.NATSURL, err)
	}
	store, err := conn.MetaStore(ctx)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("client: api: metadata store: %w", err)
	}
	m.conn, m.store = conn, store
	m.files = &tablets.TabletFiles{MaxBytes: fileListBytes, Get: func(ctx context.Context, table string, id tablets.ManifestID) (data []byte, err error) {
		err = bus.RetryUnavailable(ctx, metaRetryLimit, func() (err error) {
			data, err = store.GetManifest(ctx, table, id.Gen, id.Digest)
			return err
		})
		return data, err
	}}
	return store, nil
}

// tablet returns tablet idx of record tm (read by get) with its files.
func (m *apiMeta) tablet(ctx context.Context, tm *messages.TableMeta, idx int) (*messages.TabletMeta, error) {
	m.mu.Lock()
	files := m.files
	m.mu.Unlock()
	if files == nil {
		return nil, ErrClosed
	}
	t, err := files.Tablet(ctx, tm, idx)
	if err != nil {
		return nil, fmt.Errorf("client: api: %w", err)
	}
	return t, nil
}

// current returns the table's current generation (0: no such table).
func (m *apiMeta) current(ctx context.Context, table string) (uint64, error) {
	store, err := m.metaStore(ctx)
	if err != nil {
		return 0, err
	}
	var gen uint64
	err = bus.RetryUnavailable(ctx, metaRetryLimit, func() (err error) {
		gen, err = store.Current(ctx, table)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("client: api: table %q: %w", table, err)
	}
	return gen, nil
}

// get returns one generation of the table's record (files kept in
// manifests not filled in: tablet loads them).
func (m *apiMeta) get(ctx context.Context, table string, gen uint64) (*messages.TableMeta, error) {
	m.mu.Lock()
	t := m.tables[table]
	m.mu.Unlock()
	if t.GetGeneration() == gen {
		return t, nil
	}
	store, err := m.metaStore(ctx)
	if err != nil {
		return nil, err
	}
	err = bus.RetryUnavailable(ctx, metaRetryLimit, func() (err error) {
		t, err = store.Record(ctx, table, gen)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("client: api: table %q generation %d: %w", table, gen, err)
	}
	m.mu.Lock()
	if m.tables == nil {
		m.tables = map[string]*messages.TableMeta{}
	}
	m.tables[table] = t
	m.mu.Unlock()
	return t, nil
}

func (m *apiMeta) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.conn != nil {
		m.conn.Close()
		m.conn, m.store, m.files = nil, nil, nil
	}
}

// apiProofs checks an API scan's rows against their proofs
// (ScanRequest.proofs): the rows of each request of the scan, tablet
// piece by tablet piece, with one tabletstream.Verifier per stream the
// coordinator forwards, against the block roots of the generation's
// metadata (read from NATS with APIReadMeta, else the record and
// manifests the coordinator sends). A row is handed over only once
// proven; a request that ends must have shown every piece complete, or
// its limit reached.
type apiProofs struct {
	a     *API
	table string
	// gen: the generation of the scan's first request (every request of
	// a scan reads the same); minGen: APIReadMeta, the table's current
	// generation before the first request.
	gen, minGen uint64

	// Of the current request:
	rng     tablets.Range
	limit   uint64 // 0 = none
	started bool   // its first message arrived
	meta    *messages.TableMeta
	pieces  []tablets.Piece
	pi      int
	v       *tabletstream.Verifier
	last    []byte          // the last row proven
	rows    uint64          // rows proven
	queue   []tablets.Entry // rows received that no RowProof covered yet
	packed  []byte          // their packed encoding, in order
	// own: packed is a buffer of apiProofs's own, which it may reuse;
	// false: it is (or aliases) a response's packed_rows, which rows
	// handed over alias, so it is never written to.
	own    bool
	hint   int // rows of the last response
	proofs int // RowProofs received in the request
	// mans: the manifests the record names, by SHA-256: those received
	// (ScanResponse.manifests) and not yet loaded, nil for the others;
	// roots: the block roots of tablet rootsOf (-1: none).
	mans    map[[sha256.Size]byte][]byte
	roots   []tablets.Digest
	rootsOf int
	// held: the manifests of the table the client holds (apiHeld), by
	// SHA-256, which the request lists as held (ScanRequest.held_manifests)
	// and which are therefore not sent.
	held map[[sha256.Size]byte][]byte
}

// errCoordinatorBehind: a request's first message names a generation
// older than the one current when the scan began and no row was handed
// over: the coordinator has not yet learnt of a new generation (its
// metadata watch lags an ingest), so the request is asked again, of the
// next coordinator, within CoordinatorWait.
var errCoordinatorBehind = errors.New("the coordinator is behind the table's current generation")

// maxUnproven bounds the bytes of rows an API client holds without a
// proof: a proof follows its block's rows, and a block is far smaller.
const maxUnproven = 64 << 20

// begin starts a request for rng (limit: its rows wanted, 0 = all).
func (p *apiProofs) begin(ctx context.Context, rng tablets.Range, limit uint64) error {
	if p.a.cfg.APIReadMeta && p.gen == 0 && p.minGen == 0 {
		gen, err := p.a.meta.current(ctx, p.table)
		if err != nil {
			return err
		}
		p.minGen = gen
	}
	p.rng, p.limit, p.started, p.meta, p.pieces, p.pi, p.v = rng, limit, false, nil, nil, 0, nil
	p.last, p.rows, p.queue, p.proofs = nil, 0, nil, 0
	p.resetPacked()
	p.mans, p.roots, p.rootsOf, p.held = nil, nil, -1, nil
	if !p.a.cfg.APIReadMeta {
		p.held = p.a.held.snapshot(p.table)
	}
	return nil
}

// load reads the metadata of the generation the first message names.
func (p *apiProofs) load(ctx context.Context, m *scanplanev1.ScanResponse) error {
	gen := m.GetGeneration()
	switch {
	case gen == 0:
		return fmt.Errorf("%w: the first response carries no table generation (ScanResponse.generation, sent with proofs): the server sent no proofs, or something on the way removed them", tablets.ErrBadProof)
	case p.gen != 0 && gen != p.gen:
		return fmt.Errorf("%w: table %q was re-ingested during the scan (generation %d, then %d): scan again", ErrStaleGeneration, p.table, p.gen, gen)
	case gen < p.minGen:
		return fmt.Errorf("%w: %w: the coordinator scanned generation %d of table %q, older than the current %d", ErrStaleGeneration, errCoordinatorBehind, gen, p.table, p.minGen)
	}
	var meta *messages.TableMeta
	if p.a.cfg.APIReadMeta {
		var err error
		if meta, err = p.a.meta.get(ctx, p.table, gen); err != nil {
			return err
		}
	} else {
		meta = &messages.TableMeta{}
		if err := proto.Unmarshal(m.GetTableRecord(), meta); err != nil {
			return fmt.Errorf("%w: table_record: %v", ErrStream, err)
		}
		if meta.GetName() != p.table || meta.GetGeneration() != gen {
			return fmt.Errorf("%w: table_record is table %q generation %d, not %q generation %d", ErrStream, meta.GetName(), meta.GetGeneration(), p.table, gen)
		}
	}
	p.gen, p.meta, p.started = gen, meta, true
	p.pieces = tablets.SplitRange(meta.GetSplitPoints(), p.rng)
	for _, pc := range p.pieces {
		if pc.Tablet >= len(meta.GetTablets()) {
			return fmt.Errorf("%w: table %q metadata has %d tablets for %d split points", ErrStream, p.table, len(meta.GetTablets()), len(meta.GetSplitPoints()))
		}
	}
	return nil
}

// message takes a message of the request and returns the rows now
// proven, in order.
func (p *apiProofs) message(ctx context.Context, m *scanplanev1.ScanResponse) ([]tablets.Entry, error) {
	if !p.started {
		if err := p.load(ctx, m); err != nil {
			return nil, err
		}
	}
	if len(m.GetManifests()) > 0 && p.mans == nil {
		// Only manifests the record names are kept.
		p.mans = map[[sha256.Size]byte][]byte{}
		for _, id := range tablets.RecordManifests(p.meta) {
			p.mans[id.Digest] = nil
		}
	}
	for _, data := range m.GetManifests() {
		d := sha256.Sum256(data)
		if old, named := p.mans[d]; !named || old != nil {
			return nil, fmt.Errorf("%w: a manifest (ScanResponse.manifests) of SHA-256 %x that the record does not name, or sent twice", tablets.ErrBadProof, d)
		}
		p.mans[d] = data
		p.a.held.put(p.table, d, data)
	}
	rows, err := responseRows(m, p.hint)
	if err != nil {
		return nil, err
	}
	p.hint = len(rows)
	if pk := m.GetPackedRows(); len(pk) > 0 {
		// The bytes the proofs hash, as they came.
		if len(p.queue) == 0 {
			p.packed = pk
		} else {
			p.packed = append(slices.Clip(p.packed), pk...)
		}
		p.own = false
	} else {
		if !p.own {
			p.packed = slices.Clip(p.packed) // appending copies
		}
		for _, row := range rows {
			p.packed = tablets.AppendPackedRow(p.packed, row.Key, row.Value)
		}
		p.own = p.own || len(rows) > 0
	}
	p.queue = append(p.queue, rows...)
	if len(p.packed) > maxUnproven {
		return nil, fmt.Errorf("%w: %s", tablets.ErrBadProof, p.unproven())
	}
	var out []tablets.Entry
	for _, rp := range m.GetProofs() {
		p.proofs++
		rows, err := p.proof(ctx, rp)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	if len(p.queue) == 0 {
		p.resetPacked()
	}
	return out, nil
}

// resetPacked empties packed, keeping its buffer if it is apiProofs's own.
func (p *apiProofs) resetPacked() {
	if p.own {
		p.packed = p.packed[:0]
	} else {
		p.packed = nil
	}
}

// unproven describes the rows received without a proof.
func (p *apiProofs) unproven() string {
	if p.proofs == 0 {
		return fmt.Sprintf("%d rows (%d bytes) and not one proof (ScanResponse.proofs): the server sent no proofs, or something on the way removed them",
			len(p.queue), len(p.packed))
	}
	return fmt.Sprintf("%d rows (%d bytes) without a proof after %d proofs", len(p.queue), len(p.packed), p.proofs)
}

// tabletRoots returns the block roots of tablet idx of the request's
// generation, its files loaded from its manifests where the record
// keeps them outside itself: from the metadata store (APIReadMeta),
// else from the manifests received.
func (p *apiProofs) tabletRoots(ctx context.Context, idx int) ([]tablets.Digest, error) {
	if p.rootsOf == idx && p.roots != nil {
		return p.roots, nil
	}
	var tm *messages.TabletMeta
	var err error
	if p.a.cfg.APIReadMeta {
		tm, err = p.a.meta.tablet(ctx, p.meta, idx)
	} else {
		tm, err = tablets.LoadTablet(ctx, p.meta, idx, func(_ context.Context, id tablets.ManifestID) ([]byte, error) {
			if data := p.mans[id.Digest]; data != nil {
				p.mans[id.Digest] = nil // used; apiHeld keeps it
				return data, nil
			}
			if data := p.held[id.Digest]; data != nil {
				return data, nil
			}
			return nil, fmt.Errorf("%w: not among the manifests received (ScanResponse.manifests) or held (ScanRequest.held_manifests)", tablets.ErrBadProof)
		})
	}
	if err != nil {
		return nil, err
	}
	roots, err := tabletstream.Roots(tm)
	if err != nil {
		return nil, fmt.Errorf("%w: table %s generation %d: %v", ErrUnverified, p.table, p.gen, err)
	}
	p.roots, p.rootsOf = roots, idx
	return roots, nil
}

// proof checks one RowProof over the next rows received.
func (p *apiProofs) proof(ctx context.Context, rp *scanplanev1.RowProof) ([]tablets.Entry, error) {
	if p.pi >= len(p.pieces) {
		return nil, fmt.Errorf("%w: a proof of tablet %d after the end of the range %s", tablets.ErrBadProof, rp.GetTablet(), p.rng)
	}
	pc := p.pieces[p.pi]
	if int(rp.GetTablet()) != pc.Tablet {
		return nil, fmt.Errorf("%w: a proof of tablet %d where tablet %d's piece %s is not complete", tablets.ErrBadProof, rp.GetTablet(), pc.Tablet, pc.Range)
	}
	if p.v == nil || rp.GetRestart() {
		roots, err := p.tabletRoots(ctx, pc.Tablet)
		if err != nil {
			return nil, err
		}
		limit := uint64(0)
		if p.limit > 0 {
			limit = p.limit - p.rows
		}
		p.v = tabletstream.NewVerifier(roots, pc.Range, p.last, limit)
	}
	k := int(rp.GetRows())
	if k > len(p.queue) {
		return nil, fmt.Errorf("%w: a proof of %d rows, %d received unproven", tablets.ErrBadProof, k, len(p.queue))
	}
	rows := p.queue[:k:k]
	size := 0
	for _, r := range rows {
		size += tablets.PackedRowSize(len(r.Key), len(r.Value))
	}
	blocks := make([]*messages.BlockProof, len(rp.GetBlocks()))
	for i, b := range rp.GetBlocks() {
		blocks[i] = &messages.BlockProof{Block: b.GetBlock(), Leaves: b.GetLeaves(), First: b.GetFirst(), Rows: b.GetRows(),
			Siblings: b.GetSiblings(), Head: b.GetHead(), Tail: b.GetTail()}
	}
	got, err := p.v.Batch(p.packed[:size], rows, blocks)
	if err == nil && len(got) != k {
		err = fmt.Errorf("%w: a proof of %d rows whose blocks prove %d", tablets.ErrBadProof, k, len(got))
	}
	if err != nil {
		return nil, fmt.Errorf("tablet %d: %w", pc.Tablet, err)
	}
	p.queue, p.packed = p.queue[k:], p.packed[size:]
	p.rows += uint64(k)
	if k > 0 {
		p.last = rows[k-1].Key
	}
	if rp.GetFinished() {
		if err := p.v.Finish(); err != nil {
			return nil, fmt.Errorf("tablet %d: %w", pc.Tablet, err)
		}
		p.v = nil
		p.pi++
	}
	return rows, nil
}

// end checks the end of a request that ended with OK: every row proven,
// and every piece complete or the limit reached.
func (p *apiProofs) end() error {
	switch {
	case !p.started:
		return fmt.Errorf("%w: the scan ended with no response carrying a table generation or a proof (ScanResponse.generation, proofs)", tablets.ErrBadProof)
	case len(p.queue) > 0:
		return fmt.Errorf("%w: the scan ended with %s", tablets.ErrBadProof, p.unproven())
	case p.limit > 0 && p.rows >= p.limit, p.pi >= len(p.pieces):
		return nil
	}
	return fmt.Errorf("%w: the scan ended in tablet %d before the end of its piece %s was proven", tablets.ErrBadProof,
		p.pieces[p.pi].Tablet, p.pieces[p.pi].Range)
}
