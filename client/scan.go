package client

import (
	"bytes"
	"context"
	"fmt"
	"iter"
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
	cur    *tabletScan
	batch  []*messages.Row
	bi     int
	row    Row
	last   []byte
	err    error
	done   bool
	stats  ScanStats
}

// Scan scans [rng.Start, rng.End) of table. It does no IO until Next.
func (c *Client) Scan(ctx context.Context, table string, rng tablets.Range, opts ScanOptions) *Rows {
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
func (c *Client) All(ctx context.Context, table string, rng tablets.Range, opts ScanOptions) iter.Seq2[Row, error] {
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
		r.cur.abandon()
		r.cur = nil
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
			m := r.batch[r.bi]
			r.batch[r.bi] = nil
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
			p := r.pieces[r.pi]
			r.cur = &tabletScan{rows: r, ref: r.meta.Tablets[p.Tablet].GetRef(), rng: p.Range}
			r.stats.Tablets++
			if err := r.cur.start(); err != nil {
				r.fail(err)
				return false
			}
		}
		rows, end, err := r.cur.next()
		if err != nil {
			r.fail(err)
			return false
		}
		if end {
			r.cur = nil
			r.pi++
			continue
		}
		r.batch, r.bi = rows, 0
	}
}

func (r *Rows) fail(err error) {
	r.err = err
	if r.cur != nil {
		r.cur.abandon()
		r.cur = nil
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

// tabletScan reads one tablet's piece of the range, resuming on another
// server if the stream breaks.
type tabletScan struct {
	rows      *Rows
	ref       *messages.TabletRef
	rng       tablets.Range
	lastKey   []byte
	avoid     []string
	resumes   int
	reqID     string
	in        *inbox
	sentAt    time.Time
	accepted  uint32
	server    string
	serverPID *actor.PID
	lastSeq   uint64
	lastData  time.Time
	cancelled map[uint32]bool
}

func (t *tabletScan) start() error {
	c := t.rows.c
	t.reqID = c.nextRequestID()
	in, err := c.register(t.reqID)
	if err != nil {
		return err
	}
	t.in = in
	t.accepted, t.server, t.serverPID, t.lastSeq = 0, "", nil, 0
	t.cancelled = map[uint32]bool{}
	t.sentAt = time.Now()
	req := &messages.ScanRequest{RequestId: t.reqID, Client: c.self(), Tablet: t.ref,
		Range: &messages.KeyRange{Start: t.rng.Start, End: t.rng.End}, ResumeAfter: t.lastKey,
		BatchRows: c.cfg.BatchRows, Hints: t.rows.opts.Hints, AvoidServers: t.avoid, ResumeCount: uint32(t.resumes),
		Window: c.cfg.Window}
	if t.rows.opts.BatchRows > 0 {
		req.BatchRows = t.rows.opts.BatchRows
	}
	if lim := t.rows.opts.Limit; lim > 0 {
		req.Limit = lim - t.rows.stats.Rows - t.pendingRows()
	}
	if d, ok := t.rows.ctx.Deadline(); ok {
		req.DeadlineUnixMs = d.UnixMilli()
	}
	t.rows.stats.Requests++
	c.send(c.router, req)
	return nil
}

// pendingRows: rows received but not yet handed to the caller.
func (t *tabletScan) pendingRows() uint64 { return uint64(len(t.rows.batch) - t.rows.bi) }

// done tells the tablet actor this request is over and forgets it.
func (t *tabletScan) done(abandoned bool) {
	c := t.rows.c
	if abandoned && t.serverPID != nil {
		c.send(t.serverPID, &messages.Cancel{RequestId: t.reqID, Attempt: t.accepted, Reason: "client stopped reading"})
	}
	c.send(c.router, &messages.ScanDone{RequestId: t.reqID, WinnerAttempt: t.accepted, Abandoned: abandoned, Tablet: t.ref})
	c.unregister(t.reqID)
}

func (t *tabletScan) abandon() { t.done(true) }

// resume re-requests the rest of the tablet after lastKey, avoiding the
// server that broke.
func (t *tabletScan) resume(why string) error {
	t.rows.c.log.Debug("resuming scan", "request", t.reqID, "server", t.server, "after", tablets.FormatKey(t.lastKey), "why", why)
	if t.resumes >= t.rows.c.cfg.MaxResumes {
		t.abandon()
		return &ScanError{Code: messages.ErrorCode_ERROR_CODE_RESUME_LIMIT,
			Message: fmt.Sprintf("tablet %s/g%d/t%d: stream broke %d times (last: %s on %s)", t.ref.GetTable(), t.ref.GetGeneration(), t.ref.GetIndex(), t.resumes+1, why, t.server)}
	}
	if t.server != "" {
		t.avoid = append(t.avoid, t.server)
		if len(t.avoid) > 16 {
			t.avoid = t.avoid[len(t.avoid)-16:]
		}
	}
	t.abandon()
	t.resumes++
	t.rows.stats.Resumes++
	return t.start()
}

// next returns the next batch of rows, or end when the tablet is done.
func (t *tabletScan) next() (rows []*messages.Row, end bool, err error) {
	c := t.rows.c
	ctx := t.rows.ctx
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		m, closed := t.in.take()
		if m == nil {
			if closed {
				return nil, false, ErrClosed
			}
			var wait time.Duration
			if t.accepted != 0 {
				wait = time.Until(t.lastData.Add(c.cfg.StallTimeout))
			} else {
				wait = time.Until(t.sentAt.Add(c.cfg.IdleTimeout))
			}
			if wait <= 0 {
				if t.accepted != 0 {
					if err := t.resume(fmt.Sprintf("no data for %v", c.cfg.StallTimeout)); err != nil {
						return nil, false, err
					}
					continue
				}
				t.abandon()
				return nil, false, fmt.Errorf("%w: no answer for tablet %s/g%d/t%d within %v from coordinator %s", ErrNoCoordinator,
					t.ref.GetTable(), t.ref.GetGeneration(), t.ref.GetIndex(), c.cfg.IdleTimeout, c.router.Address)
			}
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				t.abandon()
				return nil, false, ctx.Err()
			case <-t.in.notify:
			case <-timer.C:
			}
			continue
		}
		switch m := m.(type) {
		case *messages.RowBatch:
			if t.accepted == 0 {
				t.accepted, t.server = m.GetAttempt(), m.GetServer()
				if p := m.GetServerPid(); p != nil {
					t.serverPID = actor.NewPID(p.Address, p.Id)
				}
			}
			if m.GetAttempt() != t.accepted {
				t.cancelLoser(m)
				continue
			}
			if m.GetSeq() != t.lastSeq+1 {
				if err := t.resume(fmt.Sprintf("batch %d after %d", m.GetSeq(), t.lastSeq)); err != nil {
					return nil, false, err
				}
				continue
			}
			t.lastSeq = m.GetSeq()
			t.lastData = time.Now()
			if t.serverPID != nil {
				c.send(t.serverPID, &messages.BatchAck{RequestId: t.reqID, Attempt: m.GetAttempt(), Seq: m.GetSeq()})
			}
			rows := m.GetRows()
			for _, row := range rows {
				if len(t.lastKey) > 0 && bytes.Compare(row.Key, t.lastKey) <= 0 || !t.rng.Contains(row.Key) {
					t.abandon()
					return nil, false, fmt.Errorf("%w: server %s sent key %s outside the expected order or range %s", ErrStream, t.server, tablets.FormatKey(row.Key), t.rng)
				}
				t.lastKey = row.Key
			}
			t.rows.stats.Batches++
			if len(rows) == 0 {
				continue
			}
			return rows, false, nil
		case *messages.ScanFinished:
			if t.accepted != 0 && m.GetAttempt() != t.accepted {
				continue // a loser finishing
			}
			ok := m.GetError() == messages.ErrorCode_ERROR_CODE_UNSPECIFIED
			if t.accepted == 0 && !ok {
				continue // the tablet actor retries failed attempts that sent nothing
			}
			if ok {
				if t.accepted == 0 {
					t.accepted = m.GetAttempt()
				}
				if m.GetBatches() != t.lastSeq {
					if err := t.resume(fmt.Sprintf("finished after %d batches, %d received", m.GetBatches(), t.lastSeq)); err != nil {
						return nil, false, err
					}
					continue
				}
				t.done(false)
				return nil, true, nil
			}
			switch m.GetError() {
			case messages.ErrorCode_ERROR_CODE_CORRUPT_BLOCK, messages.ErrorCode_ERROR_CODE_BAD_REQUEST, messages.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED:
				t.abandon()
				return nil, false, &ScanError{Code: m.GetError(), Message: m.GetErrorMessage()}
			}
			if err := t.resume(fmt.Sprintf("%s: %s", m.GetError(), m.GetErrorMessage())); err != nil {
				return nil, false, err
			}
		case *messages.ScanError:
			t.abandon()
			return nil, false, &ScanError{Code: m.GetCode(), Message: m.GetMessage(), Attempts: m.GetAttempts()}
		}
	}
}

func (t *tabletScan) cancelLoser(m *messages.RowBatch) {
	if t.cancelled[m.GetAttempt()] {
		return
	}
	t.cancelled[m.GetAttempt()] = true
	if p := m.GetServerPid(); p != nil {
		t.rows.c.send(actor.NewPID(p.Address, p.Id), &messages.Cancel{RequestId: t.reqID, Attempt: m.GetAttempt(), Reason: "another attempt delivered first"})
	}
}
