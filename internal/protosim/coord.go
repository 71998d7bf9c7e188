package protosim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	coordpkg "github.com/scanplane/scanplane/coordinator"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
)

// sweepInterval is the coordinator's SweepInterval (its default): how
// often missed heartbeats and attempts on lost servers are looked for.
const sweepInterval = 250 * time.Millisecond

// coordinator is one coordinator process: router, load book (host
// actors) and one tablet actor per tablet, each running the real
// coordpkg.ScanFlow per request with a Picker over the real selection
// policy. Its state is lost when it is killed; a restart starts empty on
// the same address, and servers find it again by heartbeat.
type coordinator struct {
	w       *world
	addr    string
	proc    *process
	book    *loadBook
	tablets []*tabletActor // by tablet index, made on first use
}

func (c *coordinator) router() pid { return pid{c.addr, "router"} }

func (c *coordinator) boot() {
	c.book = newLoadBook(c.w.profiles.Decays(), 3, sweepInterval)
	c.tablets = make([]*tabletActor, len(c.w.truth.refs))
	c.sweep()
}

func (c *coordinator) sweep() {
	c.book.sweep(c.w.s.now)
	c.proc.timer(sweepInterval, "", "heartbeat sweep", c.sweep)
}

func (c *coordinator) receive(env *envelope) {
	now := c.w.s.now
	switch m := env.msg.(type) {
	case *messages.Heartbeat:
		c.book.onHeartbeat(now, m)
	case *messages.LoadSignal:
		c.book.busy(now, selection.ServerID(m.GetServer()), int(m.GetQueueLen()), env.to.id == "busy-signals")
	case *messages.ScanRequest:
		c.onScanRequest(m)
	case *messages.ScanDone:
		if t := c.tabletFor(m.GetTablet()); t != nil {
			t.onDone(m)
		}
	case *messages.ScanStarted, *messages.Busy, *messages.ScanFinished:
		if t := c.tabletByActorID(env.to.id); t != nil {
			t.onServerMessage(env.msg)
		}
	}
}

// tabletByActorID finds a tablet actor by its actor id ("tablet-N").
func (c *coordinator) tabletByActorID(id string) *tabletActor {
	n, ok := strings.CutPrefix(id, "tablet-")
	if !ok {
		return nil
	}
	i, err := strconv.Atoi(n)
	if err != nil || i < 0 || i >= len(c.tablets) {
		return nil
	}
	return c.tablets[i]
}

// endpointDown: the remote endpoint at addr terminated.
func (c *coordinator) endpointDown(addr string) { c.book.endpointDown(addr) }

func (c *coordinator) onScanRequest(m *messages.ScanRequest) {
	w := c.w
	reject := func(code messages.ErrorCode, msg string) {
		w.net.send(c.router(), pidOf(m.GetClient()), &messages.ScanError{RequestId: m.GetRequestId(), Code: code, Message: msg})
	}
	if err := wire.ValidateScanRequest(m); err != nil {
		reject(messages.ErrorCode_ERROR_CODE_BAD_REQUEST, "bad ScanRequest: "+err.Error())
		return
	}
	t := c.tabletFor(m.GetTablet())
	if t == nil {
		reject(messages.ErrorCode_ERROR_CODE_NO_SUCH_TABLET, fmt.Sprintf("no tablet %d", m.GetTablet().GetIndex()))
		return
	}
	t.onScanRequest(m)
}

func (c *coordinator) tabletFor(ref *messages.TabletRef) *tabletActor {
	i := int(ref.GetIndex())
	if ref.GetTable() != c.w.truth.name || ref.GetGeneration() != 1 || i >= len(c.tablets) {
		return nil
	}
	if c.tablets[i] == nil {
		r := c.w.truth.refs[i]
		c.tablets[i] = &tabletActor{co: c, ref: r, self: pid{c.addr, fmt.Sprintf("tablet-%d", i)},
			sel:   selection.Tablet{Table: r.GetTable(), PrevEndRow: r.GetPrevEndRow(), EndRow: r.GetEndRow()},
			rng:   rand.New(rand.NewPCG(c.w.s.rng.Uint64(), uint64(i))),
			flows: map[string]*flowEntry{}}
	}
	return c.tablets[i]
}

// tabletActor is the shell of coordinator/tablet.go around coordpkg.ScanFlow:
// it turns messages and timers into flow calls and carries out the
// flow's actions over the simulated network.
type tabletActor struct {
	co    *coordinator
	ref   *messages.TabletRef
	self  pid
	sel   selection.Tablet
	state selection.TabletState
	rng   *rand.Rand
	flows map[string]*flowEntry
	check *event // the pending lost-server check, armed while flows exist
}

// flowEntry is one running ScanRequest.
type flowEntry struct {
	id      string
	flow    *coordpkg.ScanFlow
	profile *selection.Profile
	targets map[uint32]pid
	// incarnations: each attempt's server incarnation at dispatch.
	incarnations map[uint32]string
	timers       []*event
	started      time.Time
}

func (t *tabletActor) onScanRequest(m *messages.ScanRequest) {
	w := t.co.w
	now := w.s.now
	if _, dup := t.flows[m.RequestId]; dup {
		return
	}
	tr := tablets.Range{Start: t.ref.GetPrevEndRow(), End: t.ref.GetEndRow()}
	r := tablets.Range{Start: m.GetRange().GetStart(), End: m.GetRange().GetEnd()}.Intersect(tr)
	m.Range = &messages.KeyRange{Start: r.Start, End: r.End}
	prof := w.profiles.ForHints(m.GetHints())
	var avoid []selection.Attempt
	view := t.co.book.View(now)
	for _, id := range m.GetAvoidServers() {
		host := ""
		if s := view.Server(selection.ServerID(id)); s != nil {
			host = s.Host
			t.co.book.penalize(now, s.ID)
		}
		avoid = append(avoid, selection.Attempt{Server: selection.ServerID(id), Host: host, Result: selection.Stalled, Start: now, End: now})
	}
	e := &flowEntry{id: m.RequestId, profile: prof, targets: map[uint32]pid{}, incarnations: map[uint32]string{}, started: now}
	e.flow = coordpkg.NewScanFlow(m, wire.Deadline(now, m.GetTimeoutMs(), w.cfg.Flow.MaxFlowAge), w.cfg.Flow, prof.TimeToWaitForScanServers, avoid)
	t.flows[m.RequestId] = e
	w.stats.Flows++
	if r.Empty() {
		w.net.send(t.self, pidOf(m.Client), &messages.ScanFinished{RequestId: m.RequestId})
		delete(t.flows, m.RequestId)
		return
	}
	t.apply(e, e.flow.Start(now, t.picker(e)))
	t.armCheck()
}

// armCheck schedules the next lost-server check while flows exist.
func (t *tabletActor) armCheck() {
	if t.check != nil || len(t.flows) == 0 {
		return
	}
	t.check = t.co.proc.timer(sweepInterval, "", "lost-server check", func() {
		t.check = nil
		t.checkLost()
	})
}

// checkLost ends the attempts whose server left the view (not alive,
// gone, or a new incarnation), as the tablet actor does.
func (t *tabletActor) checkLost() {
	now := t.co.w.s.now
	view := t.co.book.View(now)
	for _, id := range sortedStrings(t.flows) {
		e := t.flows[id]
		for _, a := range e.flow.Attempts() {
			if !a.Live() || !a.Sent() {
				continue
			}
			if s := view.Server(a.Sel.Server); s != nil && s.Alive && s.Incarnation == e.incarnations[a.N] {
				continue
			}
			t.apply(e, e.flow.OnServerLost(now, a.N, t.picker(e)))
			if t.flows[id] == nil {
				break
			}
		}
	}
	t.armCheck()
}

func (t *tabletActor) onServerMessage(msg any) {
	now := t.co.w.s.now
	switch m := msg.(type) {
	case *messages.ScanStarted:
		if e := t.flows[m.GetRequestId()]; e != nil {
			t.apply(e, e.flow.OnStarted(now, m.GetAttempt(), m.GetFirstData(), time.Duration(m.GetQueuedUs())*time.Microsecond))
		}
	case *messages.Busy:
		if e := t.flows[m.GetRequestId()]; e != nil {
			t.apply(e, e.flow.OnBusy(now, m.GetAttempt(), t.picker(e)))
		}
	case *messages.ScanFinished:
		if e := t.flows[m.GetRequestId()]; e != nil {
			t.apply(e, e.flow.OnFinished(now, m, t.picker(e)))
		}
	}
}

func (t *tabletActor) onDone(m *messages.ScanDone) {
	if e := t.flows[m.GetRequestId()]; e != nil {
		t.apply(e, e.flow.OnDone(t.co.w.s.now, m.GetAbandoned(), m.GetWinnerAttempt()))
	}
}

func (t *tabletActor) picker(e *flowEntry) coordpkg.Picker {
	w := t.co.w
	return func(now time.Time, history []selection.Attempt, hedge bool) (selection.Decision, error) {
		in := &selection.Input{Tablet: t.sel, Profile: e.profile, Attempts: history, Hedge: hedge, View: t.co.book.View(now),
			Now: now, Rand: t.rng, State: &t.state, LocalHost: t.co.addr}
		d, err := w.profiles.Policy(e.profile).Select(in)
		if errors.Is(err, selection.ErrNoServer) {
			err = fmt.Errorf("no scan server in group %q for profile %q: %w", e.profile.Group, e.profile.Name, err)
		}
		return d, err
	}
}

// onTimer mirrors the tablet actor: a timer that would blame a server
// first goes once through the back of the mailbox, so that the server's
// answer already waiting there (e.g. held while the coordinator was
// paused) is handled first.
func (t *tabletActor) onTimer(id string, kind coordpkg.TimerKind, n uint32, queued bool) {
	e := t.flows[id]
	if e == nil {
		return
	}
	if a := e.flow.Attempt(n); a != nil && !queued && kind != coordpkg.TimerDispatch && a.Live() && !a.FirstData() {
		e.timers = append(e.timers, t.co.proc.timer(0, id, "flow timer (requeued)", func() { t.onTimer(id, kind, n, true) }))
		return
	}
	t.apply(e, e.flow.OnTimer(t.co.w.s.now, kind, n, t.picker(e)))
}

// apply carries out a flow's actions, as TabletActor.apply does.
func (t *tabletActor) apply(e *flowEntry, acts []coordpkg.Action) {
	w := t.co.w
	now := w.s.now
	book := t.co.book
	if w.mut.flowActions != nil {
		acts = w.mut.flowActions(acts)
	}
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		if w.trace.on {
			w.trace.printf("%s %s: %s", t.self, e.id, describeAction(a))
		}
		switch a.Kind {
		case coordpkg.ActDispatch:
			s := book.View(now).Server(a.Attempt.Sel.Server)
			if s == nil || !s.Alive || s.Address == "" {
				acts = append(acts, e.flow.OnUnreachable(now, a.Attempt.N, t.picker(e))...)
				continue
			}
			to := pid{s.Address, s.ActorID}
			e.targets[a.Attempt.N] = to
			e.incarnations[a.Attempt.N] = s.Incarnation
			req := e.flow.Req
			w.net.send(t.self, to, &messages.StartScan{RequestId: e.id, Attempt: a.Attempt.N, Client: req.Client, TabletActor: t.self.wire(),
				Tablet: t.ref, Range: req.Range, ResumeAfter: req.ResumeAfter, BatchRows: req.BatchRows, BatchBytes: req.BatchBytes,
				BusyTimeoutUs: a.Attempt.Decision.BusyTimeout.Microseconds(), TimeoutMs: wire.TimeoutMs(e.flow.Deadline().Sub(now)), Limit: req.Limit,
				Window: req.Window, Server: string(s.ID)})
			book.dispatched(now, s.ID, a.Attempt.Sel.Hedge)
			w.stats.Dispatches++
			if a.Attempt.Sel.Hedge {
				w.stats.Hedges++
			}
		case coordpkg.ActCancel:
			if to, ok := e.targets[a.Attempt.N]; ok {
				reason := "cancelled by tablet actor: " + a.Attempt.Sel.Result.String()
				if a.Attempt.Live() {
					reason = "cancelled by tablet actor: another attempt delivered data first"
				}
				w.net.send(t.self, to, &messages.Cancel{RequestId: e.id, Attempt: a.Attempt.N, Reason: reason, UnlessStreaming: a.UnlessStreaming})
			}
		case coordpkg.ActAccount:
			book.ended(now, a.Attempt.Sel.Server, a.Result)
			w.stats.Results[a.Result]++
			switch a.Result {
			case selection.Error, selection.Timeout, selection.Stalled:
				w.blamed(blame{by: t.co.addr, server: a.Attempt.Sel.Server, requests: []string{e.id}, attempt: a.Attempt.N,
					from: a.Attempt.Sel.Start, what: "attempt ended " + a.Result.String()})
			}
		case coordpkg.ActSlowdown:
			book.slowdown(now, a.Attempt.Sel.Server)
		case coordpkg.ActLatency:
			book.latency(now, a.Attempt.Sel.Server, a.Latency)
		case coordpkg.ActTimer:
			var n uint32
			if a.Attempt != nil {
				n = a.Attempt.N
			}
			kind, id := a.Timer, e.id
			e.timers = append(e.timers, t.co.proc.timer(a.After, id, "flow timer", func() { t.onTimer(id, kind, n, false) }))
		case coordpkg.ActTimeoutSignal:
			for _, c := range w.coords {
				w.net.send(t.self, pid{c.addr, "timeout-signals"}, &messages.LoadSignal{Host: a.Attempt.Sel.Host,
					Server: string(a.Attempt.Sel.Server), RequestId: e.id, AtUnixMs: now.UnixMilli(), Origin: t.co.addr})
			}
		case coordpkg.ActFail:
			w.net.send(t.self, pidOf(e.flow.Req.Client), a.Error)
		case coordpkg.ActComplete:
			if !e.flow.Done() {
				w.violate("%s: flow %s completed but ScanFlow.Done is false", t.self, e.id)
			}
			for _, at := range e.flow.Attempts() {
				if at.Live() {
					w.violate("%s: flow %s completed with attempt %d on %s still live", t.self, e.id, at.N, at.Sel.Server)
				}
			}
			delete(t.flows, e.id)
			for _, ev := range e.timers {
				w.s.cancel(ev)
			}
			e.timers = nil
		}
	}
}

func describeAction(a coordpkg.Action) string {
	n := uint32(0)
	srv := ""
	if a.Attempt != nil {
		n, srv = a.Attempt.N, string(a.Attempt.Sel.Server)
	}
	switch a.Kind {
	case coordpkg.ActDispatch:
		return fmt.Sprintf("dispatch attempt %d to %s (plan %d, busy %v, hedge %v)", n, srv, a.Attempt.Sel.PlanIndex, a.Attempt.Decision.BusyTimeout, a.Attempt.Sel.Hedge)
	case coordpkg.ActCancel:
		return fmt.Sprintf("cancel attempt %d on %s (unless streaming: %v)", n, srv, a.UnlessStreaming)
	case coordpkg.ActAccount:
		return fmt.Sprintf("account attempt %d on %s: %s", n, srv, a.Result)
	case coordpkg.ActSlowdown:
		return fmt.Sprintf("slowdown of %s (attempt %d)", srv, n)
	case coordpkg.ActLatency:
		return fmt.Sprintf("start latency %v of %s", a.Latency, srv)
	case coordpkg.ActTimer:
		return fmt.Sprintf("%s timer for attempt %d in %v", timerName(a.Timer), n, a.After)
	case coordpkg.ActTimeoutSignal:
		return fmt.Sprintf("timeout signal for %s", srv)
	case coordpkg.ActFail:
		return fmt.Sprintf("fail: %s %s", a.Error.GetCode(), a.Error.GetMessage())
	case coordpkg.ActComplete:
		return "flow complete"
	}
	return fmt.Sprintf("action %d", a.Kind)
}

func timerName(k coordpkg.TimerKind) string {
	names := [...]string{coordpkg.TimerDispatch: "dispatch", coordpkg.TimerBusy: "busy", coordpkg.TimerHedge: "hedge",
		coordpkg.TimerData: "data", coordpkg.TimerStall: "stall", coordpkg.TimerRetry: "retry", coordpkg.TimerDeadline: "deadline"}
	if int(k) < len(names) && names[k] != "" {
		return names[k]
	}
	return fmt.Sprintf("timer(%d)", k)
}
