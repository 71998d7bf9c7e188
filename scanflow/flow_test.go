package scanflow

import (
	"errors"
	"fmt"
	"strings"
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
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
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
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
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

// hedgedFlow is a flow of request r1 whose first attempt went to "a"
// (busy timeout 1 s) and, 50 ms later, its hedge to "b" (busy timeout
// hedgeBusy).
func hedgedFlow(t *testing.T, hedgeBusy time.Duration) (*scripted, *ledger, *ScanFlow) {
	t.Helper()
	p := &scripted{servers: []string{"a", "b"}, hedgeOK: true,
		decs: []selection.Decision{{Server: "a", BusyTimeout: time.Second, HedgeDelay: 50 * time.Millisecond}, {Server: "b", BusyTimeout: hedgeBusy}}}
	l := newLedger(t)
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
	l.apply(f.Start(t0, p.pick))
	l.apply(f.OnTimer(t0.Add(50*time.Millisecond), TimerHedge, 1, p.pick))
	return p, l, f
}

func TestFlowHedgeFirstDataWins(t *testing.T) {
	p := &scripted{servers: []string{"a", "b"}, hedgeOK: true,
		decs: []selection.Decision{{Server: "a", BusyTimeout: time.Second, HedgeDelay: 50 * time.Millisecond}, {Server: "b", BusyTimeout: time.Second}}}
	l := newLedger(t)
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
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
	// Hedge delivers first: the primary is cancelled unless it streams
	// (the client decides), and ends when the flow does.
	l.apply(f.OnStarted(t0.Add(55*time.Millisecond), 2, true, 0))
	if !l.cancelled[1] {
		t.Fatal("loser not cancelled")
	}
	l.apply(f.OnFinished(t0.Add(60*time.Millisecond), ok(2), p.pick))
	if l.accounted[1] != selection.Cancelled {
		t.Fatalf("loser accounted %v, want cancelled", l.accounted[1])
	}
	l.balanced()
}

func TestFlowHedgeDeclined(t *testing.T) {
	p := &scripted{servers: []string{"a"}, decs: []selection.Decision{{Server: "a", HedgeDelay: 10 * time.Millisecond}}}
	l := newLedger(t)
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
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
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 300*time.Millisecond, nil)
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
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
	l.apply(f.Start(t0, p.pick))
	if len(l.fails) != 1 {
		t.Fatal("want immediate failure")
	}
}

func TestFlowErrorDelayThenDispatch(t *testing.T) {
	p := &scripted{decs: []selection.Decision{{Server: "a"}, {Server: "b", Delay: 100 * time.Millisecond}}, servers: []string{"x"}}
	l := newLedger(t)
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
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
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
	l.apply(f.Start(t0, p.pick))
	l.apply(f.OnStarted(t0, 1, true, 0))
	l.apply(f.OnFinished(t0, &messages.ScanFinished{RequestId: "r1", Attempt: 1, Error: messages.ErrorCode_ERROR_CODE_STORAGE}, p.pick))
	if l.dispatched[2] || !f.Done() || len(l.fails) != 0 {
		t.Fatal("the client resumes a broken stream itself; the flow must end quietly")
	}
	l.balanced()
}

// TestFlowForgedErrorNeedsAnotherHost: a scan server's CORRUPT_BLOCK,
// BAD_REQUEST or STALE_GENERATION does not end the flow: it is retried,
// and the flow fails with it only once a server of another host answers
// it too (the two servers of one host count as one host).
func TestFlowForgedErrorNeedsAnotherHost(t *testing.T) {
	for _, code := range []messages.ErrorCode{messages.ErrorCode_ERROR_CODE_CORRUPT_BLOCK, messages.ErrorCode_ERROR_CODE_BAD_REQUEST,
		messages.ErrorCode_ERROR_CODE_STALE_GENERATION} {
		p := &scripted{decs: []selection.Decision{
			{Server: "a1", Host: "ha", BusyTimeout: 33 * time.Millisecond},
			{Server: "a2", Host: "ha", BusyTimeout: 33 * time.Millisecond},
			{Server: "b1", Host: "hb", BusyTimeout: 33 * time.Millisecond},
		}}
		l := newLedger(t)
		f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
		l.apply(f.Start(t0, p.pick))
		for n := uint32(1); n <= 3; n++ {
			if !l.dispatched[n] || len(l.fails) != 0 {
				t.Fatalf("%v: attempt %d dispatched %v, fails %v: want a retry", code, n, l.dispatched[n], l.fails)
			}
			l.apply(f.OnFinished(t0, &messages.ScanFinished{RequestId: "r1", Attempt: n, Error: code, ErrorMessage: fmt.Sprintf("lie %d", n)}, p.pick))
			if l.accounted[n] != selection.Error {
				t.Fatalf("%v: attempt %d accounted %v, want an error", code, n, l.accounted[n])
			}
		}
		if len(l.fails) != 1 || l.fails[0].GetCode() != code || l.dispatched[4] || !strings.Contains(l.fails[0].GetMessage(), "lie 3") {
			t.Fatalf("%v: fails %v: want it once two hosts answered it", code, l.fails)
		}
		l.balanced()
	}
}

func TestFlowStallRetries(t *testing.T) {
	p := &scripted{servers: []string{"a", "b"}}
	l := newLedger(t)
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
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
	l := newLedger(t)
	f := NewScanFlow(r, t0.Add(time.Second), DefaultFlowConfig(), 0, nil)
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
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, avoid)
	l.apply(f.Start(t0, p.pick))
	if h := p.calls[0].history; len(h) != 1 || h[0].Server != "a" {
		t.Fatalf("history %+v", h)
	}
	l.apply(f.OnDone(t0, true, 0))
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
	f := NewScanFlow(req(), time.Time{}, cfg, 0, nil)
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
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), time.Hour, nil)
	l.apply(f.Start(t0, p.pick))
	if len(l.fails) != 1 || l.fails[0].Code != messages.ErrorCode_ERROR_CODE_INTERNAL {
		t.Fatal("want internal error")
	}
}

// The winner streamed, then its client died; the server reports
// CANCELLED after its ack timeout. The flow ends.
func TestFlowEndsWhenStreamingWinnerIsCancelled(t *testing.T) {
	p := &scripted{servers: []string{"a", "b"}}
	l := newLedger(t)
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
	l.apply(f.Start(t0, p.pick))
	l.apply(f.OnStarted(t0, 1, false, 0))
	l.apply(f.OnStarted(t0.Add(time.Millisecond), 1, true, 0))
	l.apply(f.OnFinished(t0.Add(30*time.Second), &messages.ScanFinished{RequestId: "r1", Attempt: 1, Batches: 4, Rows: 2000,
		Error: messages.ErrorCode_ERROR_CODE_CANCELLED, Cancelled: true}, p.pick))
	if !f.Done() || l.dispatched[2] || len(l.fails) != 0 {
		t.Fatalf("flow not ended quietly: done %v dispatched %v fails %v", f.Done(), l.dispatched, l.fails)
	}
	if l.accounted[1] != selection.Cancelled {
		t.Fatalf("a cancelled attempt is accounted %v, want cancelled (never an error)", l.accounted[1])
	}
	l.balanced()
}

// A lost ScanDone: the client stopped reading and cancelled its stream,
// but its ScanDone never arrived. The CANCELLED ScanFinished ends the flow.
func TestFlowEndsWithoutScanDone(t *testing.T) {
	p := &scripted{servers: []string{"a"}}
	l := newLedger(t)
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
	l.apply(f.Start(t0, p.pick))
	// The first-data notice was lost too; the finish says batches were sent.
	l.apply(f.OnFinished(t0.Add(time.Second), &messages.ScanFinished{RequestId: "r1", Attempt: 1, Batches: 1, Rows: 10,
		Error: messages.ErrorCode_ERROR_CODE_CANCELLED, Cancelled: true}, p.pick))
	if !f.Done() || len(p.calls) != 1 {
		t.Fatalf("done %v, picks %d: an attempt that delivered data is not retried", f.Done(), len(p.calls))
	}
	l.balanced()
}

// Every flow has a deadline: without one in the request, MaxFlowAge.
func TestFlowMaxFlowAgeWithoutRequestDeadline(t *testing.T) {
	p := &scripted{servers: []string{"a"}}
	cfg := DefaultFlowConfig()
	if cfg.MaxFlowAge != time.Hour {
		t.Fatalf("default MaxFlowAge %v, want 1h", cfg.MaxFlowAge)
	}
	cfg.MaxFlowAge = 10 * time.Minute
	l := newLedger(t)
	f := NewScanFlow(req(), time.Time{}, cfg, 0, nil)
	l.apply(f.Start(t0, p.pick))
	var after time.Duration
	for _, a := range l.timers {
		if a.Timer == TimerDeadline {
			after = a.After
		}
	}
	if after != 10*time.Minute {
		t.Fatalf("deadline timer after %v, want MaxFlowAge 10m", after)
	}
	l.apply(f.OnStarted(t0, 1, true, 0))
	l.apply(f.OnTimer(t0.Add(10*time.Minute), TimerDeadline, 0, p.pick))
	if !f.Done() || len(l.fails) != 1 || l.fails[0].Code != messages.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED || !l.cancelled[1] {
		t.Fatalf("MaxFlowAge not enforced: done %v fails %v", f.Done(), l.fails)
	}
	l.balanced()
}

// An attempt on a server that left the view ends as an error and is
// retried. So is the winner: the first batch it announced may have died
// with it, before the client saw it. A client that has it cancels the new
// attempt's stream, and that ScanFinished (a batch sent) ends the flow.
func TestFlowServerLost(t *testing.T) {
	p := &scripted{servers: []string{"a", "b", "c"}}
	l := newLedger(t)
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
	l.apply(f.Start(t0, p.pick))
	l.apply(f.OnStarted(t0, 1, false, 0))
	l.apply(f.OnServerLost(t0.Add(time.Second), 1, p.pick))
	if l.accounted[1] != selection.Error || !l.dispatched[2] || l.cancelled[1] {
		t.Fatalf("lost server before data: accounted %v dispatched %v cancelled %v", l.accounted, l.dispatched, l.cancelled)
	}
	l.apply(f.OnStarted(t0.Add(2*time.Second), 2, true, 0))
	l.apply(f.OnServerLost(t0.Add(3*time.Second), 2, p.pick))
	if f.Done() || !l.dispatched[3] || len(l.fails) != 0 || l.accounted[2] != selection.Error {
		t.Fatalf("lost winner: done %v dispatched %v fails %v accounted %v; want attempt 3 dispatched", f.Done(), l.dispatched, l.fails, l.accounted)
	}
	// The client had attempt 2's batch: it cancels attempt 3, which had
	// sent one. The flow ends, nobody blamed, no fourth attempt.
	l.apply(f.OnFinished(t0.Add(4*time.Second), &messages.ScanFinished{RequestId: "r1", Attempt: 3, Batches: 1,
		Error: messages.ErrorCode_ERROR_CODE_CANCELLED}, p.pick))
	if !f.Done() || l.dispatched[4] || len(l.fails) != 0 || l.accounted[3] != selection.Cancelled {
		t.Fatalf("after the client cancelled attempt 3: done %v dispatched %v fails %v accounted %v", f.Done(), l.dispatched, l.fails, l.accounted)
	}
	l.balanced()

	// The client had nothing: attempt 3's stream is the one it reads.
	l = newLedger(t)
	f = NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
	l.apply(f.Start(t0, p.pick))
	l.apply(f.OnStarted(t0, 1, true, 0))
	l.apply(f.OnServerLost(t0.Add(time.Second), 1, p.pick))
	l.apply(f.OnStarted(t0.Add(2*time.Second), 2, true, 0))
	l.apply(f.OnFinished(t0.Add(3*time.Second), &messages.ScanFinished{RequestId: "r1", Attempt: 2, Batches: 1, Rows: 1}, p.pick))
	if !f.Done() || len(l.fails) != 0 || l.accounted[2] != selection.Started {
		t.Fatalf("retried winner finishing: done %v fails %v accounted %v", f.Done(), l.fails, l.accounted)
	}
	l.balanced()
}

// The tablet actor sees attempt 1's data first, the client
// accepted attempt 2's stream. The tablet cancels attempt 2 only unless it
// streams (so the server ignores it), the client cancels attempt 1, and
// attempt 2 finishes: one winner, nobody blamed, the flow ends once.
func TestFlowTwoWinnersClientDecides(t *testing.T) {
	p := &scripted{servers: []string{"a", "b"}, hedgeOK: true,
		decs: []selection.Decision{{Server: "a", Host: "ha", BusyTimeout: time.Second, HedgeDelay: 50 * time.Millisecond}, {Server: "b", Host: "hb", BusyTimeout: time.Second}}}
	l := newLedger(t)
	var softCancel, hardCancel []uint32
	apply := func(acts []Action) {
		for _, a := range acts {
			if a.Kind == ActCancel {
				if a.UnlessStreaming {
					softCancel = append(softCancel, a.Attempt.N)
				} else {
					hardCancel = append(hardCancel, a.Attempt.N)
				}
			}
		}
		l.apply(acts)
	}
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
	apply(f.Start(t0, p.pick))
	apply(f.OnTimer(t0.Add(50*time.Millisecond), TimerHedge, 1, p.pick))
	if !l.dispatched[2] {
		t.Fatal("no hedge")
	}
	apply(f.OnStarted(t0.Add(60*time.Millisecond), 1, true, 0))
	if len(softCancel) != 1 || softCancel[0] != 2 || len(hardCancel) != 0 {
		t.Fatalf("loser cancels: unless-streaming %v, hard %v; want only attempt 2 unless streaming", softCancel, hardCancel)
	}
	if _, ended := l.accounted[2]; ended {
		t.Fatal("attempt 2 may be the client's stream: it must stay live until it ends")
	}
	apply(f.OnStarted(t0.Add(61*time.Millisecond), 2, true, 0))
	// The client cancelled attempt 1 (it had accepted attempt 2).
	apply(f.OnFinished(t0.Add(70*time.Millisecond), &messages.ScanFinished{RequestId: "r1", Attempt: 1, Batches: 1, Rows: 500,
		Error: messages.ErrorCode_ERROR_CODE_CANCELLED, Cancelled: true}, p.pick))
	if f.Done() || l.dispatched[3] {
		t.Fatalf("attempt 2 still streams: done %v, dispatched %v", f.Done(), l.dispatched)
	}
	apply(f.OnFinished(t0.Add(90*time.Millisecond), ok(2), p.pick))
	if !f.Done() || len(l.fails) != 0 {
		t.Fatal("not done after attempt 2 finished")
	}
	if l.accounted[1] != selection.Cancelled || l.accounted[2] != selection.Started {
		t.Fatalf("accounted %v, want 1 cancelled, 2 started", l.accounted)
	}
	l.balanced()
}

// A loser cancelled unless streaming whose busy timer then fires is not
// blamed with a timeout: we told it to stop.
func TestFlowCancelledLoserNotBlamed(t *testing.T) {
	p, l, f := hedgedFlow(t, 100*time.Millisecond)
	l.apply(f.OnStarted(t0.Add(60*time.Millisecond), 1, true, 0))
	l.apply(f.OnTimer(t0.Add(175*time.Millisecond), TimerBusy, 2, p.pick))
	if l.accounted[2] != selection.Cancelled || l.signals != 0 {
		t.Fatalf("cancelled loser accounted %v with %d timeout signals, want cancelled and none", l.accounted[2], l.signals)
	}
	if f.Done() {
		t.Fatal("the winner still streams")
	}
	l.apply(f.OnFinished(t0.Add(time.Second), ok(1), p.pick))
	l.balanced()
}

// A failed attempt that delivered data is not retried while another
// attempt is still live; the flow ends when that one ends.
func TestFlowFailedWinnerWaitsForOthers(t *testing.T) {
	p, l, f := hedgedFlow(t, time.Second)
	l.apply(f.OnStarted(t0.Add(60*time.Millisecond), 1, true, 0))
	l.apply(f.OnFinished(t0.Add(70*time.Millisecond), &messages.ScanFinished{RequestId: "r1", Attempt: 1, Batches: 2,
		Error: messages.ErrorCode_ERROR_CODE_STORAGE}, p.pick))
	if f.Done() || len(p.calls) != 2 {
		t.Fatalf("done %v after %d picks: no retry, but attempt 2 is live", f.Done(), len(p.calls))
	}
	l.apply(f.OnFinished(t0.Add(80*time.Millisecond), &messages.ScanFinished{RequestId: "r1", Attempt: 2,
		Error: messages.ErrorCode_ERROR_CODE_CANCELLED, Cancelled: true}, p.pick))
	if !f.Done() || len(p.calls) != 2 || len(l.fails) != 0 {
		t.Fatalf("done %v picks %d fails %v: the client resumes, the flow ends", f.Done(), len(p.calls), l.fails)
	}
	if l.accounted[1] != selection.Error || l.accounted[2] != selection.Cancelled {
		t.Fatalf("accounted %v", l.accounted)
	}
	l.balanced()
}

// An attempt cancelled before it delivered anything (its server shut
// down) is retried, and not blamed.
func TestFlowCancelledWithoutDataRetries(t *testing.T) {
	p := &scripted{servers: []string{"a", "b"}}
	l := newLedger(t)
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
	l.apply(f.Start(t0, p.pick))
	l.apply(f.OnStarted(t0, 1, false, 0))
	l.apply(f.OnFinished(t0.Add(time.Millisecond), &messages.ScanFinished{RequestId: "r1", Attempt: 1,
		Error: messages.ErrorCode_ERROR_CODE_CANCELLED, Cancelled: true}, p.pick))
	if l.accounted[1] != selection.Cancelled || !l.dispatched[2] {
		t.Fatalf("accounted %v dispatched %v", l.accounted, l.dispatched)
	}
	l.apply(f.OnFinished(t0.Add(2*time.Millisecond), ok(2), p.pick))
	l.balanced()
}

// Waiting for servers past timeToWaitForScanServers fails NO_SERVERS with
// the picker's reason (the tablet actor names profile and group) and the
// time waited.
func TestFlowNoServerMessage(t *testing.T) {
	p := &scripted{err: fmt.Errorf("no scan server in group %q for profile %q: %w", "batch", "batch", selection.ErrNoServer)}
	l := newLedger(t)
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
	l.apply(f.Start(t0, p.pick))
	if len(l.fails) != 1 || l.fails[0].Code != messages.ErrorCode_ERROR_CODE_NO_SERVERS {
		t.Fatalf("fails %v", l.fails)
	}
	msg := l.fails[0].Message
	for _, want := range []string{`group "batch"`, `profile "batch"`, "waited 0s", "timeToWaitForScanServers"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}

// The deadline passing while no server is available names the wait too.
func TestFlowDeadlineWhileWaitingForServers(t *testing.T) {
	p := &scripted{err: fmt.Errorf("no scan server in group %q for profile %q: %w", "batch", "batch", selection.ErrNoServer)}
	r := req()
	l := newLedger(t)
	f := NewScanFlow(r, t0.Add(time.Second), DefaultFlowConfig(), time.Hour, nil)
	l.apply(f.Start(t0, p.pick))
	l.apply(f.OnTimer(t0.Add(time.Second), TimerDeadline, 0, p.pick))
	if len(l.fails) != 1 || l.fails[0].Code != messages.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED || !strings.Contains(l.fails[0].Message, `group "batch"`) {
		t.Fatalf("fails %v", l.fails)
	}
}

// With the block store down every scan server answers STORAGE within
// milliseconds. The flow fails with STORAGE and the last error once the errors show the store, not one server, is failing;
// one server's storage error is retried elsewhere.
func TestFlowStorageErrors(t *testing.T) {
	const (
		stor = "storage"
		data = "storage after data"
		busy = "busy timeout"
		good = "ok"
	)
	type step struct {
		server, host string
		answer       string
	}
	for _, tc := range []struct {
		name string
		// steps: the policy's picks in order, and each attempt's answer
		// ("" at the end: picked, no answer).
		steps []step
		// wantFail: the flow fails with STORAGE after the last step (no
		// further pick); otherwise it completes without an error.
		wantFail   bool
		wantReason string
	}{
		{name: "one server's error is retried elsewhere",
			steps: []step{{"a", "h1", stor}, {"b", "h2", good}}},
		{name: "two hosts' errors are retried",
			steps: []step{{"a", "h1", stor}, {"b", "h2", stor}, {"c", "h3", good}}},
		{name: "three distinct hosts fail",
			steps:    []step{{"a", "h1", stor}, {"b", "h2", stor}, {"c", "h3", stor}},
			wantFail: true, wantReason: "servers on 3 hosts failed reading the block store"},
		{name: "servers of one host count as one host; a server failing twice ends it",
			steps:    []step{{"a", "h1", stor}, {"b", "h1", stor}, {"c", "h2", stor}, {"a", "h1", stor}},
			wantFail: true, wantReason: "server a failed reading the block store twice (3 servers on 2 hosts failed)"},
		{name: "a one-server group retries once",
			steps:    []step{{"a", "h1", stor}, {"a", "h1", stor}},
			wantFail: true, wantReason: "server a failed reading the block store twice"},
		{name: "a one-server group's single storage error is retried",
			steps: []step{{"a", "h1", stor}, {"a", "h1", good}}},
		{name: "other failures between storage errors do not count",
			steps:    []step{{"a", "h1", stor}, {"b", "h2", busy}, {"c", "h3", stor}, {"d", "h4", stor}},
			wantFail: true, wantReason: "servers on 3 hosts"},
		{name: "a late STORAGE answer of an attempt already timed out counts",
			steps:    []step{{"a", "h1", stor}, {"b", "h2", stor}, {"c", "h3", busy + "+" + stor}, {"d", "h4", ""}},
			wantFail: true, wantReason: "servers on 3 hosts"},
		{name: "a storage error after data is the client's to resume",
			steps: []step{{"a", "h1", data}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &scripted{}
			for _, s := range tc.steps {
				p.decs = append(p.decs, selection.Decision{Server: selection.ServerID(s.server), Host: s.host, BusyTimeout: 33 * time.Millisecond})
			}
			l := newLedger(t)
			f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
			now := t0
			l.apply(f.Start(now, p.pick))
			for i, s := range tc.steps {
				n := uint32(i + 1)
				if s.answer == "" {
					break // picked, and not dispatched
				}
				if !l.dispatched[n] {
					t.Fatalf("step %d: attempt %d on %s not dispatched (fails %v)", i, n, s.server, l.fails)
				}
				now = now.Add(time.Millisecond)
				msg := fmt.Sprintf("scan server %s: block store: no answer (%d)", s.server, n)
				fin := &messages.ScanFinished{RequestId: "r1", Attempt: n, Server: s.server, Error: messages.ErrorCode_ERROR_CODE_STORAGE, ErrorMessage: msg}
				switch s.answer {
				case good:
					l.apply(f.OnFinished(now, ok(n), p.pick))
				case stor:
					l.apply(f.OnFinished(now, fin, p.pick))
				case data:
					l.apply(f.OnStarted(now, n, true, 0))
					fin.Batches = 3
					l.apply(f.OnFinished(now, fin, p.pick))
				case busy:
					l.apply(f.OnTimer(now, TimerBusy, n, p.pick))
				case busy + "+" + stor:
					l.apply(f.OnTimer(now, TimerBusy, n, p.pick))
					if f.Done() {
						t.Fatalf("the flow ended on a busy timeout: %v", l.fails)
					}
					l.apply(f.OnFinished(now, fin, p.pick))
				}
				if f.Done() && i < len(tc.steps)-1 && tc.steps[i+1].answer != "" {
					t.Fatalf("flow ended after step %d of %d (fails %v)", i, len(tc.steps), l.fails)
				}
			}
			if !f.Done() {
				t.Fatalf("flow not done after %d picks", len(p.calls))
			}
			if len(p.calls) != len(tc.steps) {
				t.Fatalf("%d picks, want %d", len(p.calls), len(tc.steps))
			}
			l.balanced()
			if !tc.wantFail {
				if len(l.fails) != 0 {
					t.Fatalf("failed: %v", l.fails)
				}
				return
			}
			if len(l.fails) != 1 || l.fails[0].GetCode() != messages.ErrorCode_ERROR_CODE_STORAGE {
				t.Fatalf("fails %v, want one STORAGE", l.fails)
			}
			last := len(tc.steps) - 1
			for last >= 0 && !strings.Contains(tc.steps[last].answer, stor) {
				last--
			}
			wantMsg := fmt.Sprintf("no answer (%d)", last+1)
			if m := l.fails[0].GetMessage(); !strings.Contains(m, tc.wantReason) || !strings.Contains(m, "last error: ") || !strings.Contains(m, wantMsg) {
				t.Fatalf("message %q: want %q and the last storage error (%q)", m, tc.wantReason, wantMsg)
			}
		})
	}
}

// A block of a generation that newer ingests deleted during the scan is
// reported STALE_GENERATION (by the scan server or the tablet actor): the
// flow fails with it at once, counting no error against the server.
// TestFlowStaleGenerationAfterData: STALE_GENERATION from an attempt
// that delivered data ends the flow without an error of its own: the
// client, which got the server's answer too, resumes with a new request
// (whose flow confirms the error on two hosts).
func TestFlowStaleGenerationAfterData(t *testing.T) {
	p := &scripted{servers: []string{"a", "b"}}
	l := newLedger(t)
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
	l.apply(f.Start(t0, p.pick))
	l.apply(f.OnStarted(t0, 1, true, 0))
	l.apply(f.OnFinished(t0, &messages.ScanFinished{RequestId: "r1", Attempt: 1, Batches: 2, Error: messages.ErrorCode_ERROR_CODE_STALE_GENERATION,
		ErrorMessage: "generation 1 was deleted"}, p.pick))
	if len(l.fails) != 0 || l.dispatched[2] || !f.Done() {
		t.Fatalf("fails %v, dispatched %v, done %v: want the flow over, no retry", l.fails, l.dispatched, f.Done())
	}
	l.balanced()
}

// TestFlowLeaveKeepsTheStream: a tablet actor that stops (its coordinator
// leaves) ends its flows with SHUTTING_DOWN, and an attempt already
// streaming to the client is told to stop only unless it streams.
func TestFlowLeaveKeepsTheStream(t *testing.T) {
	p := &scripted{servers: []string{"a", "b"}}
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
	f.Start(t0, p.pick)
	f.OnStarted(t0.Add(time.Millisecond), 1, true, 0)
	acts := f.Leave(t0.Add(2*time.Millisecond), "coordinator leaving")
	var cancel, fail bool
	for _, a := range acts {
		switch a.Kind {
		case ActCancel:
			cancel = true
			if !a.UnlessStreaming {
				t.Fatalf("leave cancelled attempt %d outright: %+v", a.Attempt.N, a)
			}
		case ActFail:
			fail = true
			if a.Error.GetCode() != messages.ErrorCode_ERROR_CODE_SHUTTING_DOWN {
				t.Fatalf("leave failed with %v", a.Error.GetCode())
			}
		}
	}
	if !cancel || !fail || !f.Done() {
		t.Fatalf("leave: cancel %v fail %v done %v: %+v", cancel, fail, f.Done(), acts)
	}
}

// A server sends an attempt's news in as few messages as it
// can. A ScanFinished alone (the first batch was the last) means started
// and first data: the flow completes, records the start latency once, and
// accounts the attempt as started; the busy timer then does nothing.
func TestFlowFinishedAloneImpliesStartAndFirstData(t *testing.T) {
	p := &scripted{servers: []string{"a"}}
	l := newLedger(t)
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
	l.apply(f.Start(t0, p.pick))
	l.apply(f.OnFinished(t0.Add(700*time.Microsecond), &messages.ScanFinished{RequestId: "r1", Attempt: 1, Batches: 1, Rows: 1}, p.pick))
	if !f.Done() || f.Winner() != 1 || l.accounted[1] != selection.Started || l.latencies != 1 || len(l.fails) != 0 {
		t.Fatalf("done %v winner %d accounted %v latencies %d", f.Done(), f.Winner(), l.accounted, l.latencies)
	}
	if acts := f.OnTimer(t0.Add(58*time.Millisecond), TimerBusy, 1, p.pick); len(acts) != 0 {
		t.Fatalf("busy timer after the finish: %v", acts)
	}
	l.balanced()
	// An empty result (no batch) is not first data: no latency sample.
	l2 := newLedger(t)
	f2 := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
	l2.apply(f2.Start(t0, p.pick))
	l2.apply(f2.OnFinished(t0.Add(time.Millisecond), ok(1), p.pick))
	if !f2.Done() || l2.latencies != 0 {
		t.Fatalf("empty finish: done %v latencies %d", f2.Done(), l2.latencies)
	}
	l2.balanced()
}

// ScanStarted{first_data} without an accept notice before it (the first
// batch came within AcceptNoticeDelay) means started: no stall timer, the
// latency recorded, the busy timer silenced.
func TestFlowFirstDataAloneImpliesStart(t *testing.T) {
	p := &scripted{servers: []string{"a"}}
	l := newLedger(t)
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
	l.apply(f.Start(t0, p.pick))
	l.apply(f.OnStarted(t0.Add(time.Millisecond), 1, true, 0))
	if a := f.Attempt(1); !a.started || !a.FirstData() || l.latencies != 1 || l.timer(TimerStall, 1) {
		t.Fatalf("started %v firstData %v latencies %d stall timer %v", a.started, a.FirstData(), l.latencies, l.timer(TimerStall, 1))
	}
	if acts := f.OnTimer(t0.Add(58*time.Millisecond), TimerBusy, 1, p.pick); len(acts) != 0 {
		t.Fatalf("busy timer after first data: %v", acts)
	}
	l.apply(f.OnFinished(t0.Add(2*time.Millisecond), &messages.ScanFinished{RequestId: "r1", Attempt: 1, Batches: 3, Rows: 9}, p.pick))
	if l.latencies != 1 {
		t.Fatalf("%d latency samples, want 1", l.latencies)
	}
	l.balanced()
}

// A ScanDone of a client that got every row can overtake the winner's
// ScanFinished: the winner's server has ended the scan already (the client
// finished on its last batch or its ScanFinished), so it gets no Cancel;
// other live attempts do.
func TestFlowScanDoneDoesNotCancelFinishedWinner(t *testing.T) {
	_, l, f := hedgedFlow(t, time.Second)
	l.apply(f.OnDone(t0.Add(60*time.Millisecond), false, 2))
	if !f.Done() || l.cancelled[2] || !l.cancelled[1] || l.accounted[2] != selection.Started || l.accounted[1] != selection.Cancelled {
		t.Fatalf("done %v cancelled %v accounted %v", f.Done(), l.cancelled, l.accounted)
	}
	l.balanced()
	// Abandoned: every live attempt is cancelled, the winner too.
	l2 := newLedger(t)
	f2 := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
	l2.apply(f2.Start(t0, (&scripted{servers: []string{"a"}}).pick))
	l2.apply(f2.OnStarted(t0.Add(time.Millisecond), 1, true, 0))
	l2.apply(f2.OnDone(t0.Add(2*time.Millisecond), true, 1))
	if !l2.cancelled[1] || l2.accounted[1] != selection.Cancelled {
		t.Fatalf("abandoned: cancelled %v accounted %v", l2.cancelled, l2.accounted)
	}
	l2.balanced()
}

// TestFlowSkipsAttemptsOfAFailedActor: a flow that takes over a request
// from a failed tablet actor, which made attempts 1 and 2, numbers its
// own from 3 — a server still holding attempt 1 would take a new attempt
// 1 for a duplicate — and answers about attempts it did not make change
// nothing.
func TestFlowSkipsAttemptsOfAFailedActor(t *testing.T) {
	p := &scripted{servers: []string{"a", "b"}}
	l := newLedger(t)
	f := NewScanFlow(req(), time.Time{}, DefaultFlowConfig(), 0, nil)
	f.SkipAttempts(2)
	l.apply(f.Start(t0, p.pick))
	if !l.dispatched[3] || len(l.dispatched) != 1 || f.LastAttempt() != 3 {
		t.Fatalf("dispatched %v (last attempt %d), want attempt 3 only", l.dispatched, f.LastAttempt())
	}
	if f.Attempt(1) != nil || f.Attempt(2) != nil || f.Attempt(3) == nil {
		t.Fatal("Attempt numbers other than the flow's own")
	}
	if acts := f.OnBusy(t0.Add(time.Millisecond), 1, p.pick); len(acts) != 0 {
		t.Fatalf("busy of the failed actor's attempt 1: %v", acts)
	}
	l.apply(f.OnBusy(t0.Add(time.Millisecond), 3, p.pick))
	if !l.dispatched[4] {
		t.Fatalf("busy attempt 3 not followed by attempt 4: %v", l.dispatched)
	}
	l.apply(f.OnFinished(t0.Add(2*time.Millisecond), ok(4), p.pick))
	if !f.Done() || len(l.fails) != 0 {
		t.Fatal("not done")
	}
	l.balanced()
}
