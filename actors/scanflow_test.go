package actors

import (
	"errors"
	"testing"
	"time"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
)

// scripted returns a Picker that hands out servers in order and records
// what it was asked.
type scripted struct {
	servers []string
	decs    []selection.Decision // optional per-call overrides
	calls   []pickCall
	err     error
	hedgeOK bool
}

type pickCall struct {
	history []selection.Attempt
	hedge   bool
}

func (s *scripted) pick(now time.Time, h []selection.Attempt, hedge bool) (selection.Decision, error) {
	s.calls = append(s.calls, pickCall{history: append([]selection.Attempt(nil), h...), hedge: hedge})
	if s.err != nil {
		return selection.Decision{}, s.err
	}
	if hedge && !s.hedgeOK {
		return selection.Decision{}, selection.ErrNoHedge
	}
	i := len(s.calls) - 1
	if i < len(s.decs) {
		return s.decs[i], nil
	}
	srv := s.servers[i%len(s.servers)]
	return selection.Decision{Server: selection.ServerID(srv), Host: "h", BusyTimeout: 33 * time.Millisecond}, nil
}

type ledger struct {
	t          *testing.T
	dispatched map[uint32]bool
	accounted  map[uint32]selection.AttemptResult
	cancelled  map[uint32]bool
	fails      []*messages.ScanError
	complete   int
	timers     []Action
	slowdowns  int
	latencies  int
	signals    int
}

func newLedger(t *testing.T) *ledger {
	return &ledger{t: t, dispatched: map[uint32]bool{}, accounted: map[uint32]selection.AttemptResult{}, cancelled: map[uint32]bool{}}
}

func (l *ledger) apply(acts []Action) []Action {
	l.t.Helper()
	for _, a := range acts {
		switch a.Kind {
		case ActDispatch:
			if l.dispatched[a.Attempt.N] {
				l.t.Fatalf("attempt %d dispatched twice", a.Attempt.N)
			}
			l.dispatched[a.Attempt.N] = true
		case ActAccount:
			if _, ok := l.accounted[a.Attempt.N]; ok {
				l.t.Fatalf("attempt %d accounted twice", a.Attempt.N)
			}
			if !l.dispatched[a.Attempt.N] {
				l.t.Fatalf("attempt %d accounted but never dispatched", a.Attempt.N)
			}
			l.accounted[a.Attempt.N] = a.Result
		case ActCancel:
			l.cancelled[a.Attempt.N] = true
		case ActFail:
			l.fails = append(l.fails, a.Error)
		case ActComplete:
			l.complete++
		case ActTimer:
			l.timers = append(l.timers, a)
		case ActSlowdown:
			l.slowdowns++
		case ActLatency:
			l.latencies++
		case ActTimeoutSignal:
			l.signals++
		}
	}
	return acts
}

// balanced checks that every dispatched attempt was accounted exactly once.
func (l *ledger) balanced() {
	l.t.Helper()
	for n := range l.dispatched {
		if _, ok := l.accounted[n]; !ok {
			l.t.Fatalf("attempt %d dispatched but never accounted", n)
		}
	}
	if l.complete != 1 {
		t := l.t
		t.Fatalf("complete %d times, want 1", l.complete)
	}
}

func (l *ledger) timer(kind TimerKind, n uint32) bool {
	for _, a := range l.timers {
		if a.Timer == kind && (a.Attempt == nil && n == 0 || a.Attempt != nil && a.Attempt.N == n) {
			return true
		}
	}
	return false
}

func req() *messages.ScanRequest {
	return &messages.ScanRequest{RequestId: "r1", Tablet: &messages.TabletRef{Table: "t", Generation: 1}}
}

var t0 = time.Unix(10000, 0)

func ok(n uint32) *messages.ScanFinished { return &messages.ScanFinished{RequestId: "r1", Attempt: n} }

func TestFlowBusyEscalates(t *testing.T) {
	p := &scripted{servers: []string{"a", "b", "c"}}
	l := newLedger(t)
	f := NewScanFlow(req(), DefaultFlowConfig(), 0, nil)
	l.apply(f.Start(t0, p.pick))
	if !l.dispatched[1] || !l.timer(TimerBusy, 1) {
		t.Fatal("first attempt not dispatched with a busy timer")
	}
	l.apply(f.OnBusy(t0.Add(time.Millisecond), 1, p.pick))
	if l.accounted[1] != selection.Busy || !l.dispatched[2] {
		t.Fatalf("busy not escalated: %+v", l.accounted)
	}
	// The policy saw the busy attempt in the history.
	if h := p.calls[1].history; len(h) != 1 || h[0].Result != selection.Busy || h[0].Server != "a" {
		t.Fatalf("history %+v", h)
	}
	l.apply(f.OnStarted(t0.Add(2*time.Millisecond), 2, false, 0))
	l.apply(f.OnStarted(t0.Add(3*time.Millisecond), 2, true, 0))
	if l.latencies != 1 {
		t.Fatal("latency not reported")
	}
	l.apply(f.OnFinished(t0.Add(4*time.Millisecond), ok(2), p.pick))
	if !f.Done() || len(l.fails) != 0 {
		t.Fatal("not done")
	}
	l.balanced()
	// Late messages change nothing.
	if acts := f.OnBusy(t0.Add(time.Second), 1, p.pick); len(acts) != 0 {
		t.Fatalf("late busy: %v", acts)
	}
}

func TestFlowBusyTimeoutCancelsAndRetries(t *testing.T) {
	p := &scripted{servers: []string{"a", "b"}}
	l := newLedger(t)
	f := NewScanFlow(req(), DefaultFlowConfig(), 0, nil)
	l.apply(f.Start(t0, p.pick))
	l.apply(f.OnTimer(t0.Add(58*time.Millisecond), TimerBusy, 1, p.pick))
	if l.accounted[1] != selection.Timeout || !l.cancelled[1] || l.signals != 1 || !l.dispatched[2] {
		t.Fatalf("timeout not handled: acc %v cancel %v", l.accounted, l.cancelled)
	}
	// A late start of attempt 1 does not resurrect it.
	l.apply(f.OnStarted(t0.Add(60*time.Millisecond), 1, false, 0))
	if f.Attempt(1).Sel.Result != selection.Timeout {
		t.Fatal("late start changed a timed-out attempt")
	}
	// The busy timer of a started attempt is ignored.
	l.apply(f.OnStarted(t0.Add(61*time.Millisecond), 2, false, 0))
	if acts := f.OnTimer(t0.Add(200*time.Millisecond), TimerBusy, 2, p.pick); len(acts) != 0 {
		t.Fatalf("busy timer after start acted: %v", acts)
	}
	l.apply(f.OnFinished(t0.Add(300*time.Millisecond), ok(2), p.pick))
	l.balanced()
}

func TestFlowHedgeFirstDataWins(t *testing.T) {
	p := &scripted{servers: []string{"a", "b"}, hedgeOK: true,
		decs: []selection.Decision{{Server: "a", BusyTimeout: time.Second, HedgeDelay: 50 * time.Millisecond}, {Server: "b", BusyTimeout: time.Second}}}
	l := newLedger(t)
	f := NewScanFlow(req(), DefaultFlowConfig(), 0, nil)
	l.apply(f.Start(t0, p.pick))
	if !l.timer(TimerHedge, 1) {
		t.Fatal("no hedge timer")
	}
	l.apply(f.OnTimer(t0.Add(50*time.Millisecond), TimerHedge, 1, p.pick))
	if !p.calls[1].hedge || !l.dispatched[2] || l.slowdowns != 1 {
		t.Fatalf("hedge not dispatched: calls %+v", p.calls)
	}
	if p.calls[1].history[0].Result != selection.Slow {
		t.Fatalf("the slow attempt should be shown as slow: %+v", p.calls[1].history)
	}
	// Hedge delivers first: the primary is cancelled.
	l.apply(f.OnStarted(t0.Add(55*time.Millisecond), 2, true, 0))
	if !l.cancelled[1] || l.accounted[1] != selection.Cancelled {
		t.Fatal("loser not cancelled")
	}
	l.apply(f.OnFinished(t0.Add(60*time.Millisecond), ok(2), p.pick))
	l.balanced()
}

func TestFlowHedgeDeclined(t *testing.T) {
	p := &scripted{servers: []string{"a"}, decs: []selection.Decision{{Server: "a", HedgeDelay: 10 * time.Millisecond}}}
	l := newLedger(t)
	f := NewScanFlow(req(), DefaultFlowConfig(), 0, nil)
	l.apply(f.Start(t0, p.pick))
	acts := l.apply(f.OnTimer(t0.Add(10*time.Millisecond), TimerHedge, 1, p.pick))
	for _, a := range acts {
		if a.Kind == ActDispatch || a.Kind == ActFail {
			t.Fatalf("declined hedge acted: %v", a.Kind)
		}
	}
	if l.slowdowns != 0 {
		t.Fatal("a declined hedge must not count a slowdown")
	}
	// The data timer may ask again (the budget may have room by then).
	l.apply(f.OnTimer(t0.Add(15*time.Millisecond), TimerData, 1, p.pick))
	if len(p.calls) != 3 || !p.calls[2].hedge {
		t.Fatalf("second hedge request not made: %+v", p.calls)
	}
	l.apply(f.OnFinished(t0.Add(20*time.Millisecond), ok(1), p.pick))
	l.balanced()
}

func TestFlowNoServerWaitsThenFails(t *testing.T) {
	p := &scripted{err: selection.ErrNoServer}
	l := newLedger(t)
	f := NewScanFlow(req(), DefaultFlowConfig(), 300*time.Millisecond, nil)
	l.apply(f.Start(t0, p.pick))
	if !l.timer(TimerRetry, 0) || len(l.fails) != 0 {
		t.Fatal("should wait for servers")
	}
	l.apply(f.OnTimer(t0.Add(100*time.Millisecond), TimerRetry, 0, p.pick))
	if len(l.fails) != 0 {
		t.Fatal("failed too early")
	}
	l.apply(f.OnTimer(t0.Add(300*time.Millisecond), TimerRetry, 0, p.pick))
	if len(l.fails) != 1 || l.fails[0].Code != messages.ErrorCode_ERROR_CODE_NO_SERVERS {
		t.Fatalf("fails %v", l.fails)
	}
	l.balanced()
}

func TestFlowNoServerZeroWaitFailsAtOnce(t *testing.T) {
	p := &scripted{err: selection.ErrNoServer}
	l := newLedger(t)
	f := NewScanFlow(req(), DefaultFlowConfig(), 0, nil)
	l.apply(f.Start(t0, p.pick))
	if len(l.fails) != 1 {
		t.Fatal("want immediate failure")
	}
}

func TestFlowErrorDelayThenDispatch(t *testing.T) {
	p := &scripted{decs: []selection.Decision{{Server: "a"}, {Server: "b", Delay: 100 * time.Millisecond}}, servers: []string{"x"}}
	l := newLedger(t)
	f := NewScanFlow(req(), DefaultFlowConfig(), 0, nil)
	l.apply(f.Start(t0, p.pick))
	l.apply(f.OnFinished(t0, &messages.ScanFinished{RequestId: "r1", Attempt: 1, Error: messages.ErrorCode_ERROR_CODE_STORAGE}, p.pick))
	if l.accounted[1] != selection.Error || l.dispatched[2] || !l.timer(TimerDispatch, 2) {
		t.Fatalf("error delay not honoured: %v %v", l.accounted, l.dispatched)
	}
	l.apply(f.OnTimer(t0.Add(100*time.Millisecond), TimerDispatch, 2, p.pick))
	if !l.dispatched[2] {
		t.Fatal("not dispatched after delay")
	}
	l.apply(f.OnFinished(t0.Add(200*time.Millisecond), ok(2), p.pick))
	l.balanced()
}

func TestFlowErrorOfWinnerEndsFlow(t *testing.T) {
	p := &scripted{servers: []string{"a", "b"}}
	l := newLedger(t)
	f := NewScanFlow(req(), DefaultFlowConfig(), 0, nil)
	l.apply(f.Start(t0, p.pick))
	l.apply(f.OnStarted(t0, 1, true, 0))
	l.apply(f.OnFinished(t0, &messages.ScanFinished{RequestId: "r1", Attempt: 1, Error: messages.ErrorCode_ERROR_CODE_STORAGE}, p.pick))
	if l.dispatched[2] || !f.Done() || len(l.fails) != 0 {
		t.Fatal("the client resumes a broken stream itself; the flow must end quietly")
	}
	l.balanced()
}

func TestFlowCorruptFailsClient(t *testing.T) {
	p := &scripted{servers: []string{"a", "b"}}
	l := newLedger(t)
	f := NewScanFlow(req(), DefaultFlowConfig(), 0, nil)
	l.apply(f.Start(t0, p.pick))
	l.apply(f.OnFinished(t0, &messages.ScanFinished{RequestId: "r1", Attempt: 1, Error: messages.ErrorCode_ERROR_CODE_CORRUPT_BLOCK, ErrorMessage: "bad block"}, p.pick))
	if len(l.fails) != 1 || l.fails[0].Code != messages.ErrorCode_ERROR_CODE_CORRUPT_BLOCK || l.dispatched[2] {
		t.Fatalf("corrupt should fail the scan: %v", l.fails)
	}
	l.balanced()
}

func TestFlowStallRetries(t *testing.T) {
	p := &scripted{servers: []string{"a", "b"}}
	l := newLedger(t)
	f := NewScanFlow(req(), DefaultFlowConfig(), 0, nil)
	l.apply(f.Start(t0, p.pick))
	l.apply(f.OnStarted(t0, 1, false, 0))
	if !l.timer(TimerStall, 1) {
		t.Fatal("no stall timer")
	}
	l.apply(f.OnTimer(t0.Add(5*time.Second), TimerStall, 1, p.pick))
	if l.accounted[1] != selection.Stalled || !l.cancelled[1] || !l.dispatched[2] {
		t.Fatal("stall not handled")
	}
	l.apply(f.OnFinished(t0.Add(6*time.Second), ok(2), p.pick))
	l.balanced()
}

func TestFlowDeadlineFailsAndCancels(t *testing.T) {
	p := &scripted{servers: []string{"a"}}
	r := req()
	r.DeadlineUnixMs = t0.Add(time.Second).UnixMilli()
	l := newLedger(t)
	f := NewScanFlow(r, DefaultFlowConfig(), 0, nil)
	l.apply(f.Start(t0, p.pick))
	if !l.timer(TimerDeadline, 0) {
		t.Fatal("no deadline timer")
	}
	l.apply(f.OnStarted(t0, 1, false, 0))
	l.apply(f.OnTimer(t0.Add(time.Second), TimerDeadline, 0, p.pick))
	if len(l.fails) != 1 || l.fails[0].Code != messages.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED || !l.cancelled[1] {
		t.Fatal("deadline not enforced")
	}
	if len(l.fails[0].Attempts) != 1 {
		t.Fatal("error should list attempts")
	}
	l.balanced()
}

func TestFlowAvoidedServersInHistory(t *testing.T) {
	p := &scripted{servers: []string{"b"}}
	l := newLedger(t)
	avoid := []selection.Attempt{{Server: "a", Result: selection.Stalled}}
	f := NewScanFlow(req(), DefaultFlowConfig(), 0, avoid)
	l.apply(f.Start(t0, p.pick))
	if h := p.calls[0].history; len(h) != 1 || h[0].Server != "a" {
		t.Fatalf("history %+v", h)
	}
	l.apply(f.OnDone(t0, true))
	if !l.cancelled[1] {
		t.Fatal("abandoned flow must cancel its attempt")
	}
	l.balanced()
}

func TestFlowMaxAttempts(t *testing.T) {
	p := &scripted{servers: []string{"a"}}
	cfg := DefaultFlowConfig()
	cfg.MaxAttempts = 3
	l := newLedger(t)
	f := NewScanFlow(req(), cfg, 0, nil)
	l.apply(f.Start(t0, p.pick))
	for n := uint32(1); n <= 3; n++ {
		l.apply(f.OnBusy(t0, n, p.pick))
	}
	if len(l.fails) != 1 {
		t.Fatal("want failure after max attempts")
	}
	l.balanced()
}

func TestFlowSelectionErrorIsInternal(t *testing.T) {
	p := &scripted{err: errors.New("boom")}
	l := newLedger(t)
	f := NewScanFlow(req(), DefaultFlowConfig(), time.Hour, nil)
	l.apply(f.Start(t0, p.pick))
	if len(l.fails) != 1 || l.fails[0].Code != messages.ErrorCode_ERROR_CODE_INTERNAL {
		t.Fatal("want internal error")
	}
}
