package policysim

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/scanplane/scanplane/selection"
)

// View refresh rules of the coordinator's load board: a view is rebuilt
// when something changed and it is older than viewMinStale, and at least
// every viewRefresh.
const (
	viewMinStale = int64(time.Millisecond)
	viewRefresh  = int64(100 * time.Millisecond)
	// sweepEvery: how often coordinators look for servers that missed
	// their heartbeats (the coordinator's SweepInterval).
	sweepEvery = int64(100 * time.Millisecond)
	pctEvery   = int64(5 * time.Millisecond)
)

// client is one coordinator: its own policy instance (prequal's probe
// pool and peak-ewma's estimates are per coordinator), its own load
// counters per server, kept by the host actor's rules, and its load views.
type client struct {
	idx      int
	sim      *sim
	rng      *rand.Rand
	profiles *selection.Profiles
	profile  *selection.Profile
	policy   selection.Policy
	prober   selection.Prober
	decays   []selection.DecayParams
	// answers: probe answers on their way here, in arrival order, from
	// ansHead (probes.go).
	answers []probeAnswer
	ansHead int

	srv []srvState // by server
	// sig: the load signals every coordinator receives (client.sync).
	sig    *signals
	sets   []setView
	states []*selection.TabletState // by key

	lat     [1024]time.Duration // recent start latencies (the board's ring)
	latNext int
	latFull bool
	p50     time.Duration
	p95     time.Duration
	pctAt   int64
	scratch []time.Duration
	// blockTimes: the board's scan time per block, home and away.
	blockTimes selection.BlockTimes
	window     [10]struct {
		sec          int64
		disp, hedges uint64
	}
}

// srvState is a coordinator's state of one server, kept together in
// memory: what a decision about the server reads sits side by side.
type srvState struct {
	work selection.ServerLoad // working state
	pub  *selection.ServerLoad
	ver  uint64 // bumped by every change of work
	// pubVer: the ver pub was copied at; pubAt: when the newest view
	// holding pub was built.
	pubVer uint64
	pubAt  int64
	// heardAt: the last heartbeat.
	heardAt int64
	// seen: how many of the server's signals this client has applied.
	seen int
	// shared: work's counter slices are shared with pub and must be
	// copied before they change (copy on write, as the host actor does).
	shared bool
}

// setView is the client's view of one replica set. A set of up to
// setInline servers keeps its members and versions in the struct itself:
// the check whether the view is current reads one object, not three.
type setView struct {
	v       *selection.LoadView
	at      int64
	members []int32
	vers    []uint64
	memMem  [setInline]int32
	versMem [setInline]uint64
}

const setInline = 4

func (c *client) touch(i int32) { c.srv[i].ver++ }

// view returns the client's load view of set at now, rebuilt by the load
// board's rules.
func (c *client) view(s *sim, set int32, now int64) *selection.LoadView {
	sv := &c.sets[set]
	if sv.members == nil {
		sv.at = -1
		sv.members = s.setMembers(set, sv.memMem[:0])
		if len(sv.members) <= setInline {
			sv.vers = sv.versMem[:len(sv.members)]
		} else {
			sv.vers = make([]uint64, len(sv.members))
		}
	}
	if sv.v != nil {
		age := now - sv.at
		if age < viewRefresh {
			dirty := false
			for k, m := range sv.members {
				if c.srv[m].ver != sv.vers[k] || c.srv[m].seen != c.sig.n[m] {
					dirty = true
					break
				}
			}
			if !dirty || age < viewMinStale {
				return sv.v
			}
		}
	}
	// The view replaced is read no more: its memory is the next one's.
	b := s.builder(set)
	servers, ok := b.Recycle(sv.v)
	if !ok {
		servers = make([]*selection.ServerLoad, 0, len(sv.members))
	}
	servers = servers[:len(sv.members)]
	for k, m := range sv.members {
		c.sync(m)
		if p := c.srv[m].pub; p == nil || c.srv[m].pubVer != c.srv[m].ver {
			if p != nil && now-c.srv[m].pubAt >= viewMinStale {
				// Every view holding p was built viewMinStale ago or more
				// and is dirty (m changed since): none is read again, so
				// p takes the new state in place.
				*p = c.srv[m].work
			} else {
				cp := c.srv[m].work
				c.srv[m].pub = &cp
			}
			c.srv[m].pubVer = c.srv[m].ver
			c.srv[m].shared = true
		}
		c.srv[m].pubAt = now
		servers[k] = c.srv[m].pub
		sv.vers[k] = c.srv[m].ver
	}
	v := b.Build(servers, c.decays, s.t(now))
	c.percentiles(now)
	v.StartLatencyP50, v.StartLatencyP95 = c.p50, c.p95
	sec := s.t(now).Unix()
	for _, w := range c.window {
		if w.sec > sec-int64(len(c.window)) && w.sec <= sec {
			v.RecentDispatches += w.disp
			v.RecentHedges += w.hedges
		}
	}
	v.BlockTimes = c.blockTimes
	sv.v, sv.at = v, now
	return v
}

// percentiles refreshes p50 and p95 of the recent start latencies at most
// once per pctEvery (the board computes them per rebuild: over 1 024
// samples they move little in a few ms, and the selections were most of a
// run's time).
func (c *client) percentiles(now int64) {
	if c.pctAt >= 0 && now-c.pctAt < pctEvery {
		return
	}
	c.pctAt = now
	m := c.latNext
	if c.latFull {
		m = len(c.lat)
	}
	if m < 20 {
		return
	}
	c.scratch = append(c.scratch[:0], c.lat[:m]...)
	c.p50 = selection.SelectKth(c.scratch, m/2)
	c.p95 = selection.SelectKth(c.scratch, (m*95)/100)
}

func (c *client) countDispatch(sec int64, hedge bool) {
	w := &c.window[sec%int64(len(c.window))]
	if w.sec != sec {
		w.sec, w.disp, w.hedges = sec, 0, 0
	}
	if hedge {
		w.hedges++
	} else {
		w.disp++
	}
}

// The host actor's rules (coordinator/host.go), applied to srv[i].work.

func (c *client) dispatched(now time.Time, i int32) {
	l := &c.srv[i].work
	if l.UnansweredSince.IsZero() {
		l.UnansweredSince = now
	}
	l.InFlight++
	c.touch(i)
}

func (c *client) ended(now time.Time, i int32, r selection.AttemptResult) {
	l := &c.srv[i].work
	if l.InFlight > 0 {
		l.InFlight--
	}
	switch r {
	case selection.Started, selection.Busy, selection.Error:
		answered(now, l)
	}
	switch r {
	case selection.Error, selection.Timeout, selection.Stalled:
		c.own(i)
		countFailure(now, c.decays, l)
	case selection.Started:
		l.ConsecutiveFailures = 0
	}
	c.touch(i)
}

func (c *client) heard(now time.Time, i int32) {
	l := &c.srv[i].work
	if l.UnansweredSince.IsZero() {
		return
	}
	answered(now, l)
	c.touch(i)
}

// own makes srv[i].work's counter slices its own before they change.
func (c *client) own(i int32) {
	if c.srv[i].shared {
		l := &c.srv[i].work
		l.Errors, l.Slowdowns, l.Busy = slices.Clone(l.Errors), slices.Clone(l.Slowdowns), slices.Clone(l.Busy)
		c.srv[i].shared = false
	}
}

func (c *client) slowdown(now time.Time, i int32) {
	c.own(i)
	l := &c.srv[i].work
	for k, d := range c.decays {
		l.Slowdowns[k] = l.Slowdowns[k].Add(now, d, 1)
	}
	c.touch(i)
}

func (c *client) latency(now time.Time, i int32, d time.Duration) {
	l := &c.srv[i].work
	prev := l.StartLatency
	if c.p50 > 0 {
		prev = (&selection.LoadView{StartLatencyP50: c.p50}).StartLatencyOf(l, now)
	}
	if prev == 0 {
		l.StartLatency = d
	} else {
		l.StartLatency = (prev*3 + d) / 4
	}
	l.StartLatencyAt = now
	l.ConsecutiveFailures = 0
	answered(now, l)
	c.touch(i)
	c.lat[c.latNext] = d
	c.latNext++
	if c.latNext == len(c.lat) {
		c.latNext, c.latFull = 0, true
	}
}

// queueReport applies the queue length a ScanStarted carries (the
// server's waiting scans when it started this one): fresher, for this
// coordinator's own servers, than the last heartbeat.
func (c *client) queueReport(i int32, queued int) {
	c.sync(i)
	c.srv[i].work.QueueLen = queued
	c.touch(i)
}

// signals are the busy and timeout load signals the scan servers publish
// to every coordinator. Every coordinator receives each at the same time
// and counts nothing else in ServerLoad.Busy, so a server's Busy counters
// are the same at every coordinator: they are kept here once, and a
// coordinator takes them, with a busy signal's queue length, when it
// next reads or changes that server (client.sync) — as if it had applied
// each signal on arrival, without every coordinator's work per signal.
type signals struct {
	decays []selection.DecayParams
	n      []int // signals so far, per server
	// lastBusy: the number of the server's last busy signal (0: none),
	// queue: the queue length it carried.
	lastBusy, queue []int
	// busy: the server's Busy counters after its last signal; never
	// modified (a new slice per signal).
	busy [][]selection.DecayedCount
	// zero: empty counters, one per decay, never modified.
	zero []selection.DecayedCount
}

func newSignals(servers int, decays []selection.DecayParams) *signals {
	g := &signals{decays: decays, n: make([]int, servers), lastBusy: make([]int, servers), queue: make([]int, servers),
		busy: make([][]selection.DecayedCount, servers)}
	g.zero = make([]selection.DecayedCount, len(decays))
	for i := range g.busy {
		g.busy[i] = g.zero
	}
	return g
}

// add counts a signal of server i at now: a busy answer's with the
// server's queue, or a busy timeout's.
func (g *signals) add(now time.Time, i int32, busy bool, queue int) {
	b := slices.Clone(g.busy[i])
	for k, d := range g.decays {
		b[k] = b[k].Add(now, d, 1)
	}
	g.busy[i] = b
	g.n[i]++
	if busy {
		g.lastBusy[i], g.queue[i] = g.n[i], queue
	}
}

// sync applies the signals of server i this client has not applied yet.
// Every read of srv[i].work through a view and every write of a field a
// signal sets (Busy, QueueLen) comes after it.
func (c *client) sync(i int32) {
	g := c.sig
	if c.srv[i].seen == g.n[i] {
		return
	}
	l := &c.srv[i].work
	l.Busy = g.busy[i]
	if g.lastBusy[i] > c.srv[i].seen {
		l.QueueLen = g.queue[i]
	}
	c.srv[i].seen = g.n[i]
	c.touch(i)
}

func (c *client) markDead(i int32) {
	l := &c.srv[i].work
	if !l.Alive {
		return
	}
	l.Alive = false
	l.InFlight = 0
	l.UnansweredSince = time.Time{}
	c.touch(i)
}

func answered(now time.Time, l *selection.ServerLoad) {
	l.LastAnswer = now
	l.UnansweredSince = time.Time{}
}

// countFailure is the coordinator's CountFailure: errors under every
// decay, slowdowns reset, the circuit-breaker inputs. The caller owns l's
// counter slices (client.own).
func countFailure(now time.Time, decays []selection.DecayParams, l *selection.ServerLoad) {
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
