package client

import (
	"bytes"
	"context"
	"fmt"
	"iter"
	"math/rand/v2"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// ScanOptions tune one scan.
type ScanOptions struct {
	// Hints go to the coordinator; "scan_type" picks the profile.
	Hints map[string]string
	// Limit stops after this many rows; 0 = all.
	Limit uint64
	// BatchRows overrides Config.BatchRows for this scan.
	BatchRows uint32
	// AllowUnverified scans a table ingested without row digests with the
	// stream's own checks only (row counts and checksums, which catch
	// transport faults, not a lying scan server). Default false: such a
	// scan fails with ErrUnverified. Tables with digests are always
	// verified.
	AllowUnverified bool
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

// Rows iterates over a scan's rows in key order. Use Next/Row/Err, and
// Close when stopping early.
type Rows struct {
	c      *Client
	ctx    context.Context
	table  string
	rng    tablets.Range
	opts   ScanOptions
	pieces []tablets.Piece
	meta   *messages.TableMeta
	pi     int
	cur    *TabletStream // the tablet being read
	in     *inbox        // its inbox
	ids    []string      // its request ids
	timer  *time.Timer
	batch  []tablets.Entry // rows received, not yet returned (from bi)
	bi     int
	row    Row
	last   []byte
	err    error
	done   bool
	stats  ScanStats
}

// Scan scans [rng.Start, rng.End) of table. It does no IO until Next.
func (c *Client) Scan(ctx context.Context, table string, rng Range, opts ScanOptions) *Rows {
	r := &Rows{c: c, ctx: ctx, table: table, rng: rng, opts: opts}
	if err := tablets.ValidateTableName(table); err != nil {
		r.err = err
	} else if err := rng.Validate(); err != nil {
		r.err = err
	}
	return r
}

// All is Scan as a range-over-func iterator; iteration stops at the first
// error, which is yielded.
func (c *Client) All(ctx context.Context, table string, rng Range, opts ScanOptions) iter.Seq2[Row, error] {
	return func(yield func(Row, error) bool) {
		rows := c.Scan(ctx, table, rng, opts)
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

// Row returns the current row.
func (r *Rows) Row() Row { return r.row }

// Err returns the error that ended the scan, if any.
func (r *Rows) Err() error { return r.err }

// Stats returns what the scan did so far.
func (r *Rows) Stats() ScanStats { return r.stats }

// Close stops the scan early; safe to call more than once.
func (r *Rows) Close() error {
	if r.cur != nil {
		r.apply(r.cur.Abandon(time.Now()))
		r.endStream()
	}
	r.done = true
	return nil
}

// Next advances to the next row.
func (r *Rows) Next() bool {
	for {
		if r.err != nil || r.done {
			return false
		}
		if r.bi < len(r.batch) {
			m := &r.batch[r.bi]
			r.bi++
			if r.last != nil && bytes.Compare(m.Key, r.last) <= 0 {
				r.fail(fmt.Errorf("%w: key %s after %s (out of order)", ErrStream, tablets.FormatKey(m.Key), tablets.FormatKey(r.last)))
				return false
			}
			r.last = m.Key
			r.row = Row{Key: m.Key, Value: m.Value}
			r.stats.Rows++
			return true
		}
		// Not batch[:0]: the slab aliases the batch's bytes, which the
		// next batch's rows replace rather than overwrite.
		r.batch, r.bi = nil, 0
		if r.opts.Limit > 0 && r.stats.Rows >= r.opts.Limit {
			r.Close()
			return false
		}
		if r.cur == nil {
			if r.meta == nil {
				if err := r.plan(); err != nil {
					r.fail(err)
					return false
				}
			}
			if r.pi >= len(r.pieces) {
				r.done = true
				return false
			}
			if err := r.startStream(r.pieces[r.pi]); err != nil {
				r.fail(err)
				return false
			}
			continue
		}
		if err := r.step(); err != nil {
			r.fail(err)
			return false
		}
	}
}

// startStream starts the tablet stream of one piece of the range.
func (r *Rows) startStream(p tablets.Piece) error {
	c := r.c
	if c.rx == nil {
		return ErrClosed
	}
	in, coords, lost, err := c.openStream()
	if err != nil {
		return err
	}
	cfg := StreamConfig{Client: c.self(), BatchRows: c.cfg.BatchRows, Window: c.cfg.Window, Hints: r.opts.Hints,
		MaxRequestTime: c.cfg.MaxRequestTime, StallTimeout: c.cfg.StallTimeout, IdleTimeout: c.cfg.IdleTimeout,
		CoordinatorWait: c.cfg.CoordinatorWait, MaxResumes: c.cfg.MaxResumes, Coordinators: coords, Lost: lost,
		RequestID: c.nextRequestID, ByOwner: c.byOwner(), Jitter: halfJitter}
	if r.opts.BatchRows > 0 {
		cfg.BatchRows = r.opts.BatchRows
	}
	if r.opts.Limit > 0 {
		cfg.Limit = r.opts.Limit - r.stats.Rows
	}
	if d, ok := r.ctx.Deadline(); ok {
		cfg.Deadline = d
	}
	tm := r.meta.Tablets[p.Tablet]
	roots, err := tabletRoots(r.table, r.meta.GetGeneration(), tm)
	switch {
	case err == nil:
		cfg.Verify, cfg.Roots = true, roots
	case !r.opts.AllowUnverified:
		c.closeStream(in, nil)
		return err
	}
	r.cur, r.in, r.ids = NewTabletStream(cfg, tm.GetRef(), p.Range), in, r.ids[:0]
	r.stats.Tablets++
	return r.apply(r.cur.Start(time.Now()))
}

// step waits for the current stream's next event (a message, a
// coordinator event, a timer, ctx) and applies what the stream decides.
func (r *Rows) step() error {
	m, closed := r.in.take()
	if m != nil {
		now := time.Now()
		if ev, ok := m.(coordEvent); ok {
			if ev.lost {
				return r.apply(r.cur.OnCoordinatorLost(now, ev.addr, ev.why))
			}
			return r.apply(r.cur.OnCoordinatorUp(now, ev.addr))
		}
		if sr, ok := m.(*messages.ScanRouted); ok && sr.GetRequestId() == r.cur.RequestID() {
			r.c.onScanRouted(r.cur.ref, sr)
		}
		return r.apply(r.cur.OnMessage(now, m))
	}
	if closed {
		return ErrClosed
	}
	now := time.Now()
	wake := r.cur.NextWakeup()
	if !wake.IsZero() && !now.Before(wake) {
		return r.apply(r.cur.OnTimer(now))
	}
	if err := r.ctx.Err(); err != nil {
		return r.ctxErr(err)
	}
	var tc <-chan time.Time
	if !wake.IsZero() {
		if r.timer == nil {
			r.timer = time.NewTimer(wake.Sub(now))
		} else {
			r.timer.Reset(wake.Sub(now))
		}
		tc = r.timer.C
	}
	select {
	case <-r.ctx.Done():
		return r.ctxErr(r.ctx.Err())
	case <-r.in.notify:
	case <-tc:
	}
	return nil
}

func (r *Rows) ctxErr(err error) error {
	return fmt.Errorf("client: scan of %s %s, tablet %s: %s: %w", r.table, r.rng, r.cur.tabletName(), r.cur.Waiting(), err)
}

// apply carries out a stream's actions, in order.
func (r *Rows) apply(acts []StreamAction) error {
	c := r.c
	var ref *messages.TabletRef
	if r.cur != nil {
		ref = r.cur.ref // r.cur is gone after ActFinish
	}
	var err error
	for _, a := range acts {
		switch a.Kind {
		case ActSendRequest:
			req := a.Msg.(*messages.ScanRequest)
			if e := c.register(req.GetRequestId(), r.in); e != nil {
				err = e
				continue
			}
			r.ids = append(r.ids, req.GetRequestId())
			r.stats.Requests++
			c.send(c.requestTarget(ref, a.Coordinator, req), req)
		case ActSendDone:
			c.send(c.doneTarget(ref, a.Coordinator), a.Msg)
		case ActSendCancel, ActSendAck:
			c.send(actor.NewPID(a.Server.GetAddress(), a.Server.GetId()), a.Msg)
		case ActYield:
			if len(r.batch) == 0 {
				r.batch = a.Rows // the stream's slab, one per batch: no copy
			} else {
				r.batch = append(r.batch, a.Rows...)
			}
			r.stats.Batches++
		case ActFinish:
			r.endStream()
			r.pi++
		case ActFail:
			err = a.Err
		}
	}
	return err
}

// endStream forgets the current stream (its actions are carried out).
func (r *Rows) endStream() {
	if r.cur == nil {
		return
	}
	st := r.cur.Stats()
	r.stats.Resumes += st.Resumes
	r.c.closeStream(r.in, r.ids)
	r.cur, r.in, r.ids = nil, nil, nil
	if r.timer != nil {
		r.timer.Stop()
	}
}

func (r *Rows) fail(err error) {
	r.err = err
	if r.cur != nil {
		r.apply(r.cur.Abandon(time.Now()))
		r.endStream()
	}
}

func (r *Rows) plan() error {
	meta, err := r.c.Table(r.ctx, r.table)
	if err != nil {
		return err
	}
	r.meta = meta
	r.pieces = tablets.SplitRange(meta.GetSplitPoints(), r.rng)
	for _, p := range r.pieces {
		if p.Tablet >= len(meta.GetTablets()) {
			return fmt.Errorf("%w: table %q metadata has %d tablets for %d split points", ErrStream, r.table, len(meta.Tablets), len(meta.SplitPoints))
		}
	}
	return nil
}

// halfJitter returns a random duration in [d/2, d].
func halfJitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d-d/2+1)
}
