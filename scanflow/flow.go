// Package scanflow is the pure state machine of one scan request: which
// attempt to dispatch, when to escalate a busy or silent server, when to
// hedge, when the flow is over. The coordinator's tablet actor carries out
// its actions; the policy simulator (package policysim) drives the same
// code on a virtual clock. It imports only messages and selection.
package scanflow

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
)

// FlowConfig tunes ScanFlow.
type FlowConfig struct {
	// BusySlack is added to an attempt's busy timeout before the tablet
	// actor gives up on hearing from the server (the server itself answers
	// Busy at the busy timeout; the slack covers the network). Default 25ms.
	BusySlack time.Duration
	// StartStall: an attempt that started but delivered no data for this
	// long is treated as stalled, cancelled and retried elsewhere. Default 5s.
	StartStall time.Duration
	// NoServerRetry: while the profile's group has no server, ask again
	// this often (within timeToWaitForScanServers). Default 100ms.
	NoServerRetry time.Duration
	// MaxAttempts bounds the dispatches of one request (hedges included);
	// beyond it the client gets an error. Default 1000.
	MaxAttempts int
	// MaxFlowAge bounds every flow: it ends with DEADLINE_EXCEEDED at
	// the latest this long after its request arrived, whatever timeout
	// the request carries (none included). Default 1h.
	MaxFlowAge time.Duration
	// ProgressEvery: while no attempt has delivered data, the client is
	// sent a ScanProgress this often (it resends a request it hears
	// nothing about for its idle timeout). Default 1s.
	ProgressEvery time.Duration
	// StorageHosts: the flow fails with STORAGE (and the last storage
	// error's message) once attempts on this many distinct hosts answered
	// STORAGE without delivering data — the shared store is failing, not
	// one server — or once one server answered it twice (the policy came
	// back to it: no other server was left to try, or it is a one-server
	// group). A single storage error is retried, elsewhere if the policy
	// can. Default 3.
	StorageHosts int
	// ConfirmHosts: the flow fails with CORRUPT_BLOCK, BAD_REQUEST or
	// STALE_GENERATION once attempts on this many distinct hosts answered
	// that code without delivering data, or one server answered it twice
	// (as StorageHosts). A scan server's word alone never ends a flow: one
	// that lies about its storage costs a retry on another host, not the
	// client's scan. Default 2.
	ConfirmHosts int
}

// DefaultFlowConfig returns the documented defaults.
func DefaultFlowConfig() FlowConfig {
	return FlowConfig{BusySlack: 25 * time.Millisecond, StartStall: 5 * time.Second, NoServerRetry: 100 * time.Millisecond, MaxAttempts: 1000,
		MaxFlowAge: time.Hour, StorageHosts: 3, ConfirmHosts: 2, ProgressEvery: time.Second}
}

// Validate names the first bad field.
func (c FlowConfig) Validate() error {
	switch {
	case c.BusySlack < 0:
		return errors.New("coordinator: flow BusySlack must be >= 0")
	case c.StartStall <= 0:
		return errors.New("coordinator: flow StartStall must be > 0")
	case c.NoServerRetry <= 0:
		return errors.New("coordinator: flow NoServerRetry must be > 0")
	case c.MaxAttempts < 1:
		return errors.New("coordinator: flow MaxAttempts must be >= 1")
	case c.MaxFlowAge <= 0:
		return errors.New("coordinator: flow MaxFlowAge must be > 0")
	case c.ProgressEvery <= 0:
		return errors.New("coordinator: flow ProgressEvery must be > 0")
	case c.StorageHosts < 1:
		return fmt.Errorf("coordinator: flow StorageHosts %d must be >= 1", c.StorageHosts)
	case c.ConfirmHosts < 1:
		return fmt.Errorf("coordinator: flow ConfirmHosts %d must be >= 1", c.ConfirmHosts)
	}
	return nil
}

// TimerKind names a ScanFlow timer.
type TimerKind uint8

const (
	// TimerDispatch: an attempt's error-backoff delay is over; send it.
	TimerDispatch TimerKind = iota + 1
	// TimerBusy: the busy timeout (+ slack) of an attempt passed.
	TimerBusy
	// TimerHedge: hedge delay of an attempt passed.
	TimerHedge
	// TimerData: data timeout of an attempt passed.
	TimerData
	// TimerStall: a started attempt delivered no data for StartStall.
	TimerStall
	// TimerRetry: ask again for a server (none was available).
	TimerRetry
	// TimerDeadline: the flow's deadline (the request's, else MaxFlowAge)
	// passed.
	TimerDeadline
)

// ActionKind names what the actor must do.
type ActionKind uint8

const (
	// ActDispatch: send StartScan for Attempt and count it in flight.
	ActDispatch ActionKind = iota + 1
	// ActCancel: send Cancel for Attempt to its server, with
	// unless_streaming = Action.UnlessStreaming.
	ActCancel
	// ActAccount: the attempt ended (Result); close its in-flight count.
	ActAccount
	// ActSlowdown: count a slowdown for the attempt's server.
	ActSlowdown
	// ActLatency: the attempt delivered first data after Latency.
	ActLatency
	// ActTimer: start timer Timer for Attempt after After.
	ActTimer
	// ActFail: send Error to the client; the flow is over.
	ActFail
	// ActComplete: the flow is over; forget it and stop its timers. It is
	// always the last action of a flow.
	ActComplete
	// ActTimeoutSignal: publish a timeout signal for the attempt's server.
	ActTimeoutSignal
)

// Action is one effect ScanFlow asks its actor to carry out.
type Action struct {
	Kind    ActionKind
	Attempt *FlowAttempt
	Result  selection.AttemptResult
	Timer   TimerKind
	After   time.Duration
	Latency time.Duration
	Error   *messages.ScanError
	// UnlessStreaming (ActCancel): the server must ignore the cancel if the
	// attempt already sent a RowBatch. The flow cancels this way whenever
	// the client may be reading the attempt's stream, so that the client
	// alone decides which stream wins.
	UnlessStreaming bool
}

// FlowAttempt is one dispatch of the flow's scan.
type FlowAttempt struct {
	N         uint32
	Sel       selection.Attempt
	Decision  selection.Decision
	sent      bool
	closed    bool
	started   bool
	firstData bool
	slow      bool
	// softCancelled: told to stop unless it streams (another attempt
	// delivered data first); if it then ends without news it was cancelled,
	// not timed out or stalled.
	softCancelled bool
}

// live: dispatched (or about to be) and not yet ended.
func (a *FlowAttempt) live() bool { return !a.closed && a.Sel.End.IsZero() }

// Live reports whether the attempt has not ended.
func (a *FlowAttempt) Live() bool { return a.live() }

// FirstData reports whether the attempt is known to have delivered data.
func (a *FlowAttempt) FirstData() bool { return a.firstData }

// Sent reports whether the attempt was dispatched (StartScan sent).
func (a *FlowAttempt) Sent() bool { return a.sent }

// Picker asks the selection policy for the next server given this scan's
// history; hedge is true for an additional parallel dispatch.
type Picker func(now time.Time, history []selection.Attempt, hedge bool) (selection.Decision, error)

// ScanFlow is the pure state machine of one ScanRequest inside a tablet
// actor: dispatch per the policy's decision, escalate on busy and timeouts,
// hedge when the policy says so, retry errors, finish once. It never sends
// anything itself: every method returns the Actions to carry out. Not safe
// for concurrent use.
//
// The client decides which attempt's stream it reads (the first whose
// RowBatch it sees) and cancels the others itself. The flow follows: its
// winner is the first attempt known to have delivered data (ScanStarted
// with first_data, or a ScanFinished that reports batches); from then on
// it neither hedges nor retries, and it cancels the other live attempts
// only "unless streaming", so it can never kill the stream the client
// chose. Every flow ends, with exactly one ActComplete:
//   - on a successful ScanFinished of any attempt;
//   - on the client's ScanDone;
//   - when every attempt has ended and at least one delivered data (the
//     client has part of the stream and resumes it with a new request);
//   - when the servers' errors show the shared store is failing, not one
//     server lying or broken: STORAGE from servers on StorageHosts hosts,
//     or a bad request, a corrupt block or a generation deleted during the
//     scan (STALE_GENERATION) from servers on ConfirmHosts hosts (or one
//     server twice; FlowConfig): the client gets the error with the last
//     server's message;
//   - when no server can be found within timeToWaitForScanServers, or the
//     attempts run out (NO_SERVERS);
//   - at the deadline: the request's, else Start's now + MaxFlowAge
//     (DEADLINE_EXCEEDED).
//
// An attempt that has not delivered data and ends (busy, error, timeout,
// stall, server lost, cancelled by its server) is retried per the policy.
// Cancelled attempts are never results the host actor counts as errors.
//
// A server sends an attempt's news in as few messages as it can
// (messages.ScanStarted): the accept notice (ScanStarted without
// first_data) only when its first batch or its end did not follow within
// AcceptNoticeDelay, no ScanStarted{first_data} when the first batch was
// also the last. So ScanStarted{first_data} alone means started, and a
// ScanFinished alone means started and, with batches, first data (whose
// latency it then records). The busy timer is unaffected: the server
// answers within the busy timeout, and the notice is at most
// AcceptNoticeDelay later than the start, far inside BusySlack.
type ScanFlow struct {
	Req          *messages.ScanRequest
	cfg          FlowConfig
	deadline     time.Time
	waitServers  time.Duration
	noServerFrom time.Time
	noServerErr  error
	attempts     []*FlowAttempt
	avoided      []selection.Attempt
	winner       uint32 // first attempt known to have delivered data
	base         uint32 // attempts are numbered from base+1 (SkipAttempts)
	done         bool
	// faults: per error code that ends a flow once confirmed (STORAGE,
	// CORRUPT_BLOCK, BAD_REQUEST, STALE_GENERATION), how often each server
	// answered it without delivering data and the hosts of those servers.
	faults map[messages.ErrorCode]*faultCount
}

// faultCount is what a flow saw of one error code.
type faultCount struct {
	servers map[selection.ServerID]int
	hosts   map[string]bool
	msg     string // the last message
}

// NewScanFlow starts a flow that ends at deadline (zero: MaxFlowAge after
// Start), on the coordinator's clock. avoid lists servers the client saw stall (they
// count as failed attempts). waitForServers is the profile's
// timeToWaitForScanServers.
func NewScanFlow(req *messages.ScanRequest, deadline time.Time, cfg FlowConfig, waitForServers time.Duration, avoid []selection.Attempt) *ScanFlow {
	return &ScanFlow{Req: req, cfg: cfg, waitServers: waitForServers, avoided: avoid, deadline: deadline}
}

// SkipAttempts numbers the flow's attempts from n+1, before Start: a
// request handed on by a tablet actor that failed had attempts 1..n on
// servers that may still hold them, and a server takes a StartScan
// whose request and attempt it holds for a duplicate.
func (f *ScanFlow) SkipAttempts(n uint32) { f.base = n }

// LastAttempt is the number of the flow's last attempt (0: none).
func (f *ScanFlow) LastAttempt() uint32 { return f.base + uint32(len(f.attempts)) }

// Done reports whether the flow is over.
func (f *ScanFlow) Done() bool { return f.done }

// Progress says what the flow waits for at now, for the client's
// ScanProgress: a server of the profile's group, or its live attempts
// that have not delivered data yet.
func (f *ScanFlow) Progress(now time.Time) string {
	if !f.noServerFrom.IsZero() && f.liveCount() == 0 {
		return "waiting for a server: " + f.noServerReason(now)
	}
	var b strings.Builder
	for _, a := range f.attempts {
		if !a.live() || !a.sent {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("waiting for data from")
		} else {
			b.WriteString(",")
		}
		state := "queued"
		if a.started {
			state = "started"
		}
		fmt.Fprintf(&b, " attempt %d on %s (%s %v)", a.N, a.Sel.Server, state, now.Sub(a.Sel.Start).Round(time.Millisecond))
	}
	if b.Len() == 0 {
		return fmt.Sprintf("choosing a server (%d attempts so far)", len(f.attempts))
	}
	return b.String()
}

// Deadline is the flow's deadline (zero before Start when the request has
// none).
func (f *ScanFlow) Deadline() time.Time { return f.deadline }

// Winner is the first attempt known to have delivered data (0: none yet).
func (f *ScanFlow) Winner() uint32 { return f.winner }

// Attempts returns the attempts so far (read only).
func (f *ScanFlow) Attempts() []*FlowAttempt { return f.attempts }

// Attempt returns attempt n, or nil.
func (f *ScanFlow) Attempt(n uint32) *FlowAttempt {
	if n <= f.base || int(n-f.base) > len(f.attempts) {
		return nil
	}
	return f.attempts[n-f.base-1]
}

// history is what the policy sees: avoided servers first, then attempts.
func (f *ScanFlow) history() []selection.Attempt {
	h := make([]selection.Attempt, 0, len(f.avoided)+len(f.attempts))
	h = append(h, f.avoided...)
	for _, a := range f.attempts {
		s := a.Sel
		if s.Result == selection.Pending && a.slow {
			s.Result = selection.Slow
		}
		h = append(h, s)
	}
	return h
}

func (f *ScanFlow) liveCount() int {
	n := 0
	for _, a := range f.attempts {
		if a.live() {
			n++
		}
	}
	return n
}

// Start arms the deadline timer and makes the first dispatch.
func (f *ScanFlow) Start(now time.Time, pick Picker) []Action {
	if f.deadline.IsZero() {
		f.deadline = now.Add(f.cfg.MaxFlowAge)
	}
	acts := make([]Action, 1, 6) // the deadline, then a dispatch and its three timers
	acts[0] = Action{Kind: ActTimer, Timer: TimerDeadline, After: max(f.deadline.Sub(now), 0)}
	return f.next(acts, now, pick, false)
}

// next appends to acts the actions of the next dispatch (or the flow's
// end when none can be made). The helpers below append to the acts they
// are given, so that a method's actions share one slice.
func (f *ScanFlow) next(acts []Action, now time.Time, pick Picker, hedge bool) []Action {
	if f.done {
		return acts
	}
	if !f.deadline.IsZero() && !now.Before(f.deadline) {
		return append(acts, f.failDeadline(now)...)
	}
	if len(f.attempts) >= f.cfg.MaxAttempts {
		if hedge {
			return acts
		}
		return append(acts, f.fail(now, messages.ErrorCode_ERROR_CODE_NO_SERVERS, fmt.Sprintf("gave up after %d attempts", len(f.attempts)))...)
	}
	dec, err := pick(now, f.history(), hedge)
	if err != nil {
		if hedge {
			return acts // the policy declines to hedge; the running attempt goes on
		}
		if errors.Is(err, selection.ErrNoServer) {
			if f.noServerFrom.IsZero() {
				f.noServerFrom = now
			}
			f.noServerErr = err
			if now.Sub(f.noServerFrom) < f.waitServers {
				return append(acts, Action{Kind: ActTimer, Timer: TimerRetry, After: f.cfg.NoServerRetry})
			}
			return append(acts, f.fail(now, messages.ErrorCode_ERROR_CODE_NO_SERVERS, f.noServerReason(now))...)
		}
		return append(acts, f.fail(now, messages.ErrorCode_ERROR_CODE_INTERNAL, "selection: "+err.Error())...)
	}
	f.noServerFrom, f.noServerErr = time.Time{}, nil
	a := &FlowAttempt{N: f.base + uint32(len(f.attempts)+1), Decision: dec,
		Sel: selection.Attempt{Server: dec.Server, Host: dec.Host, Result: selection.Pending, Start: now, PlanIndex: dec.PlanIndex, Hedge: hedge}}
	f.attempts = append(f.attempts, a)
	if dec.Delay > 0 {
		return append(acts, Action{Kind: ActTimer, Timer: TimerDispatch, Attempt: a, After: dec.Delay})
	}
	return f.send(acts, now, a)
}

func (f *ScanFlow) send(acts []Action, now time.Time, a *FlowAttempt) []Action {
	a.sent = true
	a.Sel.Start = now
	if acts == nil {
		acts = make([]Action, 0, 4)
	}
	acts = append(acts, Action{Kind: ActDispatch, Attempt: a})
	if bt := a.Decision.BusyTimeout; bt > 0 {
		acts = append(acts, Action{Kind: ActTimer, Timer: TimerBusy, Attempt: a, After: bt + f.cfg.BusySlack})
	}
	if d := a.Decision.HedgeDelay; d > 0 {
		acts = append(acts, Action{Kind: ActTimer, Timer: TimerHedge, Attempt: a, After: d})
	}
	if d := a.Decision.DataTimeout; d > 0 {
		acts = append(acts, Action{Kind: ActTimer, Timer: TimerData, Attempt: a, After: d})
	}
	return acts
}

// cancelMode says whether and how end tells the server to stop.
type cancelMode uint8

const (
	noCancel   cancelMode = iota
	softCancel            // Cancel{unless_streaming}
	hardCancel            // Cancel
)

// end marks a live attempt ended with result r.
func (f *ScanFlow) end(acts []Action, now time.Time, a *FlowAttempt, r selection.AttemptResult, cancel cancelMode) []Action {
	if a.closed {
		return acts
	}
	a.Sel.Result = r
	a.Sel.End = now
	a.closed = true
	if !a.sent {
		return acts
	}
	if cancel != noCancel {
		acts = append(acts, Action{Kind: ActCancel, Attempt: a, UnlessStreaming: cancel == softCancel})
	}
	return append(acts, Action{Kind: ActAccount, Attempt: a, Result: r})
}

// settle runs after an attempt ended: while others are live it waits; when
// none is and one delivered data the flow is over (the client resumes
// whatever it lacks); otherwise it dispatches again.
func (f *ScanFlow) settle(acts []Action, now time.Time, pick Picker) []Action {
	if f.done || f.liveCount() > 0 {
		return acts
	}
	if f.winner != 0 {
		f.done = true
		return append(acts, Action{Kind: ActComplete})
	}
	return f.next(acts, now, pick, false)
}

// delivered records that attempt a delivered data. The first such attempt
// becomes the winner: the other live attempts are asked to stop unless they
// stream (the client may have chosen one of them), and attempts still
// waiting for their dispatch are dropped.
func (f *ScanFlow) delivered(acts []Action, now time.Time, a *FlowAttempt) []Action {
	a.firstData = true
	if f.winner != 0 {
		return acts
	}
	f.winner = a.N
	for _, o := range f.attempts {
		if o == a || !o.live() {
			continue
		}
		if !o.sent {
			acts = f.end(acts, now, o, selection.Cancelled, noCancel) // appends nothing: o was never sent
			continue
		}
		if !o.softCancelled {
			o.softCancelled = true
			acts = append(acts, Action{Kind: ActCancel, Attempt: o, UnlessStreaming: true})
		}
	}
	return acts
}

// endStraggler ends a live attempt whose outcome no longer matters: the
// ones told to stop are cancelled; the others get result r.
func (f *ScanFlow) endStraggler(acts []Action, now time.Time, a *FlowAttempt, r selection.AttemptResult, cancel cancelMode) []Action {
	if a.softCancelled {
		return f.end(acts, now, a, selection.Cancelled, noCancel)
	}
	return f.end(acts, now, a, r, cancel)
}

// OnTimer handles a timer the flow asked for.
func (f *ScanFlow) OnTimer(now time.Time, kind TimerKind, n uint32, pick Picker) []Action {
	if f.done {
		return nil
	}
	a := f.Attempt(n)
	switch kind {
	case TimerDeadline:
		return f.failDeadline(now)
	case TimerRetry:
		return f.settle(nil, now, pick)
	}
	if a == nil || a.closed {
		return nil
	}
	switch kind {
	case TimerDispatch:
		if !a.sent {
			return f.send(nil, now, a)
		}
	case TimerBusy:
		if a.started || a.firstData {
			return nil
		}
		if a.softCancelled {
			// We told it to stop; its silence is not a timeout.
			return f.settle(f.end(nil, now, a, selection.Cancelled, noCancel), now, pick)
		}
		acts := f.end(make([]Action, 0, 8), now, a, selection.Timeout, softCancel)
		acts = append(acts, Action{Kind: ActTimeoutSignal, Attempt: a})
		return f.settle(acts, now, pick)
	case TimerHedge, TimerData:
		if f.winner != 0 || a.firstData || (kind == TimerHedge && a.started) || a.slow {
			return nil
		}
		// The policy sees the attempt as slow; it counts as a slowdown
		// only if a hedge is really sent (a declined hedge, e.g. budget
		// spent, must not tar a healthy server).
		a.slow = true
		acts := make([]Action, 1, 5)
		acts[0] = Action{Kind: ActSlowdown, Attempt: a}
		if acts = f.next(acts, now, pick, true); len(acts) == 1 {
			a.slow = false
			return nil
		}
		return acts
	case TimerStall:
		if a.firstData {
			return nil
		}
		acts := f.endStraggler(make([]Action, 0, 8), now, a, selection.Stalled, softCancel)
		return f.settle(acts, now, pick)
	}
	return nil
}

// OnStarted handles ScanStarted (firstData: the first batch was sent; the
// server then may have sent no notice without it, see ScanFlow).
func (f *ScanFlow) OnStarted(now time.Time, n uint32, firstData bool, queuedFor time.Duration) []Action {
	a := f.Attempt(n)
	if f.done || a == nil || !a.sent {
		return nil
	}
	var acts []Action
	if !a.started {
		a.started = true
		if !a.closed {
			a.Sel.Result = selection.Started
			if !firstData {
				acts = append(acts, Action{Kind: ActTimer, Timer: TimerStall, Attempt: a, After: f.cfg.StartStall})
			}
		}
	}
	if firstData && !a.firstData {
		if !a.closed {
			acts = append(acts, Action{Kind: ActLatency, Attempt: a, Latency: now.Sub(a.Sel.Start)})
		}
		acts = f.delivered(acts, now, a)
		if a.closed {
			// We had given up on it, yet the client reads its stream: no
			// retry is needed any more.
			// (A winner exists, so settle completes or waits; it never picks.)
			acts = f.settle(acts, now, nil)
		}
	}
	return acts
}

// OnBusy handles Busy.
func (f *ScanFlow) OnBusy(now time.Time, n uint32, pick Picker) []Action {
	a := f.Attempt(n)
	if f.done || a == nil || a.closed || a.started {
		return nil
	}
	acts := f.endStraggler(make([]Action, 0, 8), now, a, selection.Busy, noCancel)
	return f.settle(acts, now, pick)
}

// OnFinished handles ScanFinished from attempt n.
func (f *ScanFlow) OnFinished(now time.Time, m *messages.ScanFinished, pick Picker) []Action {
	a := f.Attempt(m.GetAttempt())
	if f.done || a == nil || !a.sent {
		return nil
	}
	code := m.GetError()
	acts := make([]Action, 0, 4)
	if code == messages.ErrorCode_ERROR_CODE_UNSPECIFIED && m.GetBatches() > 0 && !a.firstData && !a.closed {
		// The first batch was also the last: the server sent no
		// ScanStarted{first_data}, and this is the first-data news.
		acts = append(acts, Action{Kind: ActLatency, Attempt: a, Latency: now.Sub(a.Sel.Start)})
	}
	if (code == messages.ErrorCode_ERROR_CODE_UNSPECIFIED || m.GetBatches() > 0) && !a.firstData {
		acts = f.delivered(acts, now, a)
	}
	var confirmed string // why the flow fails with code
	if confirmedCode(code) && !a.firstData && f.winner == 0 {
		confirmed = f.fault(a, code, m.GetErrorMessage())
	}
	if code == messages.ErrorCode_ERROR_CODE_UNSPECIFIED {
		a.started = true
		acts = f.end(acts, now, a, selection.Started, noCancel)
		// Success closes the flow. A straggler may be the stream the
		// client reads (it saw that one's batch first): cancel it only
		// unless it streams.
		for _, o := range f.attempts {
			if o.live() {
				acts = f.end(acts, now, o, selection.Cancelled, softCancel)
			}
		}
		f.done = true
		return append(acts, Action{Kind: ActComplete})
	}
	if a.closed {
		// We had already given up on it (timeout, stall); what matters is
		// whether it delivered data, or showed the store failing.
		if f.winner != 0 {
			acts = f.settle(acts, now, pick)
		}
		if confirmed != "" {
			acts = append(acts, f.failConfirmed(now, code, confirmed)...)
		}
		return acts
	}
	switch code {
	case messages.ErrorCode_ERROR_CODE_CANCELLED:
		// Cancelled by the client (it chose another stream, or stopped
		// reading), by its ack timeout, or by a server shutting down: never
		// the server's fault.
		acts = f.end(acts, now, a, selection.Cancelled, noCancel)
	case messages.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED:
		// The request's own deadline, not the server's fault; next (via
		// settle) fails the flow if the deadline passed here too.
		acts = f.end(acts, now, a, selection.Cancelled, noCancel)
	case messages.ErrorCode_ERROR_CODE_STORAGE, messages.ErrorCode_ERROR_CODE_CORRUPT_BLOCK,
		messages.ErrorCode_ERROR_CODE_BAD_REQUEST, messages.ErrorCode_ERROR_CODE_STALE_GENERATION:
		// Retried elsewhere until servers on enough hosts agree (fault):
		// the answering server counts as failed meanwhile, so that a
		// server that forges them is avoided.
		acts = f.endStraggler(acts, now, a, selection.Error, noCancel)
		if confirmed != "" {
			return append(acts, f.failConfirmed(now, code, confirmed)...)
		}
	default:
		acts = f.endStraggler(acts, now, a, selection.Error, noCancel)
	}
	return f.settle(acts, now, pick)
}

// OnUnreachable: the chosen server could not be reached (not in the view).
func (f *ScanFlow) OnUnreachable(now time.Time, n uint32, pick Picker) []Action {
	a := f.Attempt(n)
	if f.done || a == nil || a.closed {
		return nil
	}
	return f.settle(f.end(nil, now, a, selection.Error, noCancel), now, pick)
}

// OnServerLost: attempt n's server left the load view (missed heartbeats
// while the coordinator ran, endpoint terminated, or restarted as a new
// incarnation) before the attempt ended; its ScanFinished will never come.
// The attempt ends as an error (cancelled if we had told it to stop); it
// is retried unless another attempt delivered data.
//
// When the lost attempt is the winner, it is retried too. Its server said
// the first batch went out, but the batch may have been lost with the
// server: it sends the batch to the client and ScanStarted to us on two
// connections, and a process stopped or killed between them leaves a
// client that never saw a row and would wait for its idle timeout (found
// by e2e TestRandomScansMatchGroundTruth). A client that has the batch
// takes no harm: it cancels the new attempt's stream ("another attempt
// delivered first"), whose ScanFinished then ends the flow, and resumes
// from its last key by itself.
func (f *ScanFlow) OnServerLost(now time.Time, n uint32, pick Picker) []Action {
	a := f.Attempt(n)
	if f.done || a == nil || a.closed || !a.sent {
		return nil
	}
	if a.N == f.winner {
		f.winner = 0
	}
	return f.settle(f.endStraggler(nil, now, a, selection.Error, noCancel), now, pick)
}

// OnDone handles the client's ScanDone: cancel whatever still runs.
// winner is the attempt whose stream the client read (ScanDone's
// winner_attempt). When the client got every row (not abandoned) that
// attempt's server has ended the scan already — the client finished on its
// final batch or its ScanFinished, sent as the scan ended — so it gets no
// Cancel (the ScanDone often overtakes that ScanFinished on its way here).
func (f *ScanFlow) OnDone(now time.Time, abandoned bool, winner uint32) []Action {
	if f.done {
		return nil
	}
	f.done = true
	var acts []Action
	for _, a := range f.attempts {
		if a.live() {
			r, cancel := selection.Cancelled, hardCancel
			if !abandoned && (a.N == f.winner || a.N == winner) {
				r = selection.Started
			}
			if !abandoned && a.N == winner {
				cancel = noCancel
			}
			acts = f.end(acts, now, a, r, cancel)
		}
	}
	return append(acts, Action{Kind: ActComplete})
}

// Abort ends the flow (sweep) with an error; its attempts are cancelled.
func (f *ScanFlow) Abort(now time.Time, code messages.ErrorCode, msg string) []Action {
	return f.failWith(now, code, msg, hardCancel)
}

// Leave ends the flow because its tablet actor stops (the coordinator
// leaves or shuts down): the client gets SHUTTING_DOWN and sends its
// request to another coordinator, and an attempt that already streams to
// the client goes on (Cancel{unless_streaming}): the rows flow from the
// scan server, not through the coordinator.
func (f *ScanFlow) Leave(now time.Time, msg string) []Action {
	return f.failWith(now, messages.ErrorCode_ERROR_CODE_SHUTTING_DOWN, msg, softCancel)
}

// Quit ends the flow without a word to the client, because the request
// is handed to another incarnation of the tablet actor or the client reads
// from an attempt that already streams: live attempts are told to stop
// unless they stream, and accounted as cancelled.
func (f *ScanFlow) Quit(now time.Time) []Action {
	if f.done {
		return nil
	}
	var acts []Action
	for _, a := range f.attempts {
		if a.live() {
			acts = f.end(acts, now, a, selection.Cancelled, softCancel)
		}
	}
	f.done = true
	return append(acts, Action{Kind: ActComplete})
}

func (f *ScanFlow) fail(now time.Time, code messages.ErrorCode, msg string) []Action {
	return f.failWith(now, code, msg, hardCancel)
}

func (f *ScanFlow) failWith(now time.Time, code messages.ErrorCode, msg string, cancel cancelMode) []Action {
	if f.done {
		return nil
	}
	var acts []Action
	for _, a := range f.attempts {
		if a.live() {
			acts = f.end(acts, now, a, selection.Cancelled, cancel)
		}
	}
	f.done = true
	t := f.Req.GetTablet()
	e := &messages.ScanError{RequestId: f.Req.GetRequestId(), Code: code,
		Message: fmt.Sprintf("tablet %s/g%d/t%d: %s%s", t.GetTable(), t.GetGeneration(), t.GetIndex(), msg, f.describe())}
	for _, a := range f.attempts {
		e.Attempts = append(e.Attempts, &messages.AttemptInfo{Attempt: a.N, Server: string(a.Sel.Server), Result: WireResult(a.Sel.Result),
			DurationUs: a.Sel.End.Sub(a.Sel.Start).Microseconds(), PlanIndex: uint32(a.Sel.PlanIndex), Hedge: a.Sel.Hedge})
	}
	return append(acts, Action{Kind: ActFail, Error: e}, Action{Kind: ActComplete})
}

// confirmedCode reports whether a server's answer with code ends the
// flow only once servers on several hosts gave it (FlowConfig).
func confirmedCode(code messages.ErrorCode) bool {
	switch code {
	case messages.ErrorCode_ERROR_CODE_STORAGE, messages.ErrorCode_ERROR_CODE_CORRUPT_BLOCK,
		messages.ErrorCode_ERROR_CODE_BAD_REQUEST, messages.ErrorCode_ERROR_CODE_STALE_GENERATION:
		return true
	}
	return false
}

// fault records that attempt a answered code without data; it returns
// why the flow must fail with code ("" to retry).
func (f *ScanFlow) fault(a *FlowAttempt, code messages.ErrorCode, msg string) string {
	if f.faults == nil {
		f.faults = map[messages.ErrorCode]*faultCount{}
	}
	c := f.faults[code]
	if c == nil {
		c = &faultCount{servers: map[selection.ServerID]int{}, hosts: map[string]bool{}}
		f.faults[code] = c
	}
	c.servers[a.Sel.Server]++
	c.hosts[a.Sel.Host] = true
	c.msg = msg
	need, what := f.cfg.ConfirmHosts, "answered "+code.String()
	if code == messages.ErrorCode_ERROR_CODE_STORAGE {
		need, what = f.cfg.StorageHosts, "failed reading the block store"
	}
	switch {
	case len(c.hosts) >= need:
		return fmt.Sprintf("servers on %d hosts %s", len(c.hosts), what)
	case c.servers[a.Sel.Server] >= 2:
		return fmt.Sprintf("server %s %s twice (%d servers on %d hosts failed)", a.Sel.Server, what,
			len(c.servers), len(c.hosts))
	}
	return ""
}

// failConfirmed fails the flow with code: why, and the last message of a
// server that answered it.
func (f *ScanFlow) failConfirmed(now time.Time, code messages.ErrorCode, why string) []Action {
	return f.fail(now, code, why+"; last error: "+f.faults[code].msg)
}

// failDeadline fails the flow at its deadline; while it was waiting for a
// server the error says so.
func (f *ScanFlow) failDeadline(now time.Time) []Action {
	msg := "deadline exceeded"
	if !f.noServerFrom.IsZero() && f.liveCount() == 0 {
		msg += " waiting for a server: " + f.noServerReason(now)
	}
	return f.fail(now, messages.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED, msg)
}

// noServerReason is the picker's no-server error (the tablet actor names
// the profile and group) with the time waited.
func (f *ScanFlow) noServerReason(now time.Time) string {
	reason := "no scan server available"
	if f.noServerErr != nil {
		reason = f.noServerErr.Error()
	}
	return fmt.Sprintf("%s (waited %v, timeToWaitForScanServers %v)", reason, now.Sub(f.noServerFrom).Round(time.Millisecond),
		selection.FormatDuration(f.waitServers))
}

func (f *ScanFlow) describe() string {
	if len(f.attempts) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(" (attempts:")
	for i, a := range f.attempts {
		if i == 8 {
			fmt.Fprintf(&b, " ... %d more", len(f.attempts)-i)
			break
		}
		fmt.Fprintf(&b, " %s=%s", a.Sel.Server, a.Sel.Result)
	}
	b.WriteString(")")
	return b.String()
}

// resultPairs maps selection's attempt results to the wire enum, both ways.
var resultPairs = [...]struct {
	sel  selection.AttemptResult
	wire messages.AttemptResult
}{
	{selection.Pending, messages.AttemptResult_ATTEMPT_RESULT_PENDING},
	{selection.Started, messages.AttemptResult_ATTEMPT_RESULT_STARTED},
	{selection.Busy, messages.AttemptResult_ATTEMPT_RESULT_BUSY},
	{selection.Error, messages.AttemptResult_ATTEMPT_RESULT_ERROR},
	{selection.Timeout, messages.AttemptResult_ATTEMPT_RESULT_TIMEOUT},
	{selection.Slow, messages.AttemptResult_ATTEMPT_RESULT_SLOW},
	{selection.Cancelled, messages.AttemptResult_ATTEMPT_RESULT_CANCELLED},
	{selection.Stalled, messages.AttemptResult_ATTEMPT_RESULT_STALLED},
}

// WireResult converts an attempt result to the wire enum.
func WireResult(r selection.AttemptResult) messages.AttemptResult {
	for _, p := range resultPairs {
		if p.sel == r {
			return p.wire
		}
	}
	return messages.AttemptResult_ATTEMPT_RESULT_UNSPECIFIED
}

// SelectionResult converts a wire attempt result (0 if unknown).
func SelectionResult(r messages.AttemptResult) selection.AttemptResult {
	for _, p := range resultPairs {
		if p.wire == r {
			return p.sel
		}
	}
	return 0
}
