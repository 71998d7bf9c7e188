package coordinator

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
)

// hostEventKind names what happened to a server.
type hostEventKind uint8

const (
	evDispatched hostEventKind = iota + 1
	evEnded
	evSlowdown
	evLatency
	evBusySignal
	evTimeoutSignal
	evPenalize
	// evAnswer: a message from the server (see TabletActor.heard).
	evAnswer
	// evQueueReport: a ScanStarted from the server, with its queue length
	// then (queueLen).
	evQueueReport
)

// hostEvent is a local (never remote) message to a HostActor.
type hostEvent struct {
	kind     hostEventKind
	server   selection.ServerID
	result   selection.AttemptResult
	latency  time.Duration // evLatency; evEnded: a start latency sample too when > 0
	queueLen int
	hedge    bool // evDispatched: a hedged dispatch
	// incarnation, when set, is the server incarnation the event is
	// about: an event about an earlier incarnation (an attempt dispatched
	// before the server restarted) leaves the new one's counters alone.
	incarnation string
}

// serverGone tells a host actor its servers at address (or with id) left.
type serverGone struct {
	address string
	id      selection.ServerID
	reason  string
}

// setDecays tells a host actor the decay parameters in use.
type setDecays struct{ decays []selection.DecayParams }

type sweepTick struct{}

// serverState is a HostActor's working state for one server.
type serverState struct {
	load      selection.ServerLoad
	interval  time.Duration
	counts    serverCounts
	deadSince time.Time
	// heardAt is the liveness reference: the last heartbeat's time, moved
	// forward by the lateness of sweeps since (see Liveness).
	heardAt time.Time
	// pub is the server's copy in the last published view (nil: none
	// yet); changed says load or counts changed since. Every change of
	// load or counts sets changed (touch); publish copies only the changed
	// servers and shares the others' pub between views.
	pub     *pubServer
	changed bool
	// reconnect: a connect to the server came back undelivered; its next
	// heartbeat sends it again.
	reconnect bool
}

// touch records that s's load or counts changed: the next publish copies it.
func (s *serverState) touch() { s.changed = true }

// HostActor keeps the load counters of one host's servers and publishes
// them to the LoadBoard after every change. It is the only writer of its
// host's part of the view. A server out of the view for forget is
// forgotten; once all are, the actor asks the registry to be reaped (see
// hostIdle).
type HostActor struct {
	host     string
	board    *LoadBoard
	status   *sync.Map // host -> *hostStatus
	live     Liveness
	forget   time.Duration
	decays   []selection.DecayParams
	servers  map[selection.ServerID]*serverState
	now      func() time.Time
	counters *coordCounters
	stopping bool
	retiring bool // asked the registry to be reaped
	// statusHolder is this actor's entry in status, stored there at the
	// first publish into that map (statusIn); each publish replaces its
	// snapshot.
	statusHolder hostStatus
	statusIn     *sync.Map
}

// newHostActor makes a host actor whose sweeps forgive no lateness; the
// registry sets live.SweepInterval.
func newHostActor(host string, board *LoadBoard, status *sync.Map, misses int, forget time.Duration, now func() time.Time,
	counters *coordCounters) *HostActor {
	return &HostActor{host: host, board: board, status: status, live: Liveness{Misses: misses}, forget: forget,
		decays: board.Decays(), servers: map[selection.ServerID]*serverState{}, now: now, counters: counters}
}

// Receive implements actor.Actor.
func (h *HostActor) Receive(c actor.Context) {
	now := h.now()
	switch m := c.Message().(type) {
	case *messages.Heartbeat:
		if pid := h.onHeartbeat(now, m); pid != nil {
			// Open the connections now, both ways: the first message to a
			// new endpoint waits for a gRPC connection, which can outlast a
			// 33ms busy timeout. An empty Cancel is a no-op for the server,
			// which answers it, opening its connection to us.
			c.Request(pid, &messages.Cancel{Reason: "connect"})
		}
	case *actor.DeadLetterResponse:
		// Only connects are requests from here: one was not delivered
		// (the remote's endpoint to the server's address was failing, or
		// the server was not there yet). Its target may be unnamed.
		h.connectLost(m.Target)
		return
	case *hostEvent:
		if !h.onEvent(now, m) {
			return // nothing changed: no new view
		}
	case *serverGone:
		h.gone(now, m)
	case *setDecays:
		h.setDecays(m.decays)
	case *sweepTick:
		h.sweep(now)
		if len(h.servers) == 0 && !h.retiring {
			h.retiring = true
			c.Send(c.Parent(), &hostIdle{host: h.host, pid: c.Self()})
		}
	case *hostStop:
		h.retiring = false
		if len(h.servers) > 0 {
			// A heartbeat came in meanwhile: stay.
			c.Send(c.Parent(), &hostStays{host: h.host, pid: c.Self()})
			return
		}
		h.clear()
		c.Stop(c.Self())
		return
	case *actor.Started:
		if h.counters != nil {
			h.counters.hostActors.Add(1)
			h.counters.hostStarts.Add(1)
		}
		return
	case *actor.Stopped, *actor.Restarting:
		if h.counters != nil {
			h.counters.hostActors.Add(-1)
		}
		return
	case *actor.Stopping:
		h.clear()
		return
	default:
		return
	}
	h.publish()
}

// clear removes the host from the view and the status for good.
func (h *HostActor) clear() {
	h.stopping = true
	h.board.SetHost(h.host, nil)
	h.status.Delete(h.host)
}

// onHeartbeat updates a server; it returns the server's PID when a
// connect is to be sent to it: it is new (or a new incarnation), it comes
// back into the view, or a connect to it was not delivered.
func (h *HostActor) onHeartbeat(now time.Time, m *messages.Heartbeat) *actor.PID {
	id := selection.ServerID(m.GetServer())
	s := h.servers[id]
	if m.GetLeaving() {
		// Only the incarnation that leaves: a goodbye of an earlier one,
		// delivered after its successor's first heartbeat, is not about
		// the server that runs now.
		if s != nil && (m.GetIncarnation() == "" || m.GetIncarnation() == s.load.Incarnation) {
			h.markDead(now, s)
		}
		return nil
	}
	newInc := s == nil || s.load.Incarnation != m.GetIncarnation()
	// A connect also when the server comes back into the view (an
	// endpoint that terminated took the coordinator's connection with
	// it) or its last connect was lost.
	connect := newInc || !s.load.Alive || s.reconnect
	if newInc {
		// New server or a restarted one: fresh counters.
		s = &serverState{load: selection.ServerLoad{ID: id, Host: h.host}}
		s.load.Errors = make([]selection.DecayedCount, len(h.decays))
		s.load.Slowdowns = make([]selection.DecayedCount, len(h.decays))
		s.load.Busy = make([]selection.DecayedCount, len(h.decays))
		h.servers[id] = s
	}
	l := &s.load
	l.Zone, l.Group = m.GetZone(), m.GetGroup()
	l.Address, l.ActorID = m.GetPid().GetAddress(), m.GetPid().GetId()
	l.Incarnation = m.GetIncarnation()
	l.QueueLen, l.Active, l.Workers = int(m.GetQueueLen()), int(m.GetActive()), int(m.GetWorkers())
	l.CacheHitRatio = m.GetCacheHitRatio()
	l.LastHeartbeat = now
	s.heardAt = now
	l.Alive = l.Address != "" && l.ActorID != ""
	s.deadSince = time.Time{}
	s.interval = time.Duration(m.GetIntervalMs()) * time.Millisecond
	if s.interval <= 0 {
		s.interval = time.Second
	}
	s.reconnect = false
	s.touch()
	if !connect || !l.Alive { // no address: nothing to dial, no dead letter to come back
		return nil
	}
	return actor.NewPID(l.Address, l.ActorID)
}

// connectLost marks for a new connect the server at target (every server
// of the host when target is nil: protoactor's dead-letter answer does
// not always name it).
func (h *HostActor) connectLost(target *actor.PID) {
	for _, s := range h.servers {
		if target == nil || (s.load.Address == target.GetAddress() && s.load.ActorID == target.GetId()) {
			s.reconnect = true
		}
	}
}

// gone marks dead the servers m names.
func (h *HostActor) gone(now time.Time, m *serverGone) {
	for id, s := range h.servers {
		if (m.address != "" && s.load.Address == m.address) || (m.id != "" && id == m.id) {
			h.markDead(now, s)
		}
	}
}

func (h *HostActor) markDead(now time.Time, s *serverState) {
	if !s.load.Alive {
		return
	}
	s.touch()
	s.load.Alive = false
	s.load.InFlight = 0
	s.load.UnansweredSince = time.Time{}
	s.deadSince = now
}

// onEvent applies e; false when it changed nothing the view shows.
func (h *HostActor) onEvent(now time.Time, e *hostEvent) bool {
	s := h.servers[e.server]
	if s == nil || (e.incarnation != "" && e.incarnation != s.load.Incarnation) {
		return false
	}
	l := &s.load
	switch e.kind {
	case evDispatched:
		if l.UnansweredSince.IsZero() {
			l.UnansweredSince = now
		}
		l.InFlight++
		s.counts.dispatched++
		if e.hedge {
			s.counts.hedges++
		}
	case evEnded:
		if e.latency > 0 {
			h.startLatency(now, l, e.latency) // the attempt's first batch was its last
		}
		if l.InFlight > 0 {
			l.InFlight--
		}
		switch e.result {
		case selection.Started, selection.Busy, selection.Error:
			// The server answered (an Error may be the coordinator's own
			// "unreachable": it is counted as an error below anyway).
			// Timeout, Stalled and Cancelled are not answers.
			answered(now, l)
		}
		switch e.result {
		case selection.Error, selection.Timeout, selection.Stalled:
			h.fail(now, l)
		case selection.Started:
			l.ConsecutiveFailures = 0
		}
		switch e.result {
		case selection.Busy:
			s.counts.attemptsBusy++
		case selection.Timeout:
			s.counts.attemptsTimedOut++
		case selection.Error, selection.Stalled:
			s.counts.attemptsFailed++
		}
	case evPenalize:
		h.fail(now, l)
	case evAnswer:
		if l.UnansweredSince.IsZero() {
			return false // the common case: one per message from a server
		}
		answered(now, l)
	case evQueueReport:
		// C3's feedback: every answer reports the server's queue, fresher
		// for this coordinator's servers than the last heartbeat.
		if l.UnansweredSince.IsZero() && l.QueueLen == e.queueLen {
			return false
		}
		answered(now, l)
		l.QueueLen = e.queueLen
	case evSlowdown:
		l.Slowdowns = slices.Clone(l.Slowdowns) // shared with published views
		for i, d := range h.decays {
			l.Slowdowns[i] = l.Slowdowns[i].Add(now, d, 1)
		}
	case evLatency:
		h.startLatency(now, l, e.latency)
	case evBusySignal:
		h.busy(now, l)
		l.QueueLen = e.queueLen
		s.counts.busy++
	case evTimeoutSignal:
		h.busy(now, l)
		s.counts.timeouts++
	}
	s.touch()
	return true
}

// startLatency records a start latency sample of the server: the time to
// an attempt's first data. It is blended into the estimate as it stands
// now (decayed toward the fleet median since its last sample), not the raw
// old value: a server shunned after one slow start must be forgiven by its
// next fast one.
func (h *HostActor) startLatency(now time.Time, l *selection.ServerLoad, latency time.Duration) {
	prev := l.StartLatency
	if v := h.board.Latest(); v != nil {
		prev = v.StartLatencyOf(l, now) // the fleet median changes slowly: no rebuild
	}
	if prev == 0 {
		l.StartLatency = latency
	} else {
		l.StartLatency = (prev*3 + latency) / 4
	}
	l.StartLatencyAt = now
	l.ConsecutiveFailures = 0
	answered(now, l)
}

// answered records an answer from the server: it is not silent (see
// selection.ServerLoad.UnansweredSince).
func answered(now time.Time, l *selection.ServerLoad) {
	l.LastAnswer = now
	l.UnansweredSince = time.Time{}
}

// busy counts a busy answer or busy timeout under every decay in use.
func (h *HostActor) busy(now time.Time, l *selection.ServerLoad) {
	l.Busy = slices.Clone(l.Busy) // shared with published views
	for i, d := range h.decays {
		l.Busy[i] = l.Busy[i].Add(now, d, 1)
	}
}

// fail counts an error against one of this host's servers.
func (h *HostActor) fail(now time.Time, l *selection.ServerLoad) { CountFailure(now, h.decays, l) }

// CountFailure counts one failed try of a server in its load: errors under
// every decay in use, the circuit-breaker inputs (consecutive failures,
// last failure, the recent-failure window of 32), and a reset of its
// slowdowns (ClickHouse resets them on a failed connection). It is the
// host actor's rule, exported so the protocol simulation applies the same
// one. The counters are copied before they change and RecentFailures when
// trimmed (appends write past what a published view sees): a view shares
// these slices with the working state (HostActor.publish).
func CountFailure(now time.Time, decays []selection.DecayParams, l *selection.ServerLoad) {
	l.Errors, l.Slowdowns = slices.Clone(l.Errors), slices.Clone(l.Slowdowns)
	for i, d := range decays {
		l.Errors[i] = l.Errors[i].Add(now, d, 1)
		l.Slowdowns[i] = l.Slowdowns[i].Reset(now)
	}
	l.ConsecutiveFailures++
	l.LastFailure = now
	l.RecentFailures = append(l.RecentFailures, now)
	if len(l.RecentFailures) > 32 {
		l.RecentFailures = append(l.RecentFailures[:0:0], l.RecentFailures[len(l.RecentFailures)-32:]...)
	}
}

func (h *HostActor) setDecays(d []selection.DecayParams) {
	old := h.decays
	h.decays = d
	for _, s := range h.servers {
		errs := make([]selection.DecayedCount, len(d))
		slows := make([]selection.DecayedCount, len(d))
		busy := make([]selection.DecayedCount, len(d))
		for i, p := range d {
			for j, q := range old {
				if p == q && j < len(s.load.Errors) {
					errs[i], slows[i], busy[i] = s.load.Errors[j], s.load.Slowdowns[j], s.load.Busy[j]
				}
			}
		}
		s.load.Errors, s.load.Slowdowns, s.load.Busy = errs, slows, busy
		s.touch()
	}
}

// sweep marks dead the servers that missed their heartbeats while the
// coordinator was running: a late sweep first forgives its lateness (see
// Liveness), and forgets servers dead for longer than forget.
func (h *HostActor) sweep(now time.Time) {
	late := h.live.Sweep(now)
	for id, s := range h.servers {
		s.heardAt = Forgive(s.heardAt, now, late)
		if s.load.Alive && h.live.Dead(now, s.heardAt, s.interval) {
			h.markDead(now, s)
		}
		if !s.load.Alive && !s.deadSince.IsZero() && now.Sub(s.deadSince) > h.forget {
			delete(h.servers, id)
		}
	}
}

// publish gives the board and the status a new immutable snapshot of the
// host's servers. A server's published copy (pubServer) is made only when
// its load or counts changed since the last publish (serverState.changed);
// an unchanged server's copy is shared with the previous snapshots, which
// never see a change: the working state is a separate value, and the
// counter slices it shares with its copies are replaced rather than
// changed (copy on write: they change on failures, busy answers and
// slowdowns). A dispatch thus copies one server, not the host's all. The
// snapshot, the board's slice and the status's list are one allocation for
// a host of up to len(hostSnap.small) servers, and the status holder is
// stored once: the ServerStatus messages are built only when read
// (hostStatus.messages).
func (h *HostActor) publish() {
	if h.stopping {
		return
	}
	n := len(h.servers)
	snap := &hostSnap{at: h.now(), decays: h.decays}
	var out []*selection.ServerLoad
	if n <= len(snap.small) {
		snap.servers, out = snap.small[:0:n], snap.smallLoads[:0:n]
	} else {
		snap.servers, out = make([]*pubServer, 0, n), make([]*selection.ServerLoad, 0, n)
	}
	for _, s := range h.servers {
		if s.changed || s.pub == nil {
			s.pub = &pubServer{load: s.load, counts: s.counts}
			s.changed = false
		}
		snap.servers = append(snap.servers, s.pub)
		out = append(out, &s.pub.load)
	}
	h.board.SetHost(h.host, out)
	h.statusHolder.cur.Store(snap)
	if h.statusIn != h.status {
		// Stored once per map: a new holder replaces a restarted actor's.
		h.status.Store(h.host, &h.statusHolder)
		h.statusIn = h.status
	}
}

// pubServer is a server's load and counts as published: immutable, shared
// by every snapshot published while the server did not change.
type pubServer struct {
	load   selection.ServerLoad
	counts serverCounts
}

// hostStatus holds a host's part of the coordinator's status and
// per-server metrics as last published (hostSnap): one per host actor,
// stored in the status map once; it is turned into messages only when
// read (a scrape or a status request), not at every publish.
type hostStatus struct {
	cur atomic.Pointer[hostSnap]
}

// hostSnap is one publish of a host's servers: immutable.
type hostSnap struct {
	at      time.Time
	decays  []selection.DecayParams
	servers []*pubServer
	// small and smallLoads back servers and the board's slice for a host
	// of at most 4 servers (BenchmarkOneRowScan's and the load test's
	// hosts have 2): one allocation per publish with the snapshot.
	small      [4]*pubServer
	smallLoads [4]*selection.ServerLoad
}

// serverCounts are a server's totals for this coordinator (see
// messages.ServerStatus).
type serverCounts struct {
	dispatched, busy, timeouts                             uint64
	hedges, attemptsBusy, attemptsTimedOut, attemptsFailed uint64
}

// messages returns the host's servers' status as last published, counters
// decayed to the publish time (none before the first publish).
func (hs *hostStatus) messages() []*messages.ServerStatus {
	snap := hs.cur.Load()
	if snap == nil {
		return nil
	}
	return snap.messages()
}

// messages returns the snapshot's servers' status, counters decayed to the
// publish time.
func (hs *hostSnap) messages() []*messages.ServerStatus {
	out := make([]*messages.ServerStatus, 0, len(hs.servers))
	for _, sv := range hs.servers {
		l, c := &sv.load, &sv.counts
		var errs, slows uint32
		if len(l.Errors) > 0 && len(hs.decays) > 0 {
			errs = l.Errors[0].Value(hs.at, hs.decays[0])
			slows = l.Slowdowns[0].Value(hs.at, hs.decays[0])
		}
		out = append(out, &messages.ServerStatus{Id: string(l.ID), Host: l.Host, Zone: l.Zone, Group: l.Group, Alive: l.Alive,
			QueueLen: uint32(l.QueueLen), InFlight: uint32(l.InFlight), Errors: float64(errs), BusyTotal: c.busy,
			Dispatched: c.dispatched, CacheHitRatio: l.CacheHitRatio, LastHeartbeatUnixMs: l.LastHeartbeat.UnixMilli(),
			Incarnation: l.Incarnation, Timeouts: c.timeouts, Slowdowns: slows, StartLatencyUs: l.StartLatency.Microseconds(),
			LastStartUnixMs: unixMs(l.StartLatencyAt), Hedges: c.hedges, AttemptsBusy: c.attemptsBusy,
			AttemptsTimedOut: c.attemptsTimedOut, AttemptsFailed: c.attemptsFailed})
	}
	return out
}

func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
