package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/scanplane/scanplane/internal/tabletstream"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// ScanOptions tune one scan.
type ScanOptions struct {
	// Hints go to the coordinator; "scan_type" picks the profile.
	Hints map[string]string
	// Limit stops after this many rows; 0 = all. A scan with a limit
	// reads one tablet at a time (Parallel does not apply), each asked
	// for the rows still wanted, so that no scan server sends rows past
	// the limit.
	Limit uint64
	// BatchRows overrides Config.BatchRows for this scan.
	BatchRows uint32
	// AllowUnverified scans a table ingested without row digests with the
	// stream's own checks only (row counts and checksums, which catch
	// transport faults, not a lying scan server). Default false: such a
	// scan fails with ErrUnverified. Tables with digests are always
	// verified.
	AllowUnverified bool
	// Parallel: how many tablets a scan reads at once (the prefetch
	// window: the tablet the caller reads and the ones after it). Each
	// runs its own stream and verification in a goroutine of its own;
	// Scan still yields rows in key order. 1 reads one tablet at a time,
	// in the caller's goroutine. 0 = DefaultParallel. A range within one
	// tablet is always read in the caller's goroutine.
	Parallel int
	// MaxBufferBytes bounds the bytes of verified rows (keys plus values)
	// a parallel scan holds that the caller has not taken yet. A tablet
	// ahead of the caller that would go past it stops acknowledging
	// batches, so its scan server stops sending after Config.Window
	// batches; the tablet the caller reads always gets its next batch.
	// 0 = DefaultMaxBufferBytes.
	MaxBufferBytes int
	// Proofs keeps, with the rows, the block proofs that proved them, for
	// a server that forwards them to a client that verifies (the public
	// API's ScanRequest.proofs): Rows.TakeProofs and Rows.ProofTable.
	// Client.Scan only; Count and BatchScan ignore it.
	Proofs bool
}

// Defaults of ScanOptions, chosen by measurement (MEASUREMENTS.md,
// "Parallel scans" and "Whole-table scans: flow control and the 4 MiB
// message limit").
const (
	DefaultParallel       = 4
	DefaultMaxBufferBytes = 2 << 20
	// MaxParallel bounds ScanOptions.Parallel.
	MaxParallel = 256
)

// Validate names the first bad field.
func (o ScanOptions) Validate() error {
	switch {
	case o.Parallel < 0 || o.Parallel > MaxParallel:
		return fmt.Errorf("client: ScanOptions.Parallel %d must be in [0, %d]", o.Parallel, MaxParallel)
	case o.MaxBufferBytes < 0:
		return fmt.Errorf("client: ScanOptions.MaxBufferBytes %d must be >= 0", o.MaxBufferBytes)
	}
	return nil
}

// parallel is the prefetch window with the default applied.
func (o ScanOptions) parallel() int {
	if o.Parallel == 0 {
		return DefaultParallel
	}
	return o.Parallel
}

func (o ScanOptions) maxBufferBytes() int {
	if o.MaxBufferBytes == 0 {
		return DefaultMaxBufferBytes
	}
	return o.MaxBufferBytes
}

// Row is one row. Its slices belong to the caller.
type Row struct {
	Key, Value []byte
}

// ScanStats counts what a scan did.
type ScanStats struct {
	Tablets  int // tablets visited
	Requests int // ScanRequests sent (resumes included)
	Resumes  int // mid-stream resumes on another server
	Batches  int
	Rows     uint64
}

// Rows iterates over a scan's rows: in key order for Scan, each piece's
// rows in key order for BatchScan. Use Next/Row/Err, and Close when
// stopping early: a parallel scan's goroutines run until the scan ends
// or Close.
type Rows struct {
	c      *Client
	ctx    context.Context
	table  string
	rng    tablets.Range   // for error messages: the range asked (Scan) or their span (BatchScan)
	ranges []tablets.Range // what to read, sorted and disjoint
	opts   ScanOptions
	// unordered: BatchScan, which interleaves pieces.
	unordered bool
	// count: Count, which wants the number of rows: counted adds up the
	// rows scan servers proved by count instead of sending them.
	count   bool
	counted uint64
	pieces  []tablets.Piece
	meta    *messages.TableMeta
	proofs  proofQueue // ScanOptions.Proofs
	pi      int
	run     *tabletRun      // serial: the tablet being read
	par     *prefetch       // parallel: the tablets being read
	batch   []tablets.Entry // rows received, not yet returned (from bi)
	bi      int             // rows of batch returned; the current row is batch[bi-1]
	fast    int             // Next may return rows up to this one of batch without next (0: none)
	last    []byte          // the last key of the batches before batch (ordered scans)
	slabs   slabPool        // the batches' Entry slabs, recycled
	err     error
	done    bool
	stats   ScanStats
}

// Scan scans [rng.Start, rng.End) of table. It does no IO until Next.
func (c *Client) Scan(ctx context.Context, table string, rng Range, opts ScanOptions) *Rows {
	r := &Rows{c: c, ctx: ctx, table: table, rng: rng, ranges: []tablets.Range{rng}, opts: opts}
	r.err = checkScan(table, rng, opts)
	return r
}

// checkScan checks a scan's arguments, as both clients' Scan do: the
// first bad one's error.
func checkScan(table string, rng Range, opts ScanOptions) error {
	if err := tablets.ValidateTableName(table); err != nil {
		return err
	}
	if err := rng.Validate(); err != nil {
		return err
	}
	return opts.Validate()
}

// All is Scan as a range-over-func iterator; iteration stops at the first
// error, which is yielded.
func (c *Client) All(ctx context.Context, table string, rng Range, opts ScanOptions) iter.Seq2[Row, error] {
	return allRows(func() rowIterator { return c.Scan(ctx, table, rng, opts) })
}

// rowIterator is what All needs of a scan's rows (Rows, APIRows).
type rowIterator interface {
	Next() bool
	Row() Row
	Err() error
	Close() error
}

// allRows iterates over the rows of the scan that start begins when the
// iteration does; it stops at the first error, which is yielded.
func allRows(start func() rowIterator) iter.Seq2[Row, error] {
	return func(yield func(Row, error) bool) {
		rows := start()
		defer rows.Close()
		for rows.Next() {
			if !yield(rows.Row(), nil) {
				return
			}
		}
		if err := rows.Err(); err != nil {
			yield(Row{}, err)
		}
	}
}

// Count returns the number of rows of [rng.Start, rng.End) of table (at
// most opts.Limit when set). Scan servers prove the rows of whole blocks
// inside the range by their count (the block roots of the table's
// metadata bind each block's row count) and send only the rows of the
// blocks at the range's ends, which the client checks as a scan's; a
// table ingested without row digests (opts.AllowUnverified) is counted
// by reading every row. The count is exact or an error.
func (c *Client) Count(ctx context.Context, table string, rng Range, opts ScanOptions) (uint64, error) {
	limit := opts.Limit
	opts.Limit = 0
	r := c.Scan(ctx, table, rng, opts)
	r.count = true
	defer r.Close()
	for r.Next() {
	}
	if err := r.Err(); err != nil {
		return 0, err
	}
	n := r.stats.Rows + r.counted
	if limit > 0 {
		n = min(n, limit)
	}
	return n, nil
}

// Row returns the current row (the zero Row when there is none).
func (r *Rows) Row() Row {
	if r.bi == 0 || r.bi > len(r.batch) {
		return Row{}
	}
	m := &r.batch[r.bi-1]
	return Row{Key: m.Key, Value: m.Value}
}

// Err returns the error that ended the scan, if any.
func (r *Rows) Err() error { return r.err }

// Stats returns what the scan did so far.
func (r *Rows) Stats() ScanStats {
	if r.par == nil {
		return r.stats
	}
	st := r.par.statsNow()
	st.Rows = r.stats.Rows
	return st
}

// Close stops the scan early; safe to call more than once. It returns
// once every goroutine of the scan has ended.
func (r *Rows) Close() error {
	if r.run != nil {
		r.run.abandon()
		r.run = nil
	}
	if r.par != nil {
		r.par.close()
	}
	r.done, r.fast = true, 0
	return nil
}

// Next advances to the next row.
func (r *Rows) Next() bool {
	// Most rows: the next one of the batch in hand, in a call the
	// compiler inlines; the first row of a batch, a limit, the end of a
	// batch and errors take next.
	if r.bi < r.fast {
		r.bi++
		r.stats.Rows++
		return true
	}
	return r.next()
}

func (r *Rows) next() bool {
	for {
		if r.err != nil || r.done {
			return false
		}
		// Per row: the tablets of a parallel scan each read up to the
		// limit, so a batch may run past it.
		if r.opts.Limit > 0 && r.stats.Rows >= r.opts.Limit {
			r.Close()
			return false
		}
		if r.bi < len(r.batch) {
			// Within a batch the stream checked that keys increase
			// (tabletstream): only a batch's first key is compared, with
			// the last key of the batch before it. No per-row write to
			// the heap: Row reads the slab.
			if r.bi == 0 && !r.unordered && r.last != nil {
				if k := r.batch[0].Key; bytes.Compare(k, r.last) <= 0 {
					r.fail(fmt.Errorf("%w: key %s after %s (out of order)", ErrStream, tablets.FormatKey(k), tablets.FormatKey(r.last)))
					return false
				}
			}
			r.bi++
			r.stats.Rows++
			if r.opts.Limit == 0 {
				r.fast = len(r.batch) // the batch's first row is checked
			}
			return true
		}
		if n := len(r.batch); n > 0 && !r.unordered {
			r.last = r.batch[n-1].Key
		}
		// The slab goes back for a later batch to decode into; the rows
		// returned stay as they were (they alias the batch's bytes, which
		// the next batch's rows replace rather than overwrite).
		r.slabs.put(r.batch)
		r.batch, r.bi, r.fast = nil, 0, 0
		if r.par != nil {
			b, ok, err := r.par.take()
			switch {
			case err != nil:
				r.fail(err)
				return false
			case !ok:
				r.par.close()
				r.done = true
				return false
			}
			r.batch = b.rows
			r.counted += b.counted
			r.proofs.put(b.proof)
			// A batch per time slice at most: goroutines woken meanwhile
			// (a short scan's) run before the caller goes on (bulkSlots).
			runtime.Gosched()
			continue
		}
		if r.run == nil {
			if r.meta == nil {
				if err := r.plan(); err != nil {
					r.fail(err)
					return false
				}
				if p := r.opts.parallel(); p > 1 && len(r.pieces) > 1 && r.opts.Limit == 0 {
					r.par = startPrefetch(r, p, r.opts.maxBufferBytes())
					continue
				}
			}
			if r.pi >= len(r.pieces) {
				r.done = true
				return false
			}
			limit := uint64(0)
			if r.opts.Limit > 0 {
				limit = r.opts.Limit - r.stats.Rows
			}
			run, err := r.startRun(r.pieces[r.pi], limit, nil, &r.stats, func(rows []tablets.Entry, counted uint64, pf *proofSeg) {
				r.counted += counted
				r.proofs.put(pf)
				if len(r.batch) == 0 {
					r.batch = rows // the stream's slab, one per batch: no copy
				} else {
					r.batch = append(r.batch, rows...)
				}
			})
			if err != nil {
				r.fail(err)
				return false
			}
			r.run = run
		} else if err := r.run.step(); err != nil {
			r.fail(err)
			return false
		}
		if r.run.finished {
			r.run = nil
			r.pi++
		}
	}
}

func (r *Rows) fail(err error) {
	r.err, r.fast = err, 0
	if r.run != nil {
		r.run.abandon()
		r.run = nil
	}
	if r.par != nil {
		r.par.close()
	}
}

// plan reads the table's metadata and splits the ranges over its tablets.
func (r *Rows) plan() error {
	meta, err := r.c.tableMeta(r.ctx, r.table)
	if err != nil {
		return err
	}
	r.meta = meta
	r.pieces = nil
	for _, rng := range r.ranges {
		r.pieces = append(r.pieces, tablets.SplitRange(meta.GetSplitPoints(), rng)...)
	}
	for _, p := range r.pieces {
		if p.Tablet >= len(meta.GetTablets()) {
			return fmt.Errorf("%w: table %q metadata has %d tablets for %d split points", ErrStream, r.table, len(meta.Tablets), len(meta.SplitPoints))
		}
	}
	return nil
}

// errStopped: the scan was closed while a tablet was being read.
var errStopped = errors.New("client: scan closed")

// tabletRun is the shell around one TabletStream: it carries out the
// stream's actions, waits for its events (messages, coordinator events,
// timers, the context, stop) and hands the rows it yields to yield.
type tabletRun struct {
	r    *Rows
	stop <-chan struct{} // closed by Close of a parallel scan; nil otherwise
	// short: a lookup-like scan read in its caller's goroutine (one
	// tablet, or a seek): while it waits for a message, bulk work waits
	// (bulkSlots). Any other run is bulk work: it handles each message
	// in one of the client's bulk slots.
	short bool
	// window: the batches in flight its requests ask for (0: the
	// servers' default).
	window   uint32
	cur      *tabletstream.TabletStream
	in       *inbox   // its inbox
	ids      []string // its request ids
	timer    *time.Timer
	yield    func(rows []tablets.Entry, counted uint64, pf *proofSeg)
	tablet   int // the piece's tablet
	stats    *ScanStats
	finished bool // every row of the piece was yielded
	ended    bool // the stream's inbox and request ids are released
}

// startRun starts the stream of one piece of the scan (limit: rows
// wanted from it, 0 = all).
// shortLimit is the largest limit of a scan of several tablets read by
// its caller that still counts as a short scan (bulkSlots).
const shortLimit = 100

func (r *Rows) startRun(p tablets.Piece, limit uint64, stop <-chan struct{}, stats *ScanStats, yield func([]tablets.Entry, uint64, *proofSeg)) (*tabletRun, error) {
	c := r.c
	if c.rx == nil {
		return nil, ErrClosed
	}
	tm, err := c.tabletMeta(r.ctx, r.meta, p.Tablet)
	if err != nil {
		return nil, err
	}
	in, coords, lost, err := c.openStream()
	if err != nil {
		return nil, err
	}
	// A short scan's reader runs as soon as its message is in; bulk
	// work, serial or parallel, waits its turn (bulkSlots). A scan of
	// several tablets read by its caller with a limit of at most
	// shortLimit rows (a seek) reads no more than a lookup does, so it
	// is short too.
	short := stop == nil && (len(r.pieces) == 1 || (limit > 0 && limit <= shortLimit))
	in.handOff = short
	cfg := tabletstream.StreamConfig{Client: c.self(), BatchRows: c.cfg.BatchRows, BatchBytes: c.cfg.BatchBytes, Window: c.cfg.Window, Hints: r.opts.Hints,
		MaxRequestTime: c.cfg.MaxRequestTime, StallTimeout: c.cfg.StallTimeout, IdleTimeout: c.cfg.IdleTimeout,
		CoordinatorWait: c.cfg.CoordinatorWait, MaxResumes: c.cfg.MaxResumes, Coordinators: coords, Lost: lost,
		RequestID: c.nextRequestID, ByOwner: c.byOwner(), Jitter: halfJitter, Limit: limit, CountOnly: r.count, Slabs: r.slabs.get}
	if r.opts.BatchRows > 0 {
		cfg.BatchRows = r.opts.BatchRows
	}
	if now := time.Now(); short {
		c.bulk.shortStarted(now)
	} else {
		// Few bytes ahead of the short scans' batches (bulkSlots).
		cfg.Window = c.bulk.bulkWindow(now, cfg.Window)
	}
	if d, ok := r.ctx.Deadline(); ok {
		cfg.Deadline = d
	}
	roots, err := tabletstream.Roots(tm)
	switch {
	case err == nil:
		cfg.Verify, cfg.Roots, cfg.KeepProofs, cfg.Leaves = true, roots, r.keepProofs(), c.leaves
	case !r.opts.AllowUnverified:
		c.closeStream(in, nil)
		return nil, fmt.Errorf("%w: table %s generation %d: %v (ingested without digests: ingest it again, or scan with AllowUnverified)",
			ErrUnverified, r.table, r.meta.GetGeneration(), err)
	}
	t := &tabletRun{r: r, stop: stop, cur: tabletstream.NewTabletStream(cfg, tm.GetRef(), p.Range), in: in, yield: yield, stats: stats,
		tablet: p.Tablet, short: short, window: cfg.Window}
	stats.Tablets++
	if err := t.apply(t.cur.Start(time.Now())); err != nil {
		t.abandon()
		return nil, err
	}
	return t, nil
}

// step waits for the stream's next event (a message, a coordinator
// event, a timer, ctx, stop) and applies what the stream decides.
func (t *tabletRun) step() error {
	m, closed := t.in.take()
	if m != nil {
		if !t.short {
			// A scan of several tablets, parallel or not: it handles the
			// message in one of the client's bulk slots.
			bulk := t.r.c.bulk
			if !bulk.acquire(t.stop, t.r.ctx.Done()) {
				if err := t.r.ctx.Err(); err != nil {
					return t.ctxErr(err)
				}
				return errStopped
			}
			defer bulk.release()
		}
		now := time.Now()
		if ev, ok := m.(coordEvent); ok {
			if ev.lost {
				return t.apply(t.cur.OnCoordinatorLost(now, ev.addr, ev.why))
			}
			return t.apply(t.cur.OnCoordinatorUp(now, ev.addr))
		}
		if sr, ok := m.(*messages.ScanRouted); ok && sr.GetRequestId() == t.cur.RequestID() {
			t.r.c.onScanRouted(t.cur.Ref(), sr)
		}
		return t.apply(t.cur.OnMessage(now, m))
	}
	if closed {
		return ErrClosed
	}
	now := time.Now()
	wake := t.cur.NextWakeup()
	if !wake.IsZero() && !now.Before(wake) {
		return t.apply(t.cur.OnTimer(now))
	}
	ctx := t.r.ctx
	if err := ctx.Err(); err != nil {
		return t.ctxErr(err)
	}
	var tc <-chan time.Time
	if !wake.IsZero() {
		if t.timer == nil {
			t.timer = time.NewTimer(wake.Sub(now))
		} else {
			t.timer.Reset(wake.Sub(now))
		}
		tc = t.timer.C
	}
	if t.short {
		bulk := t.r.c.bulk
		bulk.shortWaiting()
		defer bulk.shortHeard()
	}
	select {
	case <-ctx.Done():
		return t.ctxErr(ctx.Err())
	case <-t.stop:
		return errStopped
	case <-t.in.notify:
	case <-tc:
	}
	return nil
}

func (t *tabletRun) ctxErr(err error) error {
	return fmt.Errorf("client: scan of %s %s, tablet %s: %s: %w", t.r.table, t.r.rng, t.cur.TabletName(), t.cur.Waiting(), err)
}

// apply carries out a stream's actions, in order.
func (t *tabletRun) apply(acts []tabletstream.StreamAction) error {
	c := t.r.c
	ref := t.cur.Ref()
	var err error
	for _, a := range acts {
		switch a.Kind {
		case tabletstream.ActSendRequest:
			req := a.Msg.(*messages.ScanRequest)
			if e := c.register(req.GetRequestId(), t.in); e != nil {
				err = e
				continue
			}
			t.ids = append(t.ids, req.GetRequestId())
			t.stats.Requests++
			c.send(c.requestTarget(ref, a.Coordinator, req), req)
		case tabletstream.ActSendDone:
			c.send(c.doneTarget(ref, a.Coordinator), a.Msg)
		case tabletstream.ActSendCancel, tabletstream.ActSendAck:
			c.send(actor.NewPID(a.Server.GetAddress(), a.Server.GetId()), a.Msg)
		case tabletstream.ActYield:
			var pf *proofSeg
			if a.Proofs != nil || a.Restart {
				pf = &proofSeg{tablet: t.tablet, restart: a.Restart, rows: len(a.Rows), proofs: a.Proofs}
			}
			t.yield(a.Rows, a.Counted, pf)
			t.stats.Batches++
		case tabletstream.ActFinish:
			t.finished = true
			t.end()
			if t.r.keepProofs() {
				t.yield(nil, 0, &proofSeg{tablet: t.tablet, finished: true})
			}
		case tabletstream.ActFail:
			err = streamErr(a.Err)
		case tabletstream.ActCoordinatorSilent:
			c.coordLost(a.Coordinator, a.Err.Error())
		}
	}
	return err
}

// abandon stops the stream (a Cancel to its server, a ScanDone to its
// coordinator, unless it is done) and releases it.
func (t *tabletRun) abandon() {
	if t.ended {
		return
	}
	t.apply(t.cur.Abandon(time.Now()))
	t.end()
}

// end forgets the stream's inbox and request ids (its actions are carried
// out).
func (t *tabletRun) end() {
	if t.ended {
		return
	}
	t.ended = true
	t.stats.Resumes += t.cur.Stats().Resumes
	t.r.c.closeStream(t.in, t.ids)
	t.in, t.ids = nil, nil
	if t.timer != nil {
		t.timer.Stop()
	}
}

// halfJitter returns a random duration in [d/2, d].
func halfJitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d-d/2+1)
}
