package sim

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/coordinator"
	"github.com/scanplane/scanplane/internal/actorenv"
	"github.com/scanplane/scanplane/internal/remoting"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/scanserver"
	"github.com/scanplane/scanplane/selection"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
	"google.golang.org/protobuf/proto"
)

// world is one simulated run: the processes, the network between them,
// the ground truth, and what the checks have found so far.
type world struct {
	cfg    Config
	s      *scheduler
	net    *network
	trace  *tracer
	faults *faultLog
	store  *memStore
	truth  *truthTable
	// profiles: the profiles file's text (ReloadProfiles after a reload);
	// each coordinator parses its own, as each process does.
	profiles string
	procs    map[string]*proc
	// jobs: the attempts a server took (its StartScan arrived) and has
	// not ended (no ScanFinished or Busy sent), as the network saw them.
	jobs map[jobKey]*proc
	// dispatched: when each attempt's StartScan was sent.
	dispatched map[attemptKey]time.Time
	coords     []*coordProc
	hosts      []*hostProc
	clients    []*clientProc
	scans      []*scanRun
	mut        mutations
	stats      Stats
	problems   []string
}

// mutations break a component on purpose, to show that the checks catch
// what they are meant to catch (tests only). The actors are the real
// ones, so the harness breaks what is around them: the network, the
// store, what a client sees.
type mutations struct {
	// drop loses a message silently (no fault is logged: the component
	// that should have sent or taken it is the broken one).
	drop func(from string, to *actor.PID, msg proto.Message) bool
	// deliver changes a message as it is sent.
	deliver func(msg proto.Message)
	// block changes a block as a scan server reads it (a server whose
	// store lies).
	block func(key string, data []byte) []byte
	// lie makes every scan server lie (scanserver.FaultConfig.Lie).
	lie []scanserver.Lie
	// Test hooks that change nothing: shape changes each scan as it is
	// drawn; count, when set, gets every scan message sent over the
	// network, by request id and message kind.
	shape  func(w *world, sr *scanRun)
	client func(c *clientProc)
	// noVerify: clients take rows without checking them against the
	// tablet's block roots (a client that ignores the proofs).
	noVerify bool
	count    map[string]map[string]int
	// heartbeat loses a heartbeat on its way to coordinator to (a NATS
	// that stops carrying a host's heartbeats).
	heartbeat func(to string, hb *messages.Heartbeat) bool
}

// any reports whether the run has a broken server: a mutation that
// changes what servers send excuses failures as a fault does. (A drop
// mutation breaks the component that should have sent or taken the
// message; the checks of a run without faults still hold it to them.)
func (m mutations) any() bool { return m.deliver != nil || m.block != nil || len(m.lie) > 0 }

// Stats is what one run (or many, added up) did.
type Stats struct {
	Runs, Scans, OK, Abandoned int
	Failed                     map[string]int // by error kind
	Events                     int
	SimTime                    time.Duration
	NetFaults, ProcFaults      int
	Resumes, Rejected          int
	Forwarded, Reforwarded     uint64
	Rerouted, Direct           uint64
	ActorFailures              uint64
	// Kinds counts the process faults by kind, and the coordinators a
	// client lost to silence.
	Kinds map[string]int
}

func (s *Stats) add(o Stats) {
	s.Runs += o.Runs
	s.Scans += o.Scans
	s.OK += o.OK
	s.Abandoned += o.Abandoned
	s.Events += o.Events
	s.SimTime += o.SimTime
	s.NetFaults += o.NetFaults
	s.ProcFaults += o.ProcFaults
	s.Resumes += o.Resumes
	s.Rejected += o.Rejected
	s.Forwarded += o.Forwarded
	s.Reforwarded += o.Reforwarded
	s.Rerouted += o.Rerouted
	s.Direct += o.Direct
	s.ActorFailures += o.ActorFailures
	for k, v := range o.Kinds {
		if s.Kinds == nil {
			s.Kinds = map[string]int{}
		}
		s.Kinds[k] += v
	}
	for k, v := range o.Failed {
		if s.Failed == nil {
			s.Failed = map[string]int{}
		}
		s.Failed[k] += v
	}
}

// String summarises stats for the test log.
func (s Stats) String() string {
	return fmt.Sprintf("%d runs, %d scans: %d ok, %d abandoned, %d failed %v; %d resumes, %d batches rejected; "+
		"coordinators forwarded %d requests (%d again after a dead owner), rerouted %d from stopped tablet actors, took %d direct, %d actor failures; "+
		"%d network and %d process faults %v; %d events, %v simulated",
		s.Runs, s.Scans, s.OK, s.Abandoned, s.Scans-s.OK-s.Abandoned, s.Failed, s.Resumes, s.Rejected,
		s.Forwarded, s.Reforwarded, s.Rerouted, s.Direct, s.ActorFailures, s.NetFaults, s.ProcFaults, s.Kinds, s.Events, s.SimTime.Round(time.Second))
}

// Result is the outcome of one run.
type Result struct {
	Seed      uint64
	Problems  []string // property violations; empty = the run passed
	Trace     string   // when traced
	TraceHash uint64   // FNV-64a of the trace, when traced
	Stats     Stats
}

// Run simulates cfg; with trace, Result.Trace has every event.
func Run(cfg Config, trace bool) (*Result, error) {
	return run(cfg, trace, mutations{})
}

func run(cfg Config, trace bool, mut mutations) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	for _, text := range []string{cfg.Profiles, cfg.ReloadProfiles} {
		if _, err := parsedProfiles(text); err != nil {
			return nil, err
		}
	}
	w := &world{cfg: cfg, s: newScheduler(cfg.Seed), profiles: cfg.Profiles, mut: mut, procs: map[string]*proc{},
		store: newMemStore(), jobs: map[jobKey]*proc{}, dispatched: map[attemptKey]time.Time{}}
	w.stats.Failed = map[string]int{}
	w.stats.Kinds = map[string]int{}
	if cfg.Faults.Skew > 0 {
		w.stats.Kinds["skewed run"]++
	}
	w.trace = &tracer{on: trace, clock: w.s, hash: fnv.New64a()}
	w.faults = newFaultLog(w.s)
	w.net = &network{w: w, cfg: cfg.Net, last: map[[2]string]time.Time{}, failing: map[[2]string]failingEndpoint{},
		connects: map[connectKey]bool{}}
	if err := w.ingest(rand.New(rand.NewPCG(cfg.Seed, 0x7ab1e))); err != nil {
		return nil, err
	}
	w.build()
	quietAfter := w.scheduleFaults()
	for _, sr := range w.scans {
		quietAfter = maxTime(quietAfter, sr.deadline)
	}
	w.loop(quietAfter.Add(cfg.LeakBound))
	w.finalChecks()
	if len(w.problems) == 0 {
		w.settle(quietAfter)
		w.checkViews()
	}
	w.shutdown()
	w.stats.Runs = 1
	w.stats.Events = w.s.steps
	w.stats.SimTime = w.s.now.Sub(epoch)
	for _, fs := range w.faults.byRequest {
		w.stats.NetFaults += len(fs)
	}
	for _, fs := range w.faults.procs {
		w.stats.ProcFaults += len(fs)
	}
	res := &Result{Seed: cfg.Seed, Problems: w.problems, Stats: w.stats}
	if trace {
		res.Trace = w.trace.String()
		res.TraceHash = w.trace.hash.Sum64()
	}
	return res, nil
}

// parsedProfiles parses a run's profiles. Each run parses its own: a
// policy may keep state shared by the tablets of one coordinator (the
// clickhouse-random error pool), which must not leak from run to run.
func parsedProfiles(text string) (*selection.Profiles, error) {
	p, err := selection.ParseProfiles([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("sim: profiles: %w", err)
	}
	return p, nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (w *world) newProc(addr string) *proc {
	p := &proc{w: w, addr: addr}
	if f := w.cfg.Faults.Skew; f > 0 {
		p.skew = w.s.uniform(-f, f)
	}
	w.procs[addr] = p
	return p
}

func (w *world) build() {
	cfg := w.cfg
	for i := range cfg.Coordinators {
		c := &coordProc{w: w, name: fmt.Sprintf("coord-%d", i+1)}
		c.proc = w.newProc(c.name + ":8090")
		w.coords = append(w.coords, c)
	}
	for i := range cfg.Hosts {
		h := &hostProc{w: w, name: fmt.Sprintf("h%d", i+1), zone: fmt.Sprintf("z%d", i%2+1)}
		h.proc = w.newProc(h.name + ":8100")
		w.hosts = append(w.hosts, h)
	}
	if w.mut.block != nil || len(w.mut.lie) > 0 {
		for _, h := range w.hosts {
			w.faults.procStart(h.proc.addr, "broken on purpose", w.s.now)
		}
	}
	for _, c := range w.coords {
		c.start()
	}
	w.setMembers()
	for _, h := range w.hosts {
		h.start()
	}
	for i := range cfg.Clients {
		c := &clientProc{w: w, byReq: map[string]*scanRun{}, lost: map[string]string{}, actors: map[tabletAt]*actor.PID{}}
		c.proc = w.newProc(fmt.Sprintf("client-%d:9000", i+1))
		c.proc.skew = 0 // the client's deadlines are the run's
		c.self = &messages.Pid{Address: c.proc.addr, Id: "client"}
		c.byOwner, c.direct = w.s.rng.IntN(2) == 0, w.s.rng.IntN(2) == 0
		if w.mut.client != nil {
			w.mut.client(c)
		}
		w.clients = append(w.clients, c)
		for range cfg.ScansPerClient {
			sr := w.newScan(c)
			at := w.s.uniform(0, cfg.ScanStartMax)
			sr.deadline = epoch.Add(at + w.s.uniform(cfg.DeadlineMin, cfg.DeadlineMax)).Truncate(time.Millisecond)
			w.s.at(epoch.Add(at), "scan start", func() { c.start(sr) })
		}
	}
}

func (w *world) clientAt(p *proc) *clientProc {
	for _, c := range w.clients {
		if c.proc == p {
			return c
		}
	}
	return nil
}

// newScan picks a tablet and a piece of it: the whole tablet, or a range
// between two keys that may or may not be rows.
func (w *world) newScan(c *clientProc) *scanRun {
	r := w.s.rng
	sr := &scanRun{n: len(w.scans), cl: c, tablet: r.IntN(len(w.truth.refs)), hint: w.cfg.Hints[r.IntN(len(w.cfg.Hints))],
		sentTo: map[string]string{}}
	if w.cfg.Unplaceable != "" && r.IntN(25) == 0 {
		sr.hint = w.cfg.Unplaceable
	}
	tr := w.truth.tabletRange(sr.tablet)
	sr.rng = tr
	if r.IntN(2) == 0 {
		key := func() []byte {
			k := w.truth.rows[r.IntN(len(w.truth.rows))].Key
			if r.IntN(3) == 0 {
				k = append(bytes.Clone(k), 'x')
			}
			return k
		}
		a, b := key(), key()
		if bytes.Compare(a, b) > 0 {
			a, b = b, a
		}
		if got := (tablets.Range{Start: a, End: b}).Intersect(tr); !got.Empty() {
			sr.rng = got
		}
	}
	switch r.IntN(20) {
	case 0, 1, 2:
		sr.limit = 1 + r.IntN(40)
	case 3, 4:
		sr.abandonAfter = 1 + r.IntN(30)
	}
	if w.mut.shape != nil {
		w.mut.shape(w, sr)
	}
	w.scans = append(w.scans, sr)
	return sr
}

// loop runs events until every scan ended and nothing of them is left,
// or until the hard stop.
func (w *world) loop(stop time.Time) { w.runUntil(stop, "no convergence", w.quiet) }

// runUntil runs events until stop, or until done (checked every 64
// events; nil: never) holds; a crash is a problem, and so is reaching
// MaxEvents, reported as what.
func (w *world) runUntil(stop time.Time, what string, done func() bool) {
	for w.s.step(stop) {
		for _, c := range w.s.crashed {
			w.problem("%s", c)
		}
		w.s.crashed = nil
		if w.s.steps >= w.cfg.MaxEvents {
			w.problem("%s: %d events by %s", what, w.s.steps, fmtDur(w.s.now.Sub(epoch)))
			return
		}
		if done != nil && w.s.steps%64 == 0 && done() {
			return
		}
	}
}

// quiet: every scan ended, no message is in flight, and no coordinator
// or server holds anything of a scan.
func (w *world) quiet() bool {
	for _, sr := range w.scans {
		if !sr.ended {
			return false
		}
	}
	if w.net.inFlight > 0 {
		return false
	}
	for _, p := range w.procs {
		if len(p.held) > 0 {
			return false
		}
	}
	return len(w.leftovers()) == 0
}

// leftovers lists what live processes still hold of scans: flows on
// coordinators, attempts in flight in their load views, queued and
// running jobs on servers.
func (w *world) leftovers() []string {
	var out []string
	for _, c := range w.coords {
		if c.proc.state == procDead {
			continue
		}
		st := c.co.Status()
		if st.GetFlows() > 0 {
			out = append(out, fmt.Sprintf("%s has %d flows", c.proc.addr, st.GetFlows()))
		}
		for _, s := range c.co.View().Servers {
			if s.InFlight != 0 {
				out = append(out, fmt.Sprintf("%s counts %d attempts in flight on %s", c.proc.addr, s.InFlight, s.ID))
			}
		}
	}
	for _, h := range w.hosts {
		if h.proc.state == procDead {
			continue
		}
		for i, ctr := range h.counters {
			if q, a := ctr.QueueLen.Load(), ctr.Active.Load(); q != 0 || a != 0 {
				out = append(out, fmt.Sprintf("server %s/%d has %d queued and %d running jobs", h.proc.addr, i, q, a))
			}
		}
	}
	return out
}

func (w *world) problem(format string, args ...any) {
	msg := fmt.Sprintf("at %s: ", fmtDur(w.s.now.Sub(epoch))) + fmt.Sprintf(format, args...)
	w.problems = append(w.problems, msg)
	w.trace.printf("PROBLEM %s", msg)
}

// violate is problem for the components' own invariants.
func (w *world) violate(format string, args ...any) { w.problem(format, args...) }

// shutdown gives every goroutine still parked its way out, so that none
// outlives the run.
func (w *world) shutdown() {
	for _, p := range w.procs {
		if p.state != procDead {
			p.kill()
		}
	}
	for len(w.s.coros) > 0 {
		c := w.s.coros[0]
		w.s.run(c, false)
		if !c.done {
			w.s.drop(c)
		}
	}
}

// coordProc is a coordinator process running the real coordinator's
// actors (coordinator.NewLocalCoordinator).
type coordProc struct {
	w    *world
	name string
	proc *proc
	co   *coordinator.Coordinator
	// panics injects actor failures into co (its Env's middleware).
	panics *panicker
	lease  bool // in the others' members (its lease is live)
	// gone: when it was last seen dead or paused (lease expiry).
	expiry *event
	stats  Stats
}

func (c *coordProc) start() {
	w, p := c.w, c.proc
	p.inc++
	p.state = procUp
	p.sys = p.newSystem()
	cfg := coordinator.DefaultCoordinatorConfig()
	cfg.Flow = w.cfg.Flow
	cfg.Clock = p.now
	cfg.Env = p.env(p.inc)
	panics := newPanicker()
	cfg.Env.Middleware = panics.middleware()
	cfg.Hostname = c.name
	cfg.TabletIdle = w.cfg.TabletIdle
	cfg.Logger = remoting.DiscardLogger()
	profiles, err := parsedProfiles(w.profiles)
	if err != nil {
		w.problem("%s: %v", p.addr, err)
		return
	}
	co, err := coordinator.NewLocalCoordinator(cfg, metaSource{w.store}, profiles)
	if err == nil {
		err = co.StartLocal(p.sys)
	}
	if err != nil {
		w.problem("%s does not start: %v", p.addr, err)
		return
	}
	c.co, c.panics = co, panics
	c.lease = true
	w.trace.printf("%s starts (incarnation %d, clock %+v)", p.addr, p.inc, p.skew)
}

// collect adds the coordinator's counters to the run's stats (before it
// dies, and at the end).
func (c *coordProc) collect() {
	if c.co == nil {
		return
	}
	st := c.co.Status()
	c.w.stats.Reforwarded += st.GetReforwarded()
	c.w.stats.Rerouted += st.GetRerouted()
	c.w.stats.Direct += st.GetDirectRequests()
	c.w.stats.ActorFailures += st.GetActorFailures()
}

// members are the coordinators whose lease is live, by address.
func (w *world) members() []string {
	var out []string
	for _, c := range w.coords {
		if c.lease {
			out = append(out, c.proc.addr)
		}
	}
	return out
}

// setMembers tells every running coordinator the members (the cluster
// topology the lease watch gives); a paused one learns when it resumes.
func (w *world) setMembers() {
	m := w.members()
	w.trace.printf("members: %v", m)
	for _, c := range w.coords {
		p, co := c.proc, c.co
		if co == nil {
			continue
		}
		p.at(w.s.uniform(0, w.cfg.Faults.DetectMax), p.inc, "topology", func() { co.SetMembers(m) }, nil)
	}
}

// hostProc is a scanserver process: real scan-server actors, and the
// heartbeats its host agent would publish.
type hostProc struct {
	w        *world
	name     string
	zone     string
	proc     *proc
	pids     []*actor.PID
	ids      []string
	counters []*scanserver.ServerCounters
}

func (h *hostProc) start() {
	w, p := h.w, h.proc
	p.inc++
	p.state = procUp
	p.sys = p.newSystem()
	h.pids, h.ids, h.counters = nil, nil, nil
	inc := p.inc
	scfg := scanserver.DefaultScanServerConfig()
	sm := w.cfg.Server
	scfg.Workers, scfg.MaxQueue, scfg.BatchRows, scfg.Window, scfg.AckTimeout = sm.Workers, sm.MaxQueue, sm.BatchRows, sm.Window, sm.AckTimeout
	scfg.Clock = p.now
	scfg.Env = p.env(inc)
	scfg.Env.Middleware = []actor.ReceiverMiddleware{actorenv.Panicking} // scan server panics (faults.go)
	scfg.Fault.Lie = w.mut.lie
	log := remoting.DiscardLogger()
	for i := range w.cfg.ServersPerHost {
		id := fmt.Sprintf("%s/%d", p.addr, i)
		counters := &scanserver.ServerCounters{}
		sys := p.sys
		newActor := func() *scanserver.ScanServerActor {
			return scanserver.NewScanServerActor(scfg, scanserver.ServerDeps{ID: id, Host: h.name, Fetcher: fetcher{w}, System: sys, Counters: counters, Logger: log})
		}
		pid, err := sys.Root.SpawnNamed(scanserver.ServerProps(newActor, log, scfg.Env.Props()...), scanserver.ServerActorID(i))
		if err != nil {
			w.problem("%s: spawn server %d: %v", p.addr, i, err)
			return
		}
		h.pids, h.ids, h.counters = append(h.pids, pid), append(h.ids, id), append(h.counters, counters)
	}
	w.trace.printf("%s starts (incarnation %d, clock %+v)", p.addr, inc, p.skew)
	h.beat(inc)
}

// incarnation is the incarnation the servers of h's process
// incarnation inc announce.
func (h *hostProc) incarnation(inc int) string { return fmt.Sprintf("%s-i%d", h.proc.addr, inc) }

// beat sends every server's heartbeat to every coordinator, now and then
// every Heartbeat interval, while incarnation inc lives.
func (h *hostProc) beat(inc int) {
	w, p := h.w, h.proc
	for i, id := range h.ids {
		c := h.counters[i]
		hb := &messages.Heartbeat{Host: h.name, Server: id, Zone: h.zone, Group: "default", Pid: wire.FromPID(h.pids[i]),
			Incarnation: h.incarnation(inc), QueueLen: uint32(max(c.QueueLen.Load(), 0)), Active: uint32(max(c.Active.Load(), 0)),
			Workers: uint32(w.cfg.Server.Workers), SentUnixMs: p.now().UnixMilli(), BusyTotal: c.Busy.Load(),
			IntervalMs: w.cfg.Server.Heartbeat.Milliseconds(), ScansTotal: c.Scans.Load()}
		for _, co := range w.coords {
			w.publish(p, co, hb)
		}
	}
	p.at(w.cfg.Server.Heartbeat, inc, "heartbeat", func() { h.beat(inc) }, nil)
}

// publish carries a heartbeat over NATS to a coordinator (delayed, and
// dropped or late as the network's faults say).
func (w *world) publish(from *proc, to *coordProc, hb *messages.Heartbeat) {
	s := w.s
	at := s.uniform(w.net.cfg.MinDelay, w.net.cfg.MaxDelay)
	switch {
	case s.chance(w.net.cfg.Drop):
		w.faults.message(from.addr, to.proc.addr, hb, "dropped")
		return
	case s.chance(w.net.cfg.Late):
		w.faults.message(from.addr, to.proc.addr, hb, "late")
		at = s.uniform(w.net.cfg.MaxDelay, w.net.cfg.LateMax)
	}
	if w.mut.heartbeat != nil && w.mut.heartbeat(to.proc.addr, hb) {
		w.trace.printf("heartbeat %s -> %s DROPPED BY THE MUTANT", hb.GetServer(), to.proc.addr)
		return
	}
	hb = proto.Clone(hb).(*messages.Heartbeat)
	tp := to.proc
	tinc := tp.inc
	s.after(at, "heartbeat delivery", func() {
		tp.run(tinc, func() { to.co.Heartbeat(hb) }, nil)
	})
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
