package protosim

import (
	"slices"
	"time"

	coordpkg "github.com/scanplane/scanplane/coordinator"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
)

// loadBook is one coordinator's knowledge of the scan servers, kept as
// its host actors and load board keep it (coordinator/host.go,
// coordinator/loadboard.go), and turned into the selection.LoadView the
// policies read. Servers join by heartbeat, leave after missed beats or
// when their endpoint terminates, and start with clean counters in a new
// incarnation.
type loadBook struct {
	decays  []selection.DecayParams
	live    coordpkg.Liveness // the host actors' rule for missed heartbeats
	servers map[selection.ServerID]*bookEntry
	ids     []selection.ServerID // sorted: views and sweeps are deterministic
	lat     []time.Duration      // recent start latencies
	window  [10]struct {
		sec               int64
		dispatches, hedge uint64
	}
	view   *selection.LoadView // nil when something changed
	latest *selection.LoadView // the last view built (board.Latest)
}

type bookEntry struct {
	load     selection.ServerLoad
	interval time.Duration
	heardAt  time.Time // liveness reference (coordpkg.Liveness)
}

func newLoadBook(decays []selection.DecayParams, misses int, sweepInterval time.Duration) *loadBook {
	return &loadBook{decays: decays, live: coordpkg.Liveness{Misses: misses, SweepInterval: sweepInterval},
		servers: map[selection.ServerID]*bookEntry{}}
}

func (b *loadBook) changed() { b.view = nil }

// View returns the view at now, rebuilt when something changed or time
// moved (the real board serves snapshots up to a few ms stale; the
// simulation's are exact).
func (b *loadBook) View(now time.Time) *selection.LoadView {
	if b.view != nil && b.view.At.Equal(now) {
		return b.view
	}
	servers := make([]*selection.ServerLoad, 0, len(b.ids))
	for _, id := range b.ids {
		l := b.servers[id].load
		l.Errors = slices.Clone(l.Errors)
		l.Slowdowns = slices.Clone(l.Slowdowns)
		l.Busy = slices.Clone(l.Busy)
		l.RecentFailures = slices.Clone(l.RecentFailures)
		servers = append(servers, &l)
	}
	v := selection.NewLoadView(servers, slices.Clone(b.decays), now)
	if m := len(b.lat); m >= 20 {
		l := slices.Clone(b.lat)
		slices.Sort(l)
		v.StartLatencyP50, v.StartLatencyP95 = l[m/2], l[(m*95)/100]
	}
	sec := now.Unix()
	for _, w := range b.window {
		if w.sec > sec-int64(len(b.window)) && w.sec <= sec {
			v.RecentDispatches += w.dispatches
			v.RecentHedges += w.hedge
		}
	}
	b.view, b.latest = v, v
	return v
}

func (b *loadBook) onHeartbeat(now time.Time, m *messages.Heartbeat) {
	id := selection.ServerID(m.GetServer())
	e := b.servers[id]
	if e == nil || e.load.Incarnation != m.GetIncarnation() {
		e = &bookEntry{load: selection.ServerLoad{ID: id, Host: m.GetHost(),
			Errors:    make([]selection.DecayedCount, len(b.decays)),
			Slowdowns: make([]selection.DecayedCount, len(b.decays)),
			Busy:      make([]selection.DecayedCount, len(b.decays))}}
		if b.servers[id] == nil {
			b.ids = append(b.ids, id)
			slices.Sort(b.ids)
		}
		b.servers[id] = e
	}
	l := &e.load
	l.Zone, l.Group = m.GetZone(), m.GetGroup()
	l.Address, l.ActorID = m.GetPid().GetAddress(), m.GetPid().GetId()
	l.Incarnation = m.GetIncarnation()
	l.QueueLen, l.Active, l.Workers = int(m.GetQueueLen()), int(m.GetActive()), int(m.GetWorkers())
	l.LastHeartbeat = now
	e.heardAt = now
	l.Alive = true
	e.interval = time.Duration(m.GetIntervalMs()) * time.Millisecond
	b.changed()
}

// sweep marks servers that missed their heartbeats dead, as the host
// actors do: a late sweep (the coordinator was paused) forgives its
// lateness first.
func (b *loadBook) sweep(now time.Time) {
	late := b.live.Sweep(now)
	for _, id := range b.ids {
		e := b.servers[id]
		e.heardAt = coordpkg.Forgive(e.heardAt, now, late)
		if e.load.Alive && b.live.Dead(now, e.heardAt, e.interval) {
			b.markDead(e)
		}
	}
}

// endpointDown marks every server at addr dead (EndpointTerminated).
func (b *loadBook) endpointDown(addr string) {
	for _, id := range b.ids {
		if e := b.servers[id]; e.load.Address == addr {
			b.markDead(e)
		}
	}
}

func (b *loadBook) markDead(e *bookEntry) {
	if e.load.Alive {
		e.load.Alive, e.load.InFlight = false, 0
		b.changed()
	}
}

func (b *loadBook) entry(id selection.ServerID) *selection.ServerLoad {
	if e := b.servers[id]; e != nil {
		b.changed()
		return &e.load
	}
	return nil
}

func (b *loadBook) dispatched(now time.Time, id selection.ServerID, hedge bool) {
	if l := b.entry(id); l != nil {
		l.InFlight++
	}
	sec := now.Unix()
	w := &b.window[sec%int64(len(b.window))]
	if w.sec != sec {
		w.sec, w.dispatches, w.hedge = sec, 0, 0
	}
	if hedge {
		w.hedge++
	} else {
		w.dispatches++
	}
}

func (b *loadBook) ended(now time.Time, id selection.ServerID, r selection.AttemptResult) {
	l := b.entry(id)
	if l == nil {
		return
	}
	if l.InFlight > 0 {
		l.InFlight--
	}
	switch r {
	case selection.Error, selection.Timeout, selection.Stalled:
		b.fail(now, l)
	case selection.Started:
		l.ConsecutiveFailures = 0
	}
}

func (b *loadBook) fail(now time.Time, l *selection.ServerLoad) {
	coordpkg.CountFailure(now, b.decays, l)
}

func (b *loadBook) penalize(now time.Time, id selection.ServerID) {
	if l := b.entry(id); l != nil {
		b.fail(now, l)
	}
}

func (b *loadBook) slowdown(now time.Time, id selection.ServerID) {
	if l := b.entry(id); l != nil {
		for i, d := range b.decays {
			l.Slowdowns[i] = l.Slowdowns[i].Add(now, d, 1)
		}
	}
}

func (b *loadBook) busy(now time.Time, id selection.ServerID, queueLen int, fromServer bool) {
	if l := b.entry(id); l != nil {
		for i, d := range b.decays {
			l.Busy[i] = l.Busy[i].Add(now, d, 1)
		}
		if fromServer {
			l.QueueLen = queueLen
		}
	}
}

func (b *loadBook) latency(now time.Time, id selection.ServerID, d time.Duration) {
	b.lat = append(b.lat, d)
	if len(b.lat) > 1024 {
		b.lat = b.lat[1:]
	}
	l := b.entry(id)
	if l == nil {
		return
	}
	prev := l.StartLatency
	if b.latest != nil {
		prev = b.latest.StartLatencyOf(l, now)
	}
	if prev == 0 {
		l.StartLatency = d
	} else {
		l.StartLatency = (prev*3 + d) / 4
	}
	l.StartLatencyAt = now
	l.ConsecutiveFailures = 0
}
