package coordinator

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/scanplane/scanplane/internal/remoting"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
	"google.golang.org/protobuf/proto"
)

// published is one publish of a host actor as the board and the status
// got it: the slices it handed over, and copies of their elements.
type published struct {
	step     int
	loads    []*selection.ServerLoad // the board's slice
	loadPtrs []*selection.ServerLoad // its elements then
	snap     *hostSnap               // the status snapshot
	snapAt   time.Time
	pubPtrs  []*pubServer
	msgs     []*messages.ServerStatus // the status as read then (some)
}

// witness holds a deep copy of every server load and status entry ever
// published, taken when it was first published: snapshots share them.
type witness struct {
	loads map[*selection.ServerLoad]selection.ServerLoad
	pubs  map[*pubServer]pubServer
}

// deepLoad copies l with its slices, sharing no memory with it.
func deepLoad(l *selection.ServerLoad) selection.ServerLoad {
	c := *l
	c.Errors, c.Slowdowns, c.Busy = slices.Clone(l.Errors), slices.Clone(l.Slowdowns), slices.Clone(l.Busy)
	c.RecentFailures = slices.Clone(l.RecentFailures)
	return c
}

// capture records h's last publish.
func (w *witness) capture(step int, b *LoadBoard, h *HostActor) *published {
	b.mu.Lock()
	loads := b.hosts[h.host]
	b.mu.Unlock()
	snap := h.statusHolder.cur.Load()
	p := &published{step: step, loads: loads, loadPtrs: slices.Clone(loads), snap: snap, snapAt: snap.at,
		pubPtrs: slices.Clone(snap.servers)}
	for _, l := range loads {
		if _, ok := w.loads[l]; !ok {
			w.loads[l] = deepLoad(l)
		}
	}
	for _, s := range snap.servers {
		if _, ok := w.pubs[s]; !ok {
			w.pubs[s] = pubServer{load: deepLoad(&s.load), counts: s.counts}
		}
	}
	return p
}

// checkLoads reports a load in loads that is not as first published ("" if
// none is); seen holds what was checked already in this round.
func (w *witness) checkLoads(loads []*selection.ServerLoad, seen map[any]bool) string {
	for _, l := range loads {
		if !seen[l] {
			seen[l] = true
			if c, ok := w.loads[l]; !ok || !reflect.DeepEqual(*l, c) {
				return fmt.Sprintf("server %s changed:\n now  %+v\n then %+v", l.ID, *l, c)
			}
		}
	}
	return ""
}

// check reports how p differs from what was published ("" if it does
// not); seen holds what was checked already in this round.
func (w *witness) check(p *published, seen map[any]bool) string {
	if !slices.Equal(p.loads, p.loadPtrs) || !slices.Equal(p.snap.servers, p.pubPtrs) || !p.snap.at.Equal(p.snapAt) {
		return "a published slice changed"
	}
	if d := w.checkLoads(p.loads, seen); d != "" {
		return d
	}
	for _, s := range p.snap.servers {
		if !seen[s] {
			seen[s] = true
			if !reflect.DeepEqual(*s, w.pubs[s]) {
				return fmt.Sprintf("status of server %s changed:\n now  %+v\n then %+v", s.load.ID, *s, w.pubs[s])
			}
		}
	}
	if p.msgs == nil {
		return ""
	}
	ms := p.snap.messages()
	if len(ms) != len(p.msgs) {
		return "status messages changed"
	}
	for i := range ms {
		if !proto.Equal(ms[i], p.msgs[i]) {
			return fmt.Sprintf("status message changed:\n now  %v\n then %v", ms[i], p.msgs[i])
		}
	}
	return ""
}

// TestHostActorPublishesImmutableCurrentSnapshots drives a host actor
// through a long random mix of everything it handles (heartbeats, new
// incarnations, leaving, every event kind with every result, stale
// events, servers gone, sweeps that kill and forget, decay changes) and
// checks after every step: (1) no snapshot published earlier changed, in
// the board's slice, the status or the LoadView built from them (publish
// shares unchanged servers' copies between snapshots, and the working
// state shares its counter slices with them); (2) the snapshot just
// published is the working state exactly (a change publish missed, say a
// server whose change was not recorded, shows here).
func TestHostActorPublishesImmutableCurrentSnapshots(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	b := NewLoadBoard(clock, []selection.DecayParams{selection.DefaultDecay})
	h := newHostActor("h1", b, &sync.Map{}, 3, 5*time.Second, clock, nil)
	decaySets := [][]selection.DecayParams{{selection.DefaultDecay},
		{{HalfLife: 10 * time.Second, Cap: 100}, selection.DefaultDecay}}
	r := rand.New(rand.NewPCG(11, 1))
	ids := []string{"s0", "s1", "s2", "s3", "s4"} // 5: past hostSnap.small
	inc := map[string]string{}
	w := &witness{loads: map[*selection.ServerLoad]selection.ServerLoad{}, pubs: map[*pubServer]pubServer{}}
	var recent, old []*published // the last 8 publishes; every 199th
	// publishes of more than 4 servers, of fewer; published servers with
	// 32 recent failures (trimmed at the next)
	big, small, full := 0, 0, 0
	type viewRec struct {
		v       *selection.LoadView
		servers []*selection.ServerLoad // v.Servers then
	}
	var views []viewRec // the last 8 built
	results := []selection.AttemptResult{selection.Pending, selection.Started, selection.Busy, selection.Error,
		selection.Timeout, selection.Slow, selection.Cancelled, selection.Stalled}
	for step := 0; step < 1500; step++ {
		switch r.IntN(8) {
		case 0, 1: // heartbeat
			id := ids[r.IntN(len(ids))]
			if inc[id] == "" || r.IntN(100) == 0 { // a restart: fresh counters
				inc[id] = fmt.Sprintf("i%d", step)
			}
			hb := &messages.Heartbeat{Host: "h1", Server: id, Zone: "z", Group: "default", Incarnation: inc[id],
				Pid: &messages.Pid{Address: "a" + id[1:2], Id: id}, QueueLen: uint32(r.IntN(4)), Active: uint32(r.IntN(4)),
				Workers: 4, CacheHitRatio: r.Float64(), IntervalMs: 1000, Leaving: r.IntN(25) == 0}
			h.onHeartbeat(now, hb)
			h.publish()
		case 2, 3, 4, 5: // an event
			id := ids[r.IntN(len(ids))]
			kind := hostEventKind(1 + r.IntN(int(evQueueReport)))
			if r.IntN(2) == 0 {
				kind = evPenalize // failures enough to fill RecentFailures (32)
			}
			ev := &hostEvent{kind: kind, server: selection.ServerID(id),
				result: results[r.IntN(len(results))], latency: time.Duration(r.IntN(20)) * time.Millisecond,
				queueLen: r.IntN(8), hedge: r.IntN(4) == 0}
			switch r.IntN(4) {
			case 0:
				ev.incarnation = inc[id]
			case 1:
				ev.incarnation = "old"
			}
			if h.onEvent(now, ev) {
				h.publish()
			}
		case 6:
			switch r.IntN(4) {
			case 0:
				h.gone(now, &serverGone{address: "a" + ids[r.IntN(len(ids))][1:2]})
			case 1:
				h.gone(now, &serverGone{id: selection.ServerID(ids[r.IntN(len(ids))])})
			default:
				h.sweep(now)
			}
			h.publish()
		case 7:
			if r.IntN(8) == 0 {
				h.setDecays(decaySets[r.IntN(len(decaySets))])
			}
			if r.IntN(2) == 0 {
				b.RecordStartLatency(time.Duration(1+r.IntN(10)) * time.Millisecond)
			}
			h.publish()
		}
		if r.IntN(60) == 0 {
			now = now.Add(time.Duration(1+r.IntN(4)) * 3 * time.Second) // servers die, are forgotten
		} else {
			now = now.Add(time.Duration(r.IntN(3000)) * time.Microsecond)
		}

		// (1) Nothing published before changed.
		seen := map[any]bool{}
		for _, p := range slices.Concat(recent, old) {
			if d := w.check(p, seen); d != "" {
				t.Fatalf("step %d: the snapshot published at step %d changed: %s", step, p.step, d)
			}
		}
		for _, vr := range views {
			if !slices.Equal(vr.v.Servers, vr.servers) {
				t.Fatalf("step %d: a LoadView's servers changed", step)
			}
			if d := w.checkLoads(vr.v.Servers, seen); d != "" {
				t.Fatalf("step %d: a LoadView changed: %s", step, d)
			}
		}
		// (2) The last publish is the working state.
		last := w.capture(step, b, h)
		if len(last.loads) != len(h.servers) || len(last.snap.servers) != len(h.servers) {
			t.Fatalf("step %d: published %d servers, %d in the status, the actor has %d", step, len(last.loads),
				len(last.snap.servers), len(h.servers))
		}
		for i, l := range last.loads {
			s := h.servers[l.ID]
			if s == nil || !reflect.DeepEqual(*l, s.load) {
				t.Fatalf("step %d: published server %s is not the working state:\n published %+v\n working   %+v", step, l.ID, *l,
					s.load)
			}
			if ps := last.snap.servers[i]; &ps.load != l || ps.counts != s.counts {
				t.Fatalf("step %d: server %s's status is not its load and counts", step, l.ID)
			}
		}
		recent = append(recent, last)
		if len(recent) > 8 {
			recent = recent[1:]
		}
		if step%199 == 0 {
			last.msgs = last.snap.messages() // the status as read then
			old = append(old, last)          // checked to the end
		}
		if len(last.loads) > len(last.snap.small) {
			big++
		} else {
			small++
		}
		for _, l := range last.loads {
			if len(l.RecentFailures) == 32 {
				full++
			}
		}
		if v := b.View(); len(views) == 0 || views[len(views)-1].v != v {
			views = append(views, viewRec{v, slices.Clone(v.Servers)})
			if len(views) > 8 {
				views = views[1:]
			}
		}
	}
	t.Logf("publishes of more than %d servers %d, of fewer %d; published servers with 32 recent failures %d",
		len(hostSnap{}.small), big, small, full)
	if big == 0 || small == 0 || full == 0 {
		t.Fatal("the walk missed a case")
	}
}

// TestHostActorQueueReportFromScanStarted: a ScanStarted's queue length
// replaces the heartbeat's in the view (C3's per-response feedback), and
// the same length again changes nothing.
func TestHostActorQueueReportFromScanStarted(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	b := NewLoadBoard(clock, []selection.DecayParams{selection.DefaultDecay})
	h := newHostActor("h1", b, &sync.Map{}, 3, 5*time.Second, clock, nil)
	h.onHeartbeat(now, &messages.Heartbeat{Host: "h1", Server: "s0", Zone: "z", Group: "default", Incarnation: "i",
		Pid: &messages.Pid{Address: "a0", Id: "s0"}, QueueLen: 6, Active: 4, Workers: 4, IntervalMs: 1000})
	h.publish()
	queueOf := func() int {
		s := b.View().Server("s0")
		if s == nil {
			t.Fatal("s0 is not in the view")
		}
		return s.QueueLen
	}
	if q := queueOf(); q != 6 {
		t.Fatalf("queue after the heartbeat: %d, want 6", q)
	}
	now = now.Add(time.Millisecond)
	if !h.onEvent(now, &hostEvent{kind: evQueueReport, server: "s0", queueLen: 1}) {
		t.Fatal("a new queue length reported no change")
	}
	h.publish()
	now = now.Add(100 * time.Millisecond) // the board's refresh: its view is rebuilt
	if q := queueOf(); q != 1 {
		t.Fatalf("queue after ScanStarted reported 1: %d", q)
	}
	if h.onEvent(now, &hostEvent{kind: evQueueReport, server: "s0", queueLen: 1}) {
		t.Fatal("the same queue length again reported a change")
	}
}

// TestHostActorConnectsOnlyToAnAddress: a heartbeat without an actor
// address asks for no connect (there is nothing to dial); the first one
// of the same incarnation that names its address does.
func TestHostActorConnectsOnlyToAnAddress(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	h := newHostActor("h1", NewLoadBoard(clock, []selection.DecayParams{selection.DefaultDecay}), &sync.Map{}, 3, 5*time.Second, clock, nil)
	hb := &messages.Heartbeat{Host: "h1", Server: "s0", Zone: "z", Group: "default", Incarnation: "i", IntervalMs: 1000}
	for i := range 2 {
		if pid := h.onHeartbeat(now, hb); pid != nil {
			t.Fatalf("heartbeat %d without an address: connect to %v", i, pid)
		}
	}
	hb.Pid = &messages.Pid{Address: "a0", Id: "s0"}
	if pid := h.onHeartbeat(now, hb); pid == nil || pid.Address != "a0" || pid.Id != "s0" {
		t.Fatalf("first heartbeat with its address: connect to %v, want a0/s0", pid)
	}
	if pid := h.onHeartbeat(now, hb); pid != nil {
		t.Fatalf("the next heartbeat: connect to %v, want none", pid)
	}
}

// TestHostActorRunsOnSender: a host actor (hostProps) handles a message
// on the goroutine that sends it, so a tablet actor's dispatch is on the
// board when its send returns (no goroutine started per burst of events).
func TestHostActorRunsOnSender(t *testing.T) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return remoting.DiscardLogger() }))
	defer sys.Shutdown()
	t0 := time.Unix(1000, 0)
	now := func() time.Time { return t0 }
	d := &registryDeps{board: NewLoadBoard(now, []selection.DecayParams{selection.DefaultDecay}), status: &sync.Map{}, hostPIDs: &sync.Map{},
		misses: 3, forget: time.Minute, sweepEvery: time.Minute, now: now}
	pid := sys.Root.Spawn(hostProps(d, "h1"))
	defer func() { _ = sys.Root.StopFuture(pid).Wait() }()
	const server = "h1:1/0"
	inFlight := func() int {
		d.board.mu.Lock()
		defer d.board.mu.Unlock()
		for _, l := range d.board.hosts["h1"] {
			if l.ID == server {
				return l.InFlight
			}
		}
		return -1
	}
	sys.Root.Send(pid, &messages.Heartbeat{Host: "h1", Server: server, Incarnation: "i1", Pid: &messages.Pid{Address: sys.Address(), Id: "nobody"}})
	if got := inFlight(); got != 0 {
		t.Fatalf("after the heartbeat's send: in flight %d, want the server on the board with 0", got)
	}
	for i := 1; i <= 100; i++ {
		sys.Root.Send(pid, &hostEvent{kind: evDispatched, server: server, incarnation: "i1"})
		if got := inFlight(); got != i {
			t.Fatalf("after dispatch %d's send: in flight %d, want %d", i, got, i)
		}
	}
}
