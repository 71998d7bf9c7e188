package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/actorenv"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
	"google.golang.org/protobuf/proto"
)

func serverIDOf(s string) selection.ServerID { return selection.ServerID(s) }

// flowTimer is a ScanFlow timer firing (local message).
type flowTimer struct {
	req  string
	seq  uint64 // key in flowEntry.timers
	kind TimerKind
	n    uint32
	// queued: the timer went once through the back of the mailbox.
	queued bool
}

// lostCheck asks the tablet actor to look for attempts whose server left
// the load view (local message; it does not keep an idle actor alive).
type lostCheck struct{}

// idleCheck: the tablet actor's idle timer fired (local message).
type idleCheck struct{}

// The idle-stop handshake between a tablet actor and the router (local
// messages). An idle tablet actor asks (tabletIdle); the router removes it
// from its map, so later requests for the tablet wait in the router, and
// answers idleStopOK. The router sends nothing more to the actor; whatever
// it sent before sits in the actor's mailbox ahead of the answer and is
// handled. So the actor stops on idleStopOK only if it has still no flow;
// otherwise it tells the router it stays (tabletStays) and the router
// hands it the requests that waited. Nothing sent to a stopping tablet
// actor is dropped.
type tabletIdle struct {
	name string
	pid  *actor.PID
}

type idleStopOK struct{}

// movedAway: the cluster topology changed and another coordinator owns
// this tablet now (local message from the router). The actor stops as
// soon as its flows have ended (through the idle-stop handshake).
type movedAway struct{}

// movedIdle is how soon a moved tablet actor asks to stop once idle.
const movedIdle = 100 * time.Millisecond

type tabletStays struct {
	name string
	pid  *actor.PID
}

// flowEntry is one running ScanRequest.
type flowEntry struct {
	rs       *routedScan // the request as it arrived
	flow     *ScanFlow
	profiles *selection.Profiles
	profile  *selection.Profile
	targets  map[uint32]*actor.PID
	// incarnations: the incarnation of each attempt's server at dispatch;
	// a server that restarted lost the attempt.
	incarnations map[uint32]string
	// timers not yet fired, stopped when the flow completes.
	timers   map[uint64]actorenv.Timer
	timerSeq uint64
	// metrics: when the request reached us, when an attempt was first
	// known to deliver data, how it ended ("" = ok), and where its
	// selection times go.
	start, firstRow time.Time
	// progressed: when the client was last told the request is alive
	// (the request's arrival, then each ScanProgress).
	progressed time.Time
	outcome    string
	decide     prometheus.Observer
}

// stopTimers stops every pending timer of the flow.
func (e *flowEntry) stopTimers() {
	for k, tm := range e.timers {
		tm.Stop()
		delete(e.timers, k)
	}
}

// TabletActor decides, scan by scan, which server serves its tablet. It
// owns the tablet's per-request ScanFlows and its policy state; the
// decisions themselves come from the profile's selection.Policy.
type TabletActor struct {
	d     *tabletDeps
	table *messages.TableMeta
	meta  *messages.TabletMeta
	sel   selection.Tablet
	state selection.TabletState
	rng   *rand.Rand
	flows map[string]*flowEntry
	self  *actor.PID
	root  *actor.RootContext
	// check is the pending lostCheck timer (armed while flows exist).
	check actorenv.Timer
	// idle is the idle timer; lastActive the last message that was not a
	// timer of ours; retiring: we asked the router to let us stop.
	idle       actorenv.Timer
	lastActive time.Time
	retiring   bool
	// moved: another coordinator owns the tablet now (movedAway).
	moved bool
	// probes: prequal probes sent and not answered yet (probe.go).
	probes prober
	// gate: closed when we decide to stop; our mailbox then hands what is
	// left to the router (gatedmailbox.go).
	gate *stopGate
	// routerEpoch: the router incarnation that spawned us (a router that
	// restarts stops us; we then hand it our requests).
	routerEpoch uint64
	// files, rootsLeftOut: what every StartScan carries for the tablet
	// (tablets.DispatchFiles).
	files        []*messages.FileRef
	rootsLeftOut bool
}

func newTabletActor(d *tabletDeps, table *messages.TableMeta, meta *messages.TabletMeta) *TabletActor {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d/%d", table.GetName(), table.GetGeneration(), meta.GetRef().GetIndex())
	seed := h.Sum64() ^ uint64(d.now().UnixNano())
	files, leftOut := tablets.DispatchFiles(meta)
	return &TabletActor{d: d, table: table, meta: meta,
		sel:   selection.Tablet{Table: table.GetName(), PrevEndRow: meta.GetRef().GetPrevEndRow(), EndRow: meta.GetRef().GetEndRow()},
		rng:   rand.New(rand.NewPCG(seed, seed>>1|1)),
		flows: map[string]*flowEntry{}, files: files, rootsLeftOut: leftOut}
}

// Tablet is the tablet this actor serves.
func (t *TabletActor) Tablet() *messages.TabletRef { return t.meta.GetRef() }

// Receive implements actor.Actor.
func (t *TabletActor) Receive(c actor.Context) {
	now := t.d.now()
	switch c.Message().(type) {
	case *lostCheck, *idleCheck, *movedAway, *messages.ProbeReply, actor.SystemMessage, actor.AutoReceiveMessage:
	default:
		t.lastActive = now
	}
	switch m := c.Message().(type) {
	case *actor.Started:
		t.self = c.Self()
		t.root = c.ActorSystem().Root
		t.d.counters.tabletActors.Add(1)
		t.d.counters.tabletStarts.Add(1)
		t.armIdle(t.d.idle)
	case *actor.Stopped:
		t.d.counters.tabletActors.Add(-1)
	case *actor.Restarting:
		// A panic: the fresh incarnation (Started again) takes the
		// requests that had no data yet.
		t.d.counters.tabletActors.Add(-1)
		t.handOver(now, t.self, "tablet actor failed")
		t.stopTimers()
	case *idleCheck:
		t.idle = nil
		t.onIdleCheck(c, now)
	case *movedAway:
		if !t.moved {
			t.moved = true
			t.armIdle(movedIdle)
		}
	case *idleStopOK:
		t.retiring = false
		if len(t.flows) == 0 {
			t.closeGate()
			c.Stop(t.self)
			return
		}
		// Requests reached us between our question and the answer.
		c.Send(c.Parent(), &tabletStays{name: t.name(), pid: t.self})
		t.armIdle(t.d.idle)
	case *actor.Stopping:
		t.closeGate()
		if t.d.routerEpoch.Load() != t.routerEpoch {
			// Our router restarts: its fresh incarnation takes our requests.
			t.handOver(now, c.Parent(), "router failed")
		}
		for id, e := range t.flows {
			t.apply(now, id, e, e.flow.Leave(now, "coordinator tablet actor stopping"))
		}
		t.stopTimers()
	case *lostCheck:
		t.check = nil
		t.checkLost(now)
		t.sendProgress(now)
	case *routedScan:
		t.onRoutedScan(c, now, m)
	case *messages.ScanRequest:
		t.onDirectScan(c, now, m)
	case *messages.ScanStarted:
		t.heardStarted(m.GetServer(), int(m.GetQueueLen()))
		if e := t.answered(m.GetRequestId(), m.GetAttempt(), m.GetServer(), "ScanStarted"); e != nil {
			t.apply(now, m.RequestId, e, e.flow.OnStarted(now, m.GetAttempt(), m.GetFirstData(), time.Duration(m.GetQueuedUs())*time.Microsecond))
		}
	case *messages.Busy:
		t.heard(m.GetServer())
		if e := t.answered(m.GetRequestId(), m.GetAttempt(), m.GetServer(), "Busy"); e != nil {
			t.apply(now, m.RequestId, e, e.flow.OnBusy(now, m.GetAttempt(), t.picker(e)))
		}
	case *messages.ScanFinished:
		e := t.answered(m.GetRequestId(), m.GetAttempt(), m.GetServer(), "ScanFinished")
		if a := e.attempt(m.GetAttempt()); a == nil || !a.Live() || !a.Sent() || m.GetError() != messages.ErrorCode_ERROR_CODE_UNSPECIFIED {
			// Not for a live attempt's success: it is accounted to its
			// server as started (evEnded), which records the answer as
			// evAnswer would, so one host event and one publish fewer.
			t.heard(m.GetServer())
		}
		if e != nil {
			t.recordBlockTime(e, m)
			t.apply(now, m.RequestId, e, e.flow.OnFinished(now, t.stale(m), t.picker(e)))
		}
	case *messages.ScanDone:
		if e := t.flows[m.GetRequestId()]; e != nil {
			if m.GetAbandoned() {
				e.outcome = OutcomeCancelled
			}
			t.apply(now, m.RequestId, e, e.flow.OnDone(now, m.GetAbandoned(), m.GetWinnerAttempt()))
		}
	case *flowTimer:
		e := t.flows[m.req]
		if e == nil {
			return
		}
		delete(e.timers, m.seq)
		if a := e.flow.Attempt(m.n); a != nil && !m.queued && m.kind != TimerDispatch && a.Live() && !a.FirstData() {
			// Before blaming the server, let whatever already sits in the
			// mailbox (its ScanStarted or Busy, delayed by our own load) be
			// handled: the timer acts only after a trip to the back.
			m.queued = true
			c.Send(t.self, m)
			return
		}
		t.apply(now, m.req, e, e.flow.OnTimer(now, m.kind, m.n, t.picker(e)))
	case *messages.RouteRequest:
		c.Respond(t.route(now, m))
	case *messages.ProbeReply:
		t.onProbeReply(now, m)
	}
}

// answered returns the flow of a scan server's answer about attempt n of
// request id, or nil: no such flow, or the attempt went to another server
// than the one answering (the remote guard binds a server id to its
// sender, so another server cannot speak for the attempt's).
func (t *TabletActor) answered(id string, n uint32, server, what string) *flowEntry {
	e := t.flows[id]
	if e == nil {
		return nil
	}
	if a := e.flow.Attempt(n); a != nil && string(a.Sel.Server) != server {
		t.d.countBad(what, fmt.Errorf("attempt %d of request %s went to %s, not %s", n, id, a.Sel.Server, server))
		return nil
	}
	return e
}

// attempt is attempt n of e's flow; nil when e is nil or has no such
// attempt.
func (e *flowEntry) attempt(n uint32) *FlowAttempt {
	if e == nil {
		return nil
	}
	return e.flow.Attempt(n)
}

// stopTimers stops the lost-check and idle timers.
func (t *TabletActor) stopTimers() {
	for _, tm := range []*actorenv.Timer{&t.check, &t.idle} {
		if *tm != nil {
			(*tm).Stop()
			*tm = nil
		}
	}
}

// handOver ends every flow because this incarnation of the actor goes
// (supervision.go): attempts are cancelled unless they stream and
// accounted to their hosts; a request that had no data yet is sent to to
// (a fresh incarnation) the first time, and answered INTERNAL the second;
// the client of one that streams reads on from its server.
func (t *TabletActor) handOver(now time.Time, to *actor.PID, why string) {
	for id, e := range t.flows {
		winner := e.flow.Winner() != 0
		t.apply(now, id, e, e.flow.Quit(now))
		switch {
		case winner:
		case e.rs.restarts == 0:
			t.root.Send(to, &routedScan{req: e.rs.req, deadline: e.rs.deadline, restarts: 1, attempts: e.flow.LastAttempt()})
		default:
			rejectScan(t.d.counters, t.root, e.rs.req, messages.ErrorCode_ERROR_CODE_INTERNAL,
				fmt.Sprintf("coordinator: %s twice while serving this request; giving up on it", why))
		}
	}
}

// closeGate makes our mailbox send what it still holds to the router.
func (t *TabletActor) closeGate() {
	if t.gate != nil {
		t.gate.closed.Store(true)
	}
}

func (t *TabletActor) name() string {
	return tabletActorName(t.table.GetName(), t.table.GetGeneration(), t.meta.GetRef().GetIndex())
}

// armIdle (re)starts the idle timer.
func (t *TabletActor) armIdle(after time.Duration) {
	if t.idle != nil {
		t.idle.Stop()
	}
	self, root := t.self, t.root
	t.idle = t.d.env.After(after, func() { root.Send(self, &idleCheck{}) })
}

// onIdleCheck asks the router to let us stop once we had no flow and no
// message for TabletIdle. (protoactor's ReceiveTimeout is not used: it is
// disarmed for good once it fires, and its timer races with the actor.)
func (t *TabletActor) onIdleCheck(c actor.Context, now time.Time) {
	if t.retiring {
		return
	}
	idle := t.d.idle
	if t.moved {
		idle = min(idle, movedIdle)
	}
	if len(t.flows) > 0 {
		t.armIdle(idle)
		return
	}
	if since := now.Sub(t.lastActive); since < idle {
		t.armIdle(idle - since)
		return
	}
	t.retiring = true
	c.Send(c.Parent(), &tabletIdle{name: t.name(), pid: t.self})
}

// queued is the number of messages waiting in the actor's mailbox.
func (t *TabletActor) queued() int {
	if t.gate == nil {
		return 0
	}
	return t.gate.queued()
}

func (t *TabletActor) onScanRequest(now time.Time, rs *routedScan) {
	m := rs.req
	if _, dup := t.flows[m.RequestId]; dup {
		return
	}
	if q := t.queued(); q > t.d.maxQueue {
		t.d.countOverloaded("tablet actor queue")
		rejectScan(t.d.counters, t.root, m, messages.ErrorCode_ERROR_CODE_OVERLOADED,
			fmt.Sprintf("coordinator overloaded: %d messages wait for the actor of tablet %s (MaxTabletQueue %d); retry later", q, t.name(), t.d.maxQueue))
		return
	}
	if n := t.d.counters.flows.Load(); n >= int64(t.d.maxFlows) {
		t.d.countOverloaded("scan flows")
		rejectScan(t.d.counters, t.root, m, messages.ErrorCode_ERROR_CODE_OVERLOADED,
			fmt.Sprintf("coordinator overloaded: %d scans running (MaxFlows %d); retry later", n, t.d.maxFlows))
		return
	}
	client := wire.ToPID(m.Client)
	// The client clips its range to the tablet; clip again so a confused
	// client can never read rows of a neighbour tablet.
	tr := tablets.Range{Start: t.meta.GetRef().GetPrevEndRow(), End: t.meta.GetRef().GetEndRow()}
	r := tablets.Range{Start: m.GetRange().GetStart(), End: m.GetRange().GetEnd()}.Intersect(tr)
	m.Range = &messages.KeyRange{Start: r.Start, End: r.End}
	profiles := t.d.profiles()
	prof := profiles.ForHints(m.GetHints())
	var avoid []selection.Attempt
	view := t.d.board.View()
	for _, id := range m.GetAvoidServers() {
		s := view.Server(serverIDOf(id))
		host := ""
		if s != nil {
			host = s.Host
			t.hostEvent(host, &hostEvent{kind: evPenalize, server: s.ID})
		}
		avoid = append(avoid, selection.Attempt{Server: serverIDOf(id), Host: host, Result: selection.Stalled, Start: now, End: now})
	}
	e := &flowEntry{rs: rs, profiles: profiles, profile: prof, targets: map[uint32]*actor.PID{}, incarnations: map[uint32]string{},
		timers: map[uint64]actorenv.Timer{}, start: now, progressed: now, decide: t.d.metrics.selectionObserver(prof)}
	e.flow = NewScanFlow(m, rs.deadline, t.d.flow, prof.TimeToWaitForScanServers, avoid)
	e.flow.SkipAttempts(rs.attempts)
	t.d.counters.scans.Add(1)
	if r.Empty() {
		// Nothing to read: answer at once without a server.
		t.root.Send(client, &messages.ScanFinished{RequestId: m.RequestId, Attempt: 0, Server: ""})
		return
	}
	t.flows[m.RequestId] = e
	t.d.counters.flows.Add(1)
	t.apply(now, m.RequestId, e, e.flow.Start(now, t.picker(e)))
	t.armCheck()
}

// stale turns a CORRUPT_BLOCK answer into STALE_GENERATION when the
// coordinator knows that newer ingests deleted the scanned generation (a
// scan server without a view of the metadata cannot tell). m may be
// shared with the client (in-process), so it is copied, not changed.
func (t *TabletActor) stale(m *messages.ScanFinished) *messages.ScanFinished {
	if m.GetError() != messages.ErrorCode_ERROR_CODE_CORRUPT_BLOCK {
		return m
	}
	table, gen := t.table.GetName(), t.table.GetGeneration()
	cur, stale := wire.Stale(context.Background(), t.d.gens, table, gen)
	if !stale {
		return m
	}
	c := proto.Clone(m).(*messages.ScanFinished)
	c.Error = messages.ErrorCode_ERROR_CODE_STALE_GENERATION
	c.ErrorMessage = wire.StaleMessage(table, gen, cur) + " (" + m.GetErrorMessage() + ")"
	return c
}

// noServerError is selection.ErrNoServer naming the profile and group.
type noServerError struct{ profile, group string }

func (e *noServerError) Error() string {
	return fmt.Sprintf("no scan server in group %q for profile %q", e.group, e.profile)
}

func (e *noServerError) Unwrap() error { return selection.ErrNoServer }

func (t *TabletActor) picker(e *flowEntry) Picker {
	return func(now time.Time, history []selection.Attempt, hedge bool) (selection.Decision, error) {
		in := &selection.Input{Tablet: t.sel, Profile: e.profile, Attempts: history, Hedge: hedge, View: t.d.board.View(),
			Now: now, Rand: t.rng, State: &t.state, LocalHost: t.d.hostname}
		pol := e.profiles.Policy(e.profile)
		start := time.Now()
		d, err := pol.Select(in)
		if e.decide != nil {
			e.decide.Observe(time.Since(start).Seconds())
		}
		if pr, ok := pol.(selection.Prober); ok && err == nil {
			t.sendProbes(now, pr, in)
		}
		if errors.Is(err, selection.ErrNoServer) {
			err = &noServerError{profile: e.profile.Name, group: e.profile.Group}
		}
		return d, err
	}
}

// armCheck schedules the next lostCheck while flows exist.
func (t *TabletActor) armCheck() {
	if t.check != nil || len(t.flows) == 0 {
		return
	}
	self, root := t.self, t.root
	t.check = t.d.env.After(t.d.lostEvery, func() { root.Send(self, &lostCheck{}) })
}

// checkLost ends the attempts whose server left the view (not alive, gone,
// or a new incarnation): their ScanFinished will never come.
func (t *TabletActor) checkLost(now time.Time) {
	view := t.d.board.View()
	for id, e := range t.flows {
		for _, a := range e.flow.Attempts() {
			if !a.Live() || !a.Sent() {
				continue
			}
			s := view.Server(a.Sel.Server)
			if s != nil && s.Alive && s.Incarnation == e.incarnations[a.N] {
				continue
			}
			t.apply(now, id, e, e.flow.OnServerLost(now, a.N, t.picker(e)))
			if t.flows[id] == nil {
				break
			}
		}
	}
	t.armCheck()
}

// sendProgress tells the client of each flow without data that its
// request is alive, at most once per FlowConfig.ProgressEvery.
func (t *TabletActor) sendProgress(now time.Time) {
	every := t.d.flow.ProgressEvery
	for id, e := range t.flows {
		if e.flow.Winner() != 0 || now.Sub(e.progressed) < every {
			continue
		}
		if client := wire.ToPID(e.flow.Req.GetClient()); client != nil {
			e.progressed = now
			t.root.Send(client, &messages.ScanProgress{RequestId: id, Coordinator: t.self.Address, State: e.flow.Progress(now)})
			t.d.counters.progress.Add(1)
		}
	}
}

// heard ends a scan server's silence (selection.ServerLoad.UnansweredSince)
// on any message from it, also one about a scan or attempt this actor has
// closed: a hedge loser that answers its Cancel is alive, while a paused
// or hung server answers nothing. The host actor drops the event at once
// when the server was not silent (no new view).
func (t *TabletActor) heard(server string) {
	t.serverEvent(server, &hostEvent{kind: evAnswer})
}

// serverEvent sends e about server to the host actor of the server's host
// as the board last saw it (none for a server it does not know).
func (t *TabletActor) serverEvent(server string, e *hostEvent) {
	if v := t.d.board.Latest(); v != nil {
		if s := v.Server(selection.ServerID(server)); s != nil {
			e.server = s.ID
			t.hostEvent(s.Host, e)
		}
	}
}

// maxBlockTime bounds the time per block a ScanFinished may report: a
// larger one is a stuck scan, not a measure of the cache.
const maxBlockTime = 10 * time.Second

// recordBlockTime feeds a successful scan's server time per block to the
// board, under the placement its decision had (selection.BlockTimes).
func (t *TabletActor) recordBlockTime(e *flowEntry, m *messages.ScanFinished) {
	a := e.flow.Attempt(m.GetAttempt())
	if a == nil || a.Decision.Placement == selection.PlacementUnknown ||
		m.GetError() != messages.ErrorCode_ERROR_CODE_UNSPECIFIED || m.GetBlocksRead() == 0 || m.GetDurationUs() <= 0 {
		return
	}
	perUs := float64(m.GetDurationUs()) / float64(m.GetBlocksRead()) // no overflow from a wild value
	if perUs <= float64(maxBlockTime/time.Microsecond) {
		t.d.board.RecordBlockTime(a.Decision.Placement, time.Duration(perUs*float64(time.Microsecond)))
	}
}

// heardStarted is heard for a ScanStarted, which also reports the
// server's queue length.
func (t *TabletActor) heardStarted(server string, queueLen int) {
	t.serverEvent(server, &hostEvent{kind: evQueueReport, queueLen: queueLen})
}

func (t *TabletActor) hostEvent(host string, e *hostEvent) {
	if v, ok := t.d.hostPIDs.Load(host); ok {
		t.root.Send(v.(*actor.PID), e)
	}
}

// apply carries out a flow's actions.
func (t *TabletActor) apply(now time.Time, id string, e *flowEntry, acts []Action) {
	if e.firstRow.IsZero() && e.flow.Winner() != 0 {
		e.firstRow = now
	}
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		switch a.Kind {
		case ActDispatch:
			s := t.d.board.View().Server(a.Attempt.Sel.Server)
			if s == nil || !s.Alive || s.Address == "" {
				acts = append(acts, e.flow.OnUnreachable(now, a.Attempt.N, t.picker(e))...)
				continue
			}
			pid := actor.NewPID(s.Address, s.ActorID)
			e.targets[a.Attempt.N] = pid
			e.incarnations[a.Attempt.N] = s.Incarnation
			// The host actor hears of the dispatch before the StartScan
			// goes: it runs here (hostProps), so nothing of it is left to
			// run between the StartScan's writer and the write.
			t.hostEvent(s.Host, &hostEvent{kind: evDispatched, server: s.ID, incarnation: s.Incarnation, hedge: a.Attempt.Sel.Hedge})
			req := e.flow.Req
			t.root.Send(pid, &messages.StartScan{RequestId: id, Attempt: a.Attempt.N, Client: req.Client, TabletActor: wire.FromPID(t.self),
				Tablet: t.meta.GetRef(), Files: t.files, RootsLeftOut: t.rootsLeftOut, Manifests: t.meta.GetManifests(), Range: req.Range, ResumeAfter: req.ResumeAfter,
				BatchRows: req.BatchRows, BatchBytes: req.BatchBytes, BusyTimeoutUs: a.Attempt.Decision.BusyTimeout.Microseconds(),
				TimeoutMs: wire.TimeoutMs(e.flow.Deadline().Sub(now)), Limit: req.Limit, Window: req.Window, Server: string(s.ID),
				CountOnly: req.CountOnly, ProofsChecked: req.ProofsChecked})
			t.d.board.CountDispatch(a.Attempt.Sel.Hedge)
			t.d.counters.dispatches.Add(1)
			if a.Attempt.Sel.Hedge {
				t.d.counters.hedges.Add(1)
			}
		case ActCancel:
			if pid := e.targets[a.Attempt.N]; pid != nil {
				reason := "cancelled by tablet actor: " + a.Attempt.Sel.Result.String()
				if a.Attempt.Live() {
					reason = "cancelled by tablet actor: another attempt delivered data first"
				}
				t.root.Send(pid, &messages.Cancel{RequestId: id, Attempt: a.Attempt.N, Reason: reason, UnlessStreaming: a.UnlessStreaming})
			}
		case ActAccount:
			t.hostEvent(a.Attempt.Sel.Host, &hostEvent{kind: evEnded, server: a.Attempt.Sel.Server, result: a.Result,
				latency: a.Latency, incarnation: e.incarnations[a.Attempt.N]})
			switch a.Result {
			case selection.Busy:
				t.d.counters.busy.Add(1)
			case selection.Timeout:
				t.d.counters.timeouts.Add(1)
			}
		case ActSlowdown:
			t.hostEvent(a.Attempt.Sel.Host, &hostEvent{kind: evSlowdown, server: a.Attempt.Sel.Server, incarnation: e.incarnations[a.Attempt.N]})
		case ActLatency:
			t.d.board.RecordStartLatency(a.Latency)
			if len(acts) > 0 && acts[0].Kind == ActAccount && acts[0].Attempt == a.Attempt {
				// The attempt ends at once (its first batch was its
				// last): its latency rides in the evEnded, one host event.
				acts[0].Latency = a.Latency
				continue
			}
			t.hostEvent(a.Attempt.Sel.Host, &hostEvent{kind: evLatency, server: a.Attempt.Sel.Server, latency: a.Latency,
				incarnation: e.incarnations[a.Attempt.N]})
		case ActTimer:
			var n uint32
			if a.Attempt != nil {
				n = a.Attempt.N
			}
			e.timerSeq++
			msg := &flowTimer{req: id, seq: e.timerSeq, kind: a.Timer, n: n}
			self, root := t.self, t.root
			e.timers[msg.seq] = t.d.env.After(a.After, func() { root.Send(self, msg) })
		case ActTimeoutSignal:
			t.d.signal(bus.SignalTimeout, &messages.LoadSignal{Host: a.Attempt.Sel.Host, Server: string(a.Attempt.Sel.Server),
				RequestId: id, Table: t.table.GetName(), AtUnixMs: now.UnixMilli(), Origin: t.d.address()})
		case ActFail:
			t.d.counters.failed.Add(1)
			e.outcome = errorOutcome(a.Error.GetCode())
			if client := wire.ToPID(e.flow.Req.Client); client != nil {
				t.root.Send(client, a.Error)
			}
		case ActComplete:
			e.stopTimers()
			if t.flows[id] == e {
				delete(t.flows, id)
				t.d.counters.flows.Add(-1)
				t.d.metrics.scanEnded(e.profile, cmp.Or(e.outcome, OutcomeOK), e.start, e.firstRow, now)
			}
		}
	}
}

// route answers scanctl route: the decision sequence for a synthetic scan
// whose earlier attempts had the given results.
func (t *TabletActor) route(now time.Time, m *messages.RouteRequest) *messages.RouteReply {
	profiles := t.d.profiles()
	prof := profiles.ForHints(m.GetHints())
	reply := &messages.RouteReply{Profile: prof.Name, Policy: prof.Policy, Tablet: t.meta.GetRef()}
	var hist []selection.Attempt
	state := t.state.Clone() // a deep copy: routing must not disturb real scans
	rng := rand.New(rand.NewPCG(uint64(now.UnixNano()), 7))
	view := t.d.board.View()
	for i := 0; ; i++ {
		in := &selection.Input{Tablet: t.sel, Profile: prof, Attempts: hist, View: view, Now: now, Rand: rng, State: state,
			LocalHost: t.d.hostname, Explain: true}
		d, err := profiles.Policy(prof).Select(in)
		if err != nil {
			reply.Error = err.Error()
			return reply
		}
		if i == len(m.GetAttempts()) {
			reply.PlanIndex = uint32(d.PlanIndex)
			for _, c := range d.Candidates {
				reply.Candidates = append(reply.Candidates, string(c))
			}
			reply.Choice = string(d.Server)
			reply.Scores = d.Scores
			reply.BusyTimeoutUs = d.BusyTimeout.Microseconds()
			reply.DelayUs = d.Delay.Microseconds()
			reply.HedgeDelayUs = d.HedgeDelay.Microseconds()
			return reply
		}
		r := SelectionResult(m.GetAttempts()[i])
		if !r.Failed() {
			reply.Error = fmt.Sprintf("attempt %d: %s is not a failed result (use busy, error, timeout or stalled)", i+1, m.GetAttempts()[i])
			return reply
		}
		hist = append(hist, selection.Attempt{Server: d.Server, Host: d.Host, Result: r, Start: now, End: now, PlanIndex: d.PlanIndex})
		reply.Tried = append(reply.Tried, fmt.Sprintf("%s=%s", d.Server, r))
	}
}
