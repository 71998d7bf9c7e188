package tabletstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
)

// TabletStream is the client's side of the scan protocol for one tablet's
// piece of a range, as a pure state machine in the style of the
// coordinator's ScanFlow: it takes `now` and the messages that arrive and
// returns the actions to carry out. It does no IO, reads no clock, starts
// no goroutine; request ids come from StreamConfig.RequestID. The
// iterator behind client.Client's Scan is a thin shell around it; the
// protocol simulation harness (internal/sim) drives it directly.
//
// The rules it implements (docs/protocol.md):
//
//   - One request at a time. Start sends a ScanRequest for the tablet's
//     range to a coordinator; a resume sends another, with a new request
//     id, resume_after = the last key yielded, and the servers to avoid.
//   - The first RowBatch seen decides the winner: its attempt is accepted,
//     every other attempt of the request that sends a RowBatch gets a
//     Cancel straight to its server, and ScanFinished or errors of losers
//     are ignored. A request given up (resumed, sent elsewhere, or the
//     caller stopped reading) gets a ScanDone marked abandoned naming the
//     winner; a request that ends with its winner's ScanFinished needs
//     none (finish).
//   - With StreamConfig.Verify, rows are also checked against the block
//     roots of the table's metadata (verify.go): a row is yielded once a
//     block proof covers it, and the stream is complete only once the
//     proofs show its ends; any failure is handled as a mismatch below.
//     No error a scan server sends ends the stream: it resumes elsewhere,
//     and only the coordinator's ScanError fails it.
//   - Every batch is verified before its rows are yielded: its seq follows
//     the previous one, and its cumulative row_count and checksum
//     (tablets.RowDigest) equal what the client computed over the rows of
//     the attempt so far (with Verify the count only: the proofs check
//     the rows' bytes, and a batch that fails them is handled as a
//     mismatch). A mismatch — a lost, repeated or altered row —
//     resumes after the last yielded key, avoiding that server; the
//     batch's rows are never yielded. ScanFinished of the winner must
//     match the same totals, else the stream resumes. The last batch may
//     carry the attempt's ScanFinished (RowBatch.finished): it must agree
//     with the batch, which is then not acknowledged, and the tablet is
//     done.
//   - A winner that goes quiet for StallTimeout is resumed elsewhere; a
//     request that has had no data and heard nothing (no rows, no
//     ScanProgress) for IdleTimeout is sent again to another coordinator,
//     avoiding the silent one.
//   - When the coordinator a request went to is lost before any data
//     arrived, the request is sent again (new id) to the next coordinator
//     that is up, or to the same one once it is back; a stream already
//     flowing from a scan server continues. If no coordinator is up for
//     CoordinatorWait, the stream fails with an error wrapping
//     ErrNoCoordinator that names the lost coordinator.
//   - Every request carries a deadline: StreamConfig.Deadline, or now +
//     MaxRequestTime when the scan has none. The stream fails when
//     Deadline passes.
//
// A TabletStream is not safe for concurrent use.
type TabletStream struct {
	cfg    StreamConfig
	ref    *messages.TabletRef
	rng    tablets.Range
	coords []coordState

	state   streamState
	lastKey []byte // last yielded key (the stream's own copy)
	rows    uint64 // rows yielded
	resumes int
	avoid   []string
	stats   StreamStats
	req     *streamRequest
	// cancelled: attempts of this stream's requests already sent a Cancel.
	cancelled map[attemptKey]bool

	// after OVERLOADED answers: how many in a row, when to send again and
	// to whom.
	overloaded int
	retryAt    time.Time
	retryTo    string

	// while waiting for a coordinator
	waitSince time.Time
	waitAddr  string
	waitWhy   string
}

// StreamConfig is what a TabletStream needs from the client and the scan.
type StreamConfig struct {
	// Client: where scan servers send RowBatch, ScanFinished and ScanError.
	Client *messages.Pid
	// BatchRows, BatchBytes, Window, Hints go into every ScanRequest (0 =
	// server default).
	BatchRows  uint32
	BatchBytes uint32
	Window     uint32
	Hints      map[string]string
	// Limit: rows wanted from this tablet; 0 = all.
	Limit uint64
	// CountOnly: the caller wants the number of rows, not all of them
	// (ScanRequest.count_only; never with Limit): with Verify, the rows
	// of whole blocks the server proves by count are not sent, and
	// ActYield carries their number in Counted.
	CountOnly bool
	// Deadline of the scan; zero = none (each request then carries now +
	// MaxRequestTime).
	Deadline       time.Time
	MaxRequestTime time.Duration
	// StallTimeout, IdleTimeout, CoordinatorWait, MaxResumes: see client.Config.
	StallTimeout    time.Duration
	IdleTimeout     time.Duration
	CoordinatorWait time.Duration
	MaxResumes      int
	// Coordinators: actor addresses in order of preference; Lost: those
	// known lost when the stream starts, with why.
	Coordinators []string
	Lost         map[string]string
	// ByOwner: the coordinators form one cluster; a request goes to the
	// tablet's owner among those up (tablets.Owner over their addresses,
	// as the coordinators place tablet actors), so it needs no forwarding.
	// Otherwise the first one up in list order.
	ByOwner bool
	// RequestID returns a new unique request id.
	RequestID func() string
	// Jitter returns a random duration in [d/2, d] for a back-off of d
	// (nil: d itself).
	Jitter func(d time.Duration) time.Duration
	// Verify: a row is yielded only once a block proof ties it to Roots,
	// the block roots of the tablet's files in block order, and a stream
	// ends only once they show that no row is missing (verify.go); a
	// failed check is a broken stream. Off for tables without digests.
	Verify bool
	Roots  []tablets.Digest
	// KeepProofs: with Verify, each ActYield carries the block proofs
	// that proved its rows (Proofs, Restart), and proofs that prove no
	// row (an empty range's) are yielded too, so that the caller can
	// forward them to a client that verifies.
	KeepProofs bool
	// Leaves, with Verify: leaf hashes of row chunks proven before, by
	// this stream or others, that spare its verifier a proof's inner
	// hashes, and where it keeps those it proves (nil: none).
	Leaves *ProvenLeaves
	// Slabs, when set, returns an empty slab (length 0) with room for at
	// least n rows, whose array nothing else uses: a batch's rows are
	// decoded into it, and an ActYield's Rows use it or an array of
	// their own, never one another yield's rows use. The caller may so
	// recycle a yield's Rows once it is done with them. nil: a new slab
	// per batch.
	Slabs func(n int) []tablets.Entry
}

// Back-off after a coordinator answers OVERLOADED: the request is sent
// again after overloadBackoff, doubling up to overloadBackoffMax (each
// jittered), at most maxOverloaded times in a row; the next OVERLOADED
// answer fails the stream with it.
const (
	overloadBackoff    = 50 * time.Millisecond
	overloadBackoffMax = 2 * time.Second
	maxOverloaded      = 8
)

// StreamStats counts what one TabletStream did.
type StreamStats struct {
	Requests int // ScanRequests sent (resumes and coordinator re-sends included)
	Resumes  int // resumes after a broken stream
	Resends  int // requests sent again because their coordinator was lost
	Batches  int // batches verified and accepted
	Rows     uint64
	Counted  uint64 // rows proven by count (CountOnly), not received
	Rejected int    // batches refused by verification (never yielded)
}

// StreamActionKind says what a StreamAction asks the shell to do.
type StreamActionKind int

// The actions of a TabletStream.
const (
	// ActSendRequest: send Msg (*messages.ScanRequest) to the router of
	// Coordinator. Msg.RequestId is new: its replies belong to this stream.
	ActSendRequest StreamActionKind = iota + 1
	// ActSendDone: send Msg (*messages.ScanDone) to the router of Coordinator.
	ActSendDone
	// ActSendCancel: send Msg (*messages.Cancel) to the scan server Server.
	ActSendCancel
	// ActSendAck: send Msg (*messages.BatchAck) to the scan server Server.
	ActSendAck
	// ActYield: Rows are verified rows, in key order, to hand to the
	// caller, and Counted rows of the range before them (CountOnly) were
	// proven by count.
	ActYield
	// ActFinish: the tablet is done; every row was yielded.
	ActFinish
	// ActFail: the stream failed with Err; it sent what it had to.
	ActFail
	// ActCoordinatorSilent: a request to Coordinator (or forwarded to it)
	// heard nothing for IdleTimeout; Err says so. The stream has moved on;
	// its runner tells the client's other streams, whose requests to the
	// silent coordinator would wait out IdleTimeout each.
	ActCoordinatorSilent
)

func (k StreamActionKind) String() string {
	switch k {
	case ActSendRequest:
		return "send-request"
	case ActSendDone:
		return "send-done"
	case ActSendCancel:
		return "send-cancel"
	case ActSendAck:
		return "send-ack"
	case ActYield:
		return "yield"
	case ActFinish:
		return "finish"
	case ActFail:
		return "fail"
	case ActCoordinatorSilent:
		return "coordinator-silent"
	}
	return fmt.Sprintf("action(%d)", int(k))
}

// StreamAction is one thing for the shell to do, in order.
type StreamAction struct {
	Kind        StreamActionKind
	Coordinator string          // ActSendRequest, ActSendDone
	Server      *messages.Pid   // ActSendCancel, ActSendAck
	Msg         proto.Message   // the message to send
	Rows        []tablets.Entry // ActYield: they alias the batch received
	Counted     uint64          // ActYield: rows proven by count
	// Proofs (ActYield, StreamConfig.KeepProofs): the block proofs that
	// proved Rows, exactly those rows; Restart: the first yield of a
	// request, whose proofs check from a new verifier (the request's
	// lower bound: after the last row yielded before).
	Proofs  []*messages.BlockProof
	Restart bool
	Err     error
}

func (a StreamAction) String() string {
	switch a.Kind {
	case ActSendRequest, ActSendDone:
		return fmt.Sprintf("%s to %s: %v", a.Kind, a.Coordinator, a.Msg)
	case ActSendCancel, ActSendAck:
		return fmt.Sprintf("%s to %s/%s: %v", a.Kind, a.Server.GetAddress(), a.Server.GetId(), a.Msg)
	case ActYield:
		if a.Counted > 0 {
			return fmt.Sprintf("yield %d rows, %d counted", len(a.Rows), a.Counted)
		}
		return fmt.Sprintf("yield %d rows", len(a.Rows))
	case ActFail:
		return fmt.Sprintf("fail: %v", a.Err)
	case ActCoordinatorSilent:
		return fmt.Sprintf("%s %s: %v", a.Kind, a.Coordinator, a.Err)
	}
	return a.Kind.String()
}

type streamState int

const (
	stateNew     streamState = iota
	stateRunning             // a request is out
	stateWaiting             // no coordinator is up
	stateBackoff             // a coordinator answered OVERLOADED; retry at retryAt
	stateDone                // finished, failed or abandoned
)

type coordState struct {
	addr string
	lost bool
	why  string
}

type attemptKey struct {
	id      string
	attempt uint32
}

// streamRequest is the request in flight.
type streamRequest struct {
	id        string
	coord     string
	coordLost bool // its coordinator was lost since it was sent
	// owner: the coordinator that serves the request when the router
	// forwarded it (ScanRouted); "" = coord.
	owner  string
	sentAt time.Time
	// heard: when a message about the request last arrived (sentAt at
	// first); progress: what its coordinator last said it waits for.
	heard     time.Time
	progress  string
	accepted  uint32 // the winning attempt; 0 = none yet
	server    string
	serverPID *messages.Pid
	lastSeq   uint64
	ackedSeq  uint64            // the last seq acknowledged
	received  uint64            // rows received from the accepted attempt
	digest    tablets.RowDigest // their checksum; not computed when verify is set
	lastData  time.Time
	verify    *verifier // nil: StreamConfig.Verify is off
	yielded   bool      // an ActYield of this request was returned
}

// NewTabletStream returns the stream for rng (already clipped to the
// tablet ref). The config is copied; nothing is sent until Start.
func NewTabletStream(cfg StreamConfig, ref *messages.TabletRef, rng tablets.Range) *TabletStream {
	s := &TabletStream{cfg: cfg, ref: ref, rng: rng, cancelled: map[attemptKey]bool{}}
	for _, a := range cfg.Coordinators {
		if a == "" || slices.ContainsFunc(s.coords, func(c coordState) bool { return c.addr == a }) {
			continue
		}
		why, lost := cfg.Lost[a]
		s.coords = append(s.coords, coordState{addr: a, lost: lost, why: why})
	}
	return s
}

// Stats returns what the stream did so far.
func (s *TabletStream) Stats() StreamStats { return s.stats }

// Done reports whether the stream finished, failed or was abandoned.
func (s *TabletStream) Done() bool { return s.state == stateDone }

// RequestID is the id of the request in flight ("" if none).
func (s *TabletStream) RequestID() string {
	if s.req == nil {
		return ""
	}
	return s.req.id
}

// Waiting describes what the stream waits for, for error messages.
func (s *TabletStream) Waiting() string {
	switch {
	case s.state == stateWaiting:
		return fmt.Sprintf("waiting for a coordinator (%s was lost: %s)", s.waitAddr, s.waitWhy)
	case s.state == stateBackoff:
		return fmt.Sprintf("backing off after %d OVERLOADED answers (last from %s)", s.overloaded, s.retryTo)
	case s.state != stateRunning || s.req == nil:
		return "not running"
	case s.req.accepted == 0 && s.req.progress != "":
		return fmt.Sprintf("waiting for the first rows of a request sent to coordinator %s, which is %s", s.req.coord, s.req.progress)
	case s.req.accepted == 0:
		return fmt.Sprintf("waiting for the first rows of a request sent to coordinator %s", s.req.coord)
	default:
		return fmt.Sprintf("reading from server %s after key %s", s.req.server, keyOrStart(s.lastKey))
	}
}

// Ref is the tablet the stream reads.
func (s *TabletStream) Ref() *messages.TabletRef { return s.ref }

// TabletName names the stream's tablet in errors.
func (s *TabletStream) TabletName() string {
	return fmt.Sprintf("%s/g%d/t%d", s.ref.GetTable(), s.ref.GetGeneration(), s.ref.GetIndex())
}

// Start sends the first request.
func (s *TabletStream) Start(now time.Time) []StreamAction {
	if s.state != stateNew {
		return nil
	}
	s.state = stateRunning
	var acts []StreamAction
	if s.expired(now) {
		return s.failDeadline(acts, "before the first request", false)
	}
	return s.send(now, acts, "", "")
}

// NextWakeup is when OnTimer must next be called; zero when no timer is
// needed (the stream is done or not started).
func (s *TabletStream) NextWakeup() time.Time {
	var t time.Time
	earliest := func(c time.Time) {
		if !c.IsZero() && (t.IsZero() || c.Before(t)) {
			t = c
		}
	}
	switch s.state {
	case stateNew, stateDone:
		return time.Time{}
	case stateWaiting:
		earliest(s.waitSince.Add(s.cfg.CoordinatorWait))
	case stateBackoff:
		earliest(s.retryAt)
	case stateRunning:
		if s.req.accepted != 0 {
			earliest(s.req.lastData.Add(s.cfg.StallTimeout))
		} else {
			earliest(s.req.heard.Add(s.cfg.IdleTimeout))
		}
	}
	earliest(s.cfg.Deadline)
	return t
}

// OnTimer applies the time rules: the scan deadline, the wait for a
// coordinator, the stall of a flowing stream, the idle request.
func (s *TabletStream) OnTimer(now time.Time) []StreamAction {
	if s.state == stateNew || s.state == stateDone {
		return nil
	}
	if s.expired(now) {
		w, unanswered := s.Waiting(), s.state == stateRunning && s.req != nil && s.req.accepted == 0
		return s.failDeadline(s.abandon(nil, "deadline passed"), w, unanswered)
	}
	switch s.state {
	case stateWaiting:
		if !now.Before(s.waitSince.Add(s.cfg.CoordinatorWait)) {
			return s.fail(nil, s.noCoordinatorErr())
		}
	case stateBackoff:
		if !now.Before(s.retryAt) {
			s.state = stateRunning
			return s.send(now, nil, s.retryTo, s.retryTo)
		}
	case stateRunning:
		r := s.req
		if r.accepted != 0 {
			if !now.Before(r.lastData.Add(s.cfg.StallTimeout)) {
				return s.resume(now, nil, fmt.Sprintf("no data for %v", s.cfg.StallTimeout), true)
			}
		} else if !now.Before(r.heard.Add(s.cfg.IdleTimeout)) {
			return s.onSilent(now)
		}
	}
	return nil
}

func (s *TabletStream) expired(now time.Time) bool {
	return !s.cfg.Deadline.IsZero() && !now.Before(s.cfg.Deadline)
}

// failDeadline fails the scan at its deadline. When the deadline passed
// while no coordinator had answered the request (not even accepted it),
// the error is ErrNoCoordinator as well as context.DeadlineExceeded: the
// coordinator was reached but nothing behind it answered, as when it
// forwarded the request to a member that died while NATS has no quorum
// to let the survivors see it leave.
// unanswered (read before the request is abandoned) says whether it was.
func (s *TabletStream) failDeadline(acts []StreamAction, waiting string, unanswered bool) []StreamAction {
	if unanswered {
		return s.fail(acts, fmt.Errorf("%w answered for tablet %s before the deadline: %s: %w", ErrNoCoordinator, s.TabletName(), waiting, context.DeadlineExceeded))
	}
	return s.fail(acts, fmt.Errorf("client: tablet %s: deadline passed %s: %w", s.TabletName(), waiting, context.DeadlineExceeded))
}

func keyOrStart(k []byte) string {
	if len(k) == 0 {
		return "(start)"
	}
	return tablets.FormatKey(k)
}

// OnMessage handles a RowBatch, ScanFinished or ScanError addressed to
// one of this stream's requests (other messages are ignored).
func (s *TabletStream) OnMessage(now time.Time, msg any) []StreamAction {
	if s.state == stateDone || s.state == stateNew {
		if b, ok := msg.(*messages.RowBatch); ok && s.state == stateDone {
			return s.cancelAttempt(nil, b.GetRequestId(), b.GetAttempt(), b.GetServerPid(), "request already done")
		}
		return nil
	}
	if r := s.req; r != nil && requestOf(msg) == r.id {
		r.heard = now
	}
	switch m := msg.(type) {
	case *messages.ScanProgress:
		if s.req != nil && m.GetRequestId() == s.req.id {
			s.req.progress = m.GetState()
		}
		return nil
	case *messages.RowBatch:
		return s.onBatch(now, m)
	case *messages.ScanFinished:
		return s.onFinished(now, m)
	case *messages.ScanRouted:
		return s.onRouted(now, m)
	case *messages.ScanError:
		if s.req == nil || m.GetRequestId() != s.req.id {
			return nil // an old request's
		}
		if m.GetCode() == messages.ErrorCode_ERROR_CODE_SHUTTING_DOWN {
			// The coordinator serving the request stops (it leaves the
			// cluster or shuts down): as if it were lost.
			at := s.req.owner
			if at == "" {
				at = s.req.coord
			}
			return s.OnCoordinatorLost(now, at, "shutting down")
		}
		if m.GetCode() == messages.ErrorCode_ERROR_CODE_OVERLOADED && s.overloaded < maxOverloaded {
			// Nothing runs for the request: send it again later.
			s.overloaded++
			s.retryTo, s.req = s.req.coord, nil
			d := min(overloadBackoff<<(s.overloaded-1), overloadBackoffMax)
			if s.cfg.Jitter != nil {
				d = s.cfg.Jitter(d)
			}
			s.state, s.retryAt = stateBackoff, now.Add(d)
			return nil
		}
		acts := s.abandon(nil, "scan error")
		return s.fail(acts, &ScanError{Code: m.GetCode(), Message: m.GetMessage(), Attempts: m.GetAttempts()})
	}
	return nil
}

// requestOf is the request id a message is about ("" for others).
func requestOf(msg any) string {
	switch m := msg.(type) {
	case *messages.RowBatch:
		return m.GetRequestId()
	case *messages.ScanFinished:
		return m.GetRequestId()
	case *messages.ScanRouted:
		return m.GetRequestId()
	case *messages.ScanProgress:
		return m.GetRequestId()
	case *messages.ScanError:
		return m.GetRequestId()
	}
	return ""
}

// onSilent: the request in flight had no data and heard nothing for
// IdleTimeout. The coordinator holding it (the owner it was forwarded to,
// else the one it was sent to) counts as lost for this stream, and the
// request goes to the next one up; with none up the stream waits for one
// (CoordinatorWait), then fails naming them.
func (s *TabletStream) onSilent(now time.Time) []StreamAction {
	r := s.req
	silent := r.coord
	if r.owner != "" {
		silent = r.owner
	}
	why := fmt.Sprintf("no answer for tablet %s within %v", s.TabletName(), s.cfg.IdleTimeout)
	if i := s.coordIndex(silent); i >= 0 {
		s.coords[i].lost, s.coords[i].why = true, why
	} else {
		s.coords = append(s.coords, coordState{addr: silent, lost: true, why: why})
	}
	if silent == r.coord {
		r.coordLost = true
	}
	acts := s.abandon([]StreamAction{{Kind: ActCoordinatorSilent, Coordinator: silent, Err: errors.New(why)}}, "no answer")
	s.stats.Resends++
	return s.send(now, acts, "", silent)
}

func (s *TabletStream) onBatch(now time.Time, b *messages.RowBatch) []StreamAction {
	r := s.req
	if r == nil || b.GetRequestId() != r.id {
		// A straggler of an earlier request of this stream.
		return s.cancelAttempt(nil, b.GetRequestId(), b.GetAttempt(), b.GetServerPid(), "request was resumed")
	}
	if r.accepted == 0 {
		if b.GetAttempt() == 0 {
			return nil
		}
		// The first batch seen decides the winner.
		r.accepted, r.server, r.serverPID = b.GetAttempt(), b.GetServer(), b.GetServerPid()
		r.lastData = now
	}
	if b.GetAttempt() != r.accepted {
		return s.cancelAttempt(nil, r.id, b.GetAttempt(), b.GetServerPid(), "another attempt delivered first")
	}
	switch seq := b.GetSeq(); {
	case seq <= r.lastSeq:
		return nil // a duplicate: already verified and yielded
	case seq != r.lastSeq+1:
		return s.reject(now, fmt.Sprintf("batch %d after %d (a batch was lost)", seq, r.lastSeq))
	}
	fin := b.GetFinished()
	if fin != nil {
		if err := checkFinalBatch(b); err != nil {
			return s.reject(now, err.Error())
		}
	}
	// The batch's own row count sizes the slab, bounded as UnpackRows
	// bounds it: every packed row takes at least 2 bytes.
	hint := int(min(b.GetRowCount()-min(b.GetRowCount(), r.received), 1<<20))
	var rows []tablets.Entry
	var err error
	if s.cfg.Slabs != nil {
		rows, err = tablets.AppendBatchRows(s.cfg.Slabs(tablets.BatchRowsCap(b, hint)), b)
	} else {
		rows, err = tablets.BatchRows(b, hint)
	}
	if err != nil {
		return s.reject(now, err.Error())
	}
	packed := b.GetPackedRows()
	r.received += uint64(len(rows))
	switch {
	case r.verify != nil:
		// The proofs check every row's bytes: a changed, missing, extra or
		// reordered row fails them, and a batch that fails them is refused
		// below as a checksum mismatch is. So a verified stream does not
		// compute the checksum, which only catches transport faults.
		if len(packed) == 0 {
			for _, row := range rows {
				packed = tablets.AppendPackedRow(packed, row.Key, row.Value) // what the proofs hash
			}
		}
	case len(packed) > 0:
		r.digest.AddPacked(packed, len(rows)) // the bytes Add would hash, row by row
	default:
		for _, row := range rows {
			r.digest.Add(row.Key, row.Value)
		}
	}
	// A server that leaves the counts out (zero) fails this like any other
	// mismatch: an unverifiable batch is never yielded.
	if r.verify != nil && b.GetRowCount() != r.received {
		// No checksum to name: the stream does not compute it.
		return s.reject(now, fmt.Sprintf("batch %d: %d rows received, server counts %d", b.GetSeq(), r.received, b.GetRowCount()))
	}
	if r.verify == nil && (b.GetRowCount() != r.received || b.GetChecksum() != r.digest.Sum()) {
		return s.reject(now, fmt.Sprintf("batch %d: %d rows with checksum %016x received, server counts %d with %016x",
			b.GetSeq(), r.received, r.digest.Sum(), b.GetRowCount(), b.GetChecksum()))
	}
	// Keys strictly increasing and the first and last in the range: then
	// every key between them is in it too (a range is an interval).
	last := s.lastKey
	for i, row := range rows {
		if len(last) > 0 && bytes.Compare(row.Key, last) <= 0 || (i == 0 || i == len(rows)-1) && !s.rng.Contains(row.Key) {
			return s.reject(now, fmt.Sprintf("server %s sent key %s outside the expected order or range %s of tablet %s",
				r.server, tablets.FormatKey(row.Key), s.rng, s.TabletName()))
		}
		last = row.Key
	}
	if v := r.verify; v != nil {
		if rows, err = v.batch(packed, rows, b.GetProofs()); err == nil && fin != nil {
			err = v.finish()
		}
		if err != nil {
			return s.reject(now, fmt.Sprintf("batch %d from %s, tablet %s: %v", b.GetSeq(), r.server, s.TabletName(), err))
		}
		if last = s.lastKey; len(rows) > 0 {
			last = rows[len(rows)-1].Key
		}
	}
	var counted uint64
	if r.verify != nil {
		counted = r.verify.takeCounted()
	}
	r.lastSeq, r.lastData = b.GetSeq(), now
	s.overloaded = 0
	// The yielded rows belong to the caller, who may reuse their bytes:
	// the resume key is the stream's own copy.
	s.lastKey = append(s.lastKey[:0], last...)
	s.rows += uint64(len(rows))
	s.stats.Batches++
	s.stats.Rows += uint64(len(rows))
	s.stats.Counted += counted
	if fin != nil {
		// The last batch, carrying the attempt's ScanFinished (checked
		// above against the batch, whose counts matched ours): no ack,
		// the tablet is done.
		return append(s.yield(nil, rows, counted, b.GetProofs()), s.finish()...)
	}
	// Acks are cumulative: one for every AckEvery batches keeps the
	// server's window open with fewer messages and wake-ups. The first
	// batch is acknowledged at once: a server gives up on a client that
	// acknowledges nothing for a while (ScanServerConfig.FirstAckTimeout).
	var acts []StreamAction
	if seq := b.GetSeq(); seq == 1 || seq-r.ackedSeq >= uint64(AckEvery(s.cfg.Window)) {
		r.ackedSeq = b.GetSeq()
		acts = []StreamAction{{Kind: ActSendAck, Server: r.serverPID,
			Msg: &messages.BatchAck{RequestId: r.id, Attempt: r.accepted, Seq: b.GetSeq()}}}
	}
	return s.yield(acts, rows, counted, b.GetProofs())
}

// AckEvery is how many batches a stream with the given window (0 = the
// server's, unknown) acknowledges with one BatchAck: a quarter of the
// window, at least 1. A server holds at most window batches unacknowledged,
// so every batch it waits on is acknowledged once the client has it.
func AckEvery(window uint32) uint32 {
	return max(1, window/4)
}

// yield appends the ActYield of verified rows, if there is anything to
// yield: rows, counted rows, or (KeepProofs) proofs.
func (s *TabletStream) yield(acts []StreamAction, rows []tablets.Entry, counted uint64, proofs []*messages.BlockProof) []StreamAction {
	keep := s.cfg.KeepProofs && s.req.verify != nil
	if len(rows) == 0 && counted == 0 && (!keep || len(proofs) == 0) {
		return acts
	}
	a := StreamAction{Kind: ActYield, Rows: rows, Counted: counted}
	if keep {
		a.Proofs, a.Restart = proofs, !s.req.yielded
		s.req.yielded = true
	}
	return append(acts, a)
}

// checkFinalBatch checks the ScanFinished inside a last batch
// (RowBatch.finished) against the batch itself, naming the field that
// disagrees: it must be a success of the same request and attempt whose
// totals are the batch's (the batch's own counts are checked against the
// rows received as for any batch). A mismatch refuses the whole batch.
func checkFinalBatch(b *messages.RowBatch) error {
	f := b.GetFinished()
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: batch %d of %s/%d from %s: finished.%s", ErrStream, b.GetSeq(), b.GetRequestId(), b.GetAttempt(),
			b.GetServer(), fmt.Sprintf(format, a...))
	}
	switch {
	case f.GetRequestId() != b.GetRequestId():
		return bad("request_id %q is not the batch's", f.GetRequestId())
	case f.GetAttempt() != b.GetAttempt():
		return bad("attempt %d is not the batch's", f.GetAttempt())
	case f.GetError() != messages.ErrorCode_ERROR_CODE_UNSPECIFIED:
		return bad("error is %s (a final batch ends a successful scan)", f.GetError())
	case f.GetBatches() != b.GetSeq():
		return bad("batches %d is not the batch's seq", f.GetBatches())
	case f.GetRows() != b.GetRowCount():
		return bad("rows %d is not the batch's row_count %d", f.GetRows(), b.GetRowCount())
	case f.GetChecksum() != b.GetChecksum():
		return bad("checksum %016x is not the batch's %016x", f.GetChecksum(), b.GetChecksum())
	}
	return nil
}

// reject refuses the batch in hand: nothing of it is yielded and the
// stream resumes after the last yielded key, avoiding the server.
func (s *TabletStream) reject(now time.Time, why string) []StreamAction {
	s.stats.Rejected++
	return s.resume(now, nil, why, true)
}

func (s *TabletStream) onFinished(now time.Time, m *messages.ScanFinished) []StreamAction {
	r := s.req
	if r == nil || m.GetRequestId() != r.id {
		return nil
	}
	ok := m.GetError() == messages.ErrorCode_ERROR_CODE_UNSPECIFIED
	if r.accepted != 0 && m.GetAttempt() != r.accepted {
		return nil // a loser ending
	}
	if r.accepted == 0 {
		switch {
		case m.GetBatches() > 0:
			// It sent batches and none arrived: they were lost.
			r.server, r.serverPID = m.GetServer(), nil
			return s.resume(now, nil, fmt.Sprintf("attempt %d on %s ended (%s) after %d batches, none received",
				m.GetAttempt(), m.GetServer(), m.GetError(), m.GetBatches()), true)
		case !ok:
			return nil // the tablet actor retries attempts that sent nothing
		}
		// An empty piece: the attempt finished without a batch.
		r.accepted, r.server = m.GetAttempt(), m.GetServer()
	}
	if ok {
		if r.verify != nil && (m.GetBatches() != r.lastSeq || m.GetRows() != r.received) {
			return s.resume(now, nil, fmt.Sprintf("finished with %d batches, %d rows; received %d, %d",
				m.GetBatches(), m.GetRows(), r.lastSeq, r.received), true)
		}
		if r.verify == nil && (m.GetBatches() != r.lastSeq || m.GetRows() != r.received || m.GetChecksum() != r.digest.Sum()) {
			return s.resume(now, nil, fmt.Sprintf("finished with %d batches, %d rows, checksum %016x; received %d, %d, %016x",
				m.GetBatches(), m.GetRows(), m.GetChecksum(), r.lastSeq, r.received, r.digest.Sum()), true)
		}
		var acts []StreamAction
		if v := r.verify; v != nil {
			rows, err := v.batch(nil, nil, m.GetProofs())
			if err == nil {
				err = v.finish()
			}
			if err != nil {
				return s.reject(now, fmt.Sprintf("attempt %d on %s finished, tablet %s: %v", m.GetAttempt(), orUnknown(r.server), s.TabletName(), err))
			}
			counted := v.takeCounted()
			s.stats.Counted += counted
			if len(rows) > 0 {
				s.lastKey = append(s.lastKey[:0], rows[len(rows)-1].Key...)
				s.rows += uint64(len(rows))
				s.stats.Rows += uint64(len(rows))
			}
			acts = s.yield(acts, rows, counted, m.GetProofs())
		}
		return append(acts, s.finish()...)
	}
	// A scan server's error is its word alone: the stream resumes
	// elsewhere, and the coordinator, which retries such errors on other
	// hosts, answers a ScanError when they agree.
	return s.resume(now, nil, fmt.Sprintf("%s: %s", m.GetError(), m.GetErrorMessage()), true)
}

// OnCoordinatorLost tells the stream that the coordinator at addr is gone
// (endpoint terminated, restarted, or its lease gone). A
// request on it that has no data yet is sent again elsewhere; a flowing
// stream continues.
func (s *TabletStream) OnCoordinatorLost(now time.Time, addr, why string) []StreamAction {
	i := s.coordIndex(addr)
	if i < 0 {
		s.coords = append(s.coords, coordState{addr: addr})
		i = len(s.coords) - 1
	}
	s.coords[i].lost, s.coords[i].why = true, why
	if s.state != stateRunning || (s.req.coord != addr && s.req.owner != addr) {
		return nil
	}
	if s.req.coord == addr {
		s.req.coordLost = true
	}
	if s.req.accepted != 0 {
		return nil // the data flows from a scan server, not through the coordinator
	}
	acts := s.abandon(nil, "coordinator lost")
	s.stats.Resends++
	return s.send(now, acts, "", addr)
}

// onRouted: the router forwarded the request to the tablet's owner. If
// that coordinator is already known lost and no data flows, the request
// is sent again (the router's view lags ours; the new request names the
// lost coordinators so that it is not forwarded there again).
func (s *TabletStream) onRouted(now time.Time, m *messages.ScanRouted) []StreamAction {
	r := s.req
	if r == nil || m.GetRequestId() != r.id || m.GetOwner() == "" {
		return nil
	}
	r.owner = m.GetOwner()
	if r.accepted != 0 || !s.isLost(r.owner) {
		return nil
	}
	r.coordLost = r.coordLost || s.isLost(r.coord)
	acts := s.abandon(nil, "owner "+r.owner+" lost")
	s.stats.Resends++
	return s.send(now, acts, "", "")
}

// OnCoordinatorUp tells the stream that the coordinator at addr is (back)
// up; a stream waiting for one sends its request there.
func (s *TabletStream) OnCoordinatorUp(now time.Time, addr string) []StreamAction {
	i := s.coordIndex(addr)
	if i < 0 {
		s.coords = append(s.coords, coordState{addr: addr})
	} else {
		s.coords[i].lost, s.coords[i].why = false, ""
	}
	if s.state != stateWaiting {
		return nil
	}
	if s.expired(now) {
		return s.failDeadline(nil, s.Waiting(), false)
	}
	s.state = stateRunning
	return s.send(now, nil, addr, "")
}

// Abandon stops the stream early (the caller stopped reading): the
// winner's server gets a Cancel and the coordinator a ScanDone.
func (s *TabletStream) Abandon(now time.Time) []StreamAction {
	if s.state == stateDone {
		return nil
	}
	acts := s.abandon(nil, "client stopped reading")
	s.state = stateDone
	return acts
}

func (s *TabletStream) coordIndex(addr string) int {
	return slices.IndexFunc(s.coords, func(c coordState) bool { return c.addr == addr })
}

// pick chooses the coordinator for the next request: prefer if it is up,
// else the first that is up after `after` (in list order, wrapping; from
// the start when after is "").
func (s *TabletStream) pick(prefer, after string) (string, bool) {
	if i := s.coordIndex(prefer); i >= 0 && !s.coords[i].lost {
		return prefer, true
	}
	if s.cfg.ByOwner {
		up := make([]string, 0, len(s.coords))
		for _, c := range s.coords {
			if !c.lost {
				up = append(up, c.addr)
			}
		}
		o := tablets.Owner(up, tablets.Identity(s.ref.GetTable(), s.ref.GetGeneration(), s.ref.GetIndex()))
		return o, o != ""
	}
	n := len(s.coords)
	start := 0
	if i := s.coordIndex(after); i >= 0 {
		start = i + 1
	}
	for k := range n {
		if c := s.coords[(start+k)%n]; !c.lost {
			return c.addr, true
		}
	}
	return "", false
}

// send sends a new request for the rest of the tablet to a coordinator
// that is up (see pick), or starts waiting for one.
func (s *TabletStream) send(now time.Time, acts []StreamAction, prefer, after string) []StreamAction {
	if s.cfg.Limit > 0 && s.rows >= s.cfg.Limit {
		return s.finishNoRequest(acts)
	}
	addr, ok := s.pick(prefer, after)
	if !ok {
		if s.state != stateWaiting {
			s.state, s.waitSince = stateWaiting, now
			s.waitAddr, s.waitWhy = after, ""
			if i := s.coordIndex(after); i >= 0 {
				s.waitWhy = s.coords[i].why
			}
			if s.waitAddr == "" {
				for _, c := range s.coords {
					if c.lost {
						s.waitAddr, s.waitWhy = c.addr, c.why
						break
					}
				}
			}
		}
		s.req = nil
		return acts
	}
	s.state = stateRunning
	deadline := s.cfg.Deadline
	if deadline.IsZero() {
		deadline = now.Add(s.cfg.MaxRequestTime)
	}
	id := s.cfg.RequestID()
	req := &messages.ScanRequest{RequestId: id, Client: s.cfg.Client, Tablet: s.ref,
		Range: &messages.KeyRange{Start: s.rng.Start, End: s.rng.End}, ResumeAfter: bytes.Clone(s.lastKey),
		BatchRows: s.cfg.BatchRows, BatchBytes: s.cfg.BatchBytes, Hints: s.cfg.Hints, AvoidServers: slices.Clone(s.avoid), ResumeCount: uint32(s.resumes),
		Window: s.cfg.Window, TimeoutMs: wire.TimeoutMs(deadline.Sub(now)), AvoidCoordinators: s.lostCoordinators(),
		CountOnly: s.cfg.CountOnly && s.cfg.Verify && s.cfg.Limit == 0, ProofsChecked: s.cfg.Verify}
	if s.cfg.Limit > 0 {
		req.Limit = s.cfg.Limit - s.rows
	}
	s.req = &streamRequest{id: id, coord: addr, sentAt: now, heard: now}
	if s.cfg.Verify {
		s.req.verify = newVerifier(s.cfg.Roots, s.rng, s.lastKey, req.Limit)
		s.req.verify.leaves = s.cfg.Leaves
	}
	s.stats.Requests++
	return append(acts, StreamAction{Kind: ActSendRequest, Coordinator: addr, Msg: req})
}

// resume re-requests the rest of the tablet after the last yielded key.
func (s *TabletStream) resume(now time.Time, acts []StreamAction, why string, avoidServer bool) []StreamAction {
	r := s.req
	server, coord := r.server, r.coord
	if s.resumes >= s.cfg.MaxResumes {
		acts = s.abandon(acts, why)
		return s.fail(acts, &ScanError{Code: messages.ErrorCode_ERROR_CODE_RESUME_LIMIT,
			Message: fmt.Sprintf("tablet %s: stream broke %d times (last: %s on %s)", s.TabletName(), s.resumes+1, why, orUnknown(server))})
	}
	if avoidServer && server != "" && !slices.Contains(s.avoid, server) {
		s.avoid = append(s.avoid, server)
		if len(s.avoid) > 16 {
			s.avoid = s.avoid[len(s.avoid)-16:]
		}
	}
	acts = s.abandon(acts, why)
	s.resumes++
	s.stats.Resumes++
	// Stay on the same coordinator while it is up (its tablet actor knows
	// the servers' history); else the next one.
	return s.send(now, acts, coord, coord)
}

func orUnknown(s string) string {
	if s == "" {
		return "an unknown server"
	}
	return s
}

// abandon ends the request in flight: the winner's server gets a Cancel,
// the coordinator (unless lost) a ScanDone marked abandoned.
func (s *TabletStream) abandon(acts []StreamAction, why string) []StreamAction {
	r := s.req
	if r == nil {
		return acts
	}
	s.req = nil
	if r.accepted != 0 && r.serverPID != nil {
		acts = s.cancelAttempt(acts, r.id, r.accepted, r.serverPID, why)
	}
	if !r.coordLost && !s.isLost(r.coord) {
		acts = append(acts, StreamAction{Kind: ActSendDone, Coordinator: r.coord,
			Msg: &messages.ScanDone{RequestId: r.id, WinnerAttempt: r.accepted, Abandoned: true, Tablet: s.ref}})
	}
	return acts
}

// lostCoordinators lists the coordinators known lost (at most 16).
func (s *TabletStream) lostCoordinators() []string {
	var out []string
	for _, c := range s.coords {
		if c.lost && len(out) < 16 {
			out = append(out, c.addr)
		}
	}
	return out
}

func (s *TabletStream) isLost(addr string) bool {
	i := s.coordIndex(addr)
	return i >= 0 && s.coords[i].lost
}

func (s *TabletStream) cancelAttempt(acts []StreamAction, id string, attempt uint32, pid *messages.Pid, why string) []StreamAction {
	k := attemptKey{id, attempt}
	if pid == nil || s.cancelled[k] {
		return acts
	}
	s.cancelled[k] = true
	return append(acts, StreamAction{Kind: ActSendCancel, Server: pid, Msg: &messages.Cancel{RequestId: id, Attempt: attempt, Reason: why}})
}

// finish ends the stream on its winner's successful ScanFinished (alone or
// inside the last batch). The scan server sends the same ScanFinished to
// the tablet actor, and a successful ScanFinished of any attempt ends the
// flow there (scanflow.ScanFlow.OnFinished), cancelling any other attempt
// unless it streams; a loser that streamed to us was cancelled when its
// batch arrived. So a winner that sent at most one batch gets no
// ScanDone: should its ScanFinished be lost, the flow ends as for any
// lost server, or by the tablet actor's retry of an attempt that gave no
// first data. A winner that sent more batches told the tablet actor of
// its first data, after which only ScanFinished or ScanDone ends the flow
// before its deadline; it gets a ScanDone naming it.
func (s *TabletStream) finish() []StreamAction {
	r := s.req
	s.req = nil
	s.state = stateDone
	if r.lastSeq > 1 && !r.coordLost && !s.isLost(r.coord) {
		return []StreamAction{
			{Kind: ActSendDone, Coordinator: r.coord, Msg: &messages.ScanDone{RequestId: r.id, WinnerAttempt: r.accepted, Tablet: s.ref}},
			{Kind: ActFinish},
		}
	}
	return []StreamAction{{Kind: ActFinish}}
}

// finishNoRequest ends a stream whose limit is reached without asking again.
func (s *TabletStream) finishNoRequest(acts []StreamAction) []StreamAction {
	s.req = nil
	s.state = stateDone
	return append(acts, StreamAction{Kind: ActFinish})
}

func (s *TabletStream) fail(acts []StreamAction, err error) []StreamAction {
	s.req = nil
	s.state = stateDone
	return append(acts, StreamAction{Kind: ActFail, Err: err})
}

func (s *TabletStream) noCoordinatorErr() error {
	var others []string
	for _, c := range s.coords {
		if c.lost && c.addr != s.waitAddr {
			others = append(others, fmt.Sprintf("%s (%s)", c.addr, c.why))
		}
	}
	why := s.waitWhy
	if why == "" {
		why = "unreachable"
	}
	msg := fmt.Sprintf("coordinator %s was lost (%s) and no other answered within %v", s.waitAddr, why, s.cfg.CoordinatorWait)
	if len(s.coords) == 0 {
		msg = fmt.Sprintf("no coordinator known, none answered within %v", s.cfg.CoordinatorWait)
	}
	if len(others) > 0 {
		msg += "; also lost: " + strings.Join(others, ", ")
	}
	if len(s.coords) == 1 {
		msg += " (it was the only coordinator this client knew)"
	}
	return fmt.Errorf("%w: %s", ErrNoCoordinator, msg)
}
