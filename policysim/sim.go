package policysim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/scanflow"
	"github.com/scanplane/scanplane/selection"
)

// epoch is virtual time 0.
var epoch = time.Unix(1_700_000_000, 0)

// request is one client request: a scan of one key through the
// coordinator's ScanFlow.
type request struct {
	id       int
	cl       *client
	key      int32
	set      int32
	arrival  int64
	measured bool
	flow     *scanflow.ScanFlow
	atts     []*attempt // by attempt number - 1
	answered bool       // first data reached the client
	done     bool
	failed   bool
	// The flow, the first attempt and room for the attempts list live in
	// the request: one allocation per request instead of four.
	flowMem scanflow.ScanFlow
	att1    attempt
	attsMem [1]*attempt
}

// Result is what one run records.
type Result struct {
	Config Config
	Policy string
	// Latencies of the counted requests that got data, arrival at the
	// coordinator to first data at the client, sorted.
	Latencies []time.Duration
	// Requests: counted arrivals; Completed and Failed of them.
	Requests, Completed, Failed int
	// Completions counts every flow's end (warm-up included); a flow that
	// ended twice would show here.
	Completions, Arrivals int
	// Dispatches, Hedges, Busy and Timeouts count attempts (all of the run).
	Dispatches, Hedges, Busy, Timeouts int
	// Events: simulation events scheduled; each is processed, or dropped
	// once processing it can change nothing (eventQ.compact).
	Events int
	// Diag: with Config.Diagnose, what the policy saw when it chose.
	Diag *Diag
}

// Quantile returns the q quantile (0..1) of the latencies (nearest rank).
func (r *Result) Quantile(q float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	k := int(math.Ceil(q*float64(len(r.Latencies)))) - 1
	return r.Latencies[min(max(k, 0), len(r.Latencies)-1)]
}

type sim struct {
	cfg       Config
	policy    string
	q         eventQ
	seq       uint64
	now       int64
	rng       *rand.Rand // the workload and the servers' rates
	svc       *rand.Rand // service times
	servers   []*server
	hosts     [][]int32
	hostNames []string
	clients   []*client
	ids       map[selection.ServerID]int32
	keyCDF    []float64          // Skew > 0: cumulative popularity by rank
	keyPerm   []int32            // rank → key
	tablets   []selection.Tablet // by key; never modified
	interval  int64              // mean time between arrivals
	horizon   int64
	arrived   int
	measured  int
	open      int
	res       *Result
	sig       *signals
	// builders: one ViewBuilder per replica set, shared by the
	// coordinators. A builder shares with the next view only what
	// depends on the set's membership (the same at every coordinator) and
	// gives the same answers as a fresh one, so sharing it changes no
	// choice, and Clients × sets builders' scratch space is not kept.
	builders []*selection.ViewBuilder
	// deadlines of the flows, in arrival order, from dhead.
	deadlines []deadline
	dhead     int
	// compactAt: the queue length at which its dead events are dropped.
	compactAt int
	// cur: the sequence number of the event being processed (0 for a
	// deadline, which goes before the events of its time).
	cur uint64
	// batches: the servers of each evProbes event, by its val; a batch
	// is free again once its event is processed.
	batches     [][]int32
	freeBatches []int32
	fin         *messages.ScanFinished
	// req is every flow's ScanRequest: the model's flows read nothing of
	// it but the request id in their errors, which no result shows.
	req *messages.ScanRequest
	in  selection.Input
	dg  *diag // nil unless Config.Diagnose
}

// Run simulates cfg with the policy named policy whose profiles document
// (one default profile, as the coordinator loads it) is profilesJSON.
// "least-outstanding" runs LeastOutstanding over the profile's policy.
func Run(cfg Config, policy string, profilesJSON []byte) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Two streams: what a policy cannot change (arrivals, their keys and
	// coordinators, the rate switches) draws from rng alone, so every
	// policy of a seed meets the same workload and the same slow servers;
	// service times, drawn as scans start in an order the policy sets,
	// draw from svc, seeded apart with ServiceSeed.
	svcSeed := cfg.Seed
	if cfg.ServiceSeed != 0 {
		svcSeed = cfg.ServiceSeed
	}
	s := &sim{cfg: cfg, policy: policy, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5ca9)), svc: rand.New(rand.NewPCG(svcSeed, 0x5e7c)),
		ids: map[selection.ServerID]int32{},
		res: &Result{Config: cfg, Policy: policy}, horizon: math.MaxInt64, compactAt: minCompact,
		req: &messages.ScanRequest{RequestId: "sim"}}
	s.interval = int64(float64(time.Second) / (cfg.Utilization * cfg.Capacity()))
	nh := cfg.Servers / cfg.ServersPerHost
	s.hosts = make([][]int32, nh)
	// One string per host name, shared by every coordinator's view.
	s.hostNames = make([]string, nh)
	for h := range s.hostNames {
		s.hostNames[h] = fmt.Sprintf("h%05d", h)
	}
	for i := range cfg.Servers {
		sv := &server{id: selection.ServerID(fmt.Sprintf("s%05d", i)), host: i % nh, slow: 1}
		s.servers = append(s.servers, sv)
		s.ids[sv.id] = int32(i)
		s.hosts[sv.host] = append(s.hosts[sv.host], int32(i))
	}
	switch cfg.Fault {
	case FaultSlowServer:
		s.servers[0].slow = cfg.SlowFactor
	case FaultSlowHost:
		for _, i := range s.hosts[0] {
			s.servers[i].slow = cfg.SlowFactor
		}
	}
	if cfg.Skew > 0 {
		s.keyCDF = make([]float64, cfg.Keys)
		sum := 0.0
		for r := range cfg.Keys {
			sum += 1 / math.Pow(float64(r+1), cfg.Skew)
			s.keyCDF[r] = sum
		}
		for r := range s.keyCDF {
			s.keyCDF[r] /= sum
		}
		s.keyPerm = make([]int32, cfg.Keys)
		for i := range s.keyPerm {
			s.keyPerm[i] = int32(i)
		}
		s.rng.Shuffle(len(s.keyPerm), func(i, j int) { s.keyPerm[i], s.keyPerm[j] = s.keyPerm[j], s.keyPerm[i] })
	}
	s.tablets = make([]selection.Tablet, cfg.Keys)
	for key := range s.tablets {
		t := selection.Tablet{Table: "t", EndRow: fmt.Appendf(nil, "%08d", key)}
		if key > 0 {
			t.PrevEndRow = fmt.Appendf(nil, "%08d", key-1)
		}
		s.tablets[key] = t
	}
	nsets := cfg.Servers
	if cfg.Replication == 0 {
		nsets = 1
	}
	s.builders = make([]*selection.ViewBuilder, nsets)
	for i := range cfg.Clients {
		ps, err := selection.ParseProfiles(profilesJSON)
		if err != nil {
			return nil, fmt.Errorf("policysim: profiles of %s: %w", policy, err)
		}
		c := &client{idx: i, sim: s, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i)+1)), profiles: ps, profile: ps.Default(),
			decays: ps.Decays(), pctAt: -1, states: make([]*selection.TabletState, cfg.Keys)}
		c.policy = ps.Policy(c.profile)
		if base, _, _ := strings.Cut(policy, ":"); base == LeastOutstanding {
			c.policy = leastOutstanding{inner: c.policy}
		}
		c.prober, _ = c.policy.(selection.Prober)
		c.srv = make([]srvState, cfg.Servers)
		if s.sig == nil {
			s.sig = newSignals(cfg.Servers, c.decays)
		}
		// Every counter starts empty: the servers' counters are the
		// signals' empty ones, shared by every coordinator until it
		// counts something there (client.own). Reading one array that
		// stays in the cache instead of one per coordinator and server
		// reads the same values.
		zero := s.sig.zero
		for k, sv := range s.servers {
			c.srv[k].work = selection.ServerLoad{ID: sv.id, Host: s.hostNames[sv.host], Group: selection.DefaultGroup,
				Address: "sim", ActorID: string(sv.id), Incarnation: "1", Alive: true, Workers: cfg.Workers,
				Errors: zero, Slowdowns: zero, Busy: zero, LastHeartbeat: epoch}
			c.srv[k].shared = true
		}
		c.sig = s.sig
		c.sets = make([]setView, nsets)
		s.clients = append(s.clients, c)
	}
	s.q.setLanes(s.laneDelays())
	// Periodic processes, each host's heartbeat at its own phase.
	for h := range s.hosts {
		s.push(event{at: s.rng.Int64N(int64(cfg.Heartbeat)), kind: evHeartbeat, srv: int32(h)})
	}
	if cfg.RateSwitch > 0 {
		s.switchRates()
		s.push(event{at: int64(cfg.RateSwitch), kind: evRateSwitch})
	}
	s.push(event{at: sweepEvery, kind: evSweep})
	if cfg.Fault == FaultHung {
		s.push(event{at: int64(cfg.Warmup), kind: evHang, srv: 0})
	}
	s.push(event{at: s.nextGap(), kind: evArrival})
	if cfg.Diagnose {
		s.dg = newDiag(s)
	}
	s.loop()
	slices.Sort(s.res.Latencies)
	if s.dg != nil {
		s.res.Diag = s.dg.result()
	}
	return s.res, nil
}

// laneDelays are the delays most events are pushed with (eventQ): a
// message's one or two network hops, the accept notice, the stall timer,
// the heartbeat period, and the busy timeouts of the attempt plans at the
// server and, with the slack, at the coordinator.
func (s *sim) laneDelays() []int64 {
	ow := int64(s.cfg.OneWay)
	d := []int64{ow, 2 * ow, int64(acceptNoticeDelay), int64(s.cfg.Flow.StartStall), int64(s.cfg.Heartbeat)}
	for _, p := range s.clients[0].profile.AttemptPlans {
		if p.BusyTimeout > 0 {
			d = append(d, int64(p.BusyTimeout), int64(p.BusyTimeout+s.cfg.Flow.BusySlack))
		}
	}
	return d
}

// deadline is a flow's deadline timer.
type deadline struct {
	at  int64
	req *request
}

// nextDeadline pops the first deadline of a flow still running, or nil.
func (s *sim) nextDeadline() *deadline {
	for s.dhead < len(s.deadlines) {
		d := &s.deadlines[s.dhead]
		if !d.req.flow.Done() {
			return d
		}
		s.deadlines[s.dhead] = deadline{}
		s.dhead++
		if s.dhead > 4096 && s.dhead*2 > len(s.deadlines) {
			n := copy(s.deadlines, s.deadlines[s.dhead:])
			s.deadlines = s.deadlines[:n]
			s.dhead = 0
		}
	}
	return nil
}

// compactDeadlines drops the deadlines of ended flows from the FIFO, in
// order, once they outnumber the open flows four times: one long flow at
// the head would otherwise keep every later request alive until it ends.
func (s *sim) compactDeadlines() {
	n := len(s.deadlines) - s.dhead
	if n <= 4096 || n <= 4*s.open {
		return
	}
	kept := s.deadlines[:0]
	for _, d := range s.deadlines[s.dhead:] {
		if !d.req.flow.Done() {
			kept = append(kept, d)
		}
	}
	clear(s.deadlines[len(kept):])
	s.deadlines, s.dhead = kept, 0
}

func (s *sim) t(ns int64) time.Time { return epoch.Add(time.Duration(ns)) }

func (s *sim) push(e event) {
	if e.at > s.horizon {
		return
	}
	s.seq++
	e.seq = s.seq
	s.res.Events++
	s.q.push(e, s.now)
	if s.q.len() >= s.compactAt {
		s.q.compact(s.dead)
		s.compactAt = max(2*s.q.len(), minCompact)
	}
}

// minCompact is the least queue length at which dead events are dropped.
const minCompact = 1 << 14

// dead reports whether processing e can change nothing: a timer of an
// ended flow (a started scan's stall timer outlives its flow by
// seconds), or a server's timer for an attempt no longer in the phase it
// was set for. Dropping these keeps the queue, and the requests it holds,
// as large as the work in progress.
func (s *sim) dead(e *event) bool {
	switch e.kind {
	case evFlowTimer:
		return e.req.flow.Done()
	case evServerBusy:
		return e.att.phase != phaseQueued
	case evNotice, evServiceDone:
		return e.att.phase != phaseRunning
	}
	return false
}

func (s *sim) nextGap() int64 {
	return int64(s.rng.ExpFloat64() * float64(s.interval))
}

// setMembers lists the servers of replica set i: the ring's consecutive
// servers from i, or every server; appended to buf[:0].
func (s *sim) setMembers(i int32, buf []int32) []int32 {
	r := s.cfg.Replication
	if r == 0 {
		r = s.cfg.Servers
	}
	m := buf[:0]
	for k := range r {
		m = append(m, (i+int32(k))%int32(s.cfg.Servers))
	}
	return m
}

// lookup returns the index of the server with that ID. IDs are "s"
// and the index in five or more digits: the digits name the server when
// its ID is id, the map the others.
func (s *sim) lookup(id selection.ServerID) (int32, bool) {
	if len(id) >= 6 && id[0] == 's' {
		n := 0
		for k := 1; k < len(id); k++ {
			c := id[k]
			if c < '0' || c > '9' || n > len(s.servers) {
				n = -1
				break
			}
			n = n*10 + int(c-'0')
		}
		if n >= 0 && n < len(s.servers) && s.servers[n].id == id {
			return int32(n), true
		}
	}
	i, ok := s.ids[id]
	return i, ok
}

// index is lookup's index, 0 for an unknown ID.
func (s *sim) index(id selection.ServerID) int32 {
	i, _ := s.lookup(id)
	return i
}

// builder is replica set i's ViewBuilder.
func (s *sim) builder(i int32) *selection.ViewBuilder {
	if s.builders[i] == nil {
		s.builders[i] = &selection.ViewBuilder{}
	}
	return s.builders[i]
}

func (s *sim) drawKey() int32 {
	if s.keyCDF == nil {
		return int32(s.rng.IntN(s.cfg.Keys))
	}
	u := s.rng.Float64()
	r, _ := slices.BinarySearch(s.keyCDF, u)
	return s.keyPerm[min(r, len(s.keyPerm)-1)]
}

func (s *sim) switchRates() {
	for _, sv := range s.servers {
		sv.fast = s.rng.IntN(2) == 1
	}
}

// running reports whether arrivals or flows remain: periodic processes
// stop once nothing does.
func (s *sim) running() bool { return s.measured < s.cfg.Requests || s.open > 0 }

func (s *sim) loop() {
	for s.q.len() > 0 {
		src, at := s.q.first()
		if d := s.nextDeadline(); d != nil && d.at <= at {
			// A deadline goes before the events of its time.
			s.now, s.cur = d.at, 0
			if !d.req.flow.Done() {
				s.apply(d.req, d.req.flow.OnTimer(s.t(s.now), scanflow.TimerDeadline, 0, d.req.pick))
			}
			continue
		}
		e := s.q.popFrom(src)
		s.now, s.cur = e.at, e.seq
		switch e.kind {
		case evArrival:
			s.arrival()
		case evStartScan:
			s.startScan(e.att)
		case evCancel:
			s.cancel(e.att)
		case evServerBusy:
			s.serverBusy(e.att)
		case evNotice:
			a := e.att
			if a.phase == phaseRunning && !s.servers[a.srv].hung {
				s.toClient(a, msgStarted, int64(s.servers[a.srv].queued))
			}
		case evServiceDone:
			s.serviceDone(e.att)
		case evToClient:
			s.clientMessage(e.att, e.msg, e.val)
		case evFlowTimer:
			r := e.req
			if !r.flow.Done() {
				s.apply(r, r.flow.OnTimer(s.t(s.now), e.timer, e.n, r.pick))
			}
		case evSignal:
			s.sig.add(s.t(s.now), e.srv, e.msg == msgBusy, int(e.val))
		case evHeartbeat:
			s.heartbeat(e.srv)
		case evHeartbeatIn:
			s.heartbeatIn(e)
		case evRateSwitch:
			s.switchRates()
			if s.running() {
				s.push(event{at: s.now + int64(s.cfg.RateSwitch), kind: evRateSwitch})
			}
		case evSweep:
			s.sweep()
			if s.running() {
				s.push(event{at: s.now + sweepEvery, kind: evSweep})
			}
		case evProbes:
			s.probes(e)
		case evHang:
			s.servers[e.srv].hung = true
		}
	}
}

func (s *sim) arrival() {
	c := s.clients[s.rng.IntN(len(s.clients))]
	key := s.drawKey()
	set := key % int32(s.cfg.Servers)
	if s.cfg.Replication == 0 {
		set = 0
	}
	r := &request{id: s.arrived, cl: c, key: key, set: set, arrival: s.now, measured: s.now >= int64(s.cfg.Warmup)}
	s.arrived++
	s.res.Arrivals++
	if r.measured {
		s.measured++
		s.res.Requests++
	}
	if s.measured < s.cfg.Requests {
		s.push(event{at: s.now + s.nextGap(), kind: evArrival})
	}
	s.open++
	if c.states[key] == nil {
		c.states[key] = &selection.TabletState{}
	}
	r.flowMem = *scanflow.NewScanFlow(s.req, time.Time{}, s.cfg.Flow, c.profile.TimeToWaitForScanServers, nil)
	r.flow, r.atts = &r.flowMem, r.attsMem[:0]
	s.apply(r, r.flow.Start(s.t(s.now), r.pick))
}

// srvOf is the server of r's dispatched attempt fa.
func (r *request) srvOf(fa *scanflow.FlowAttempt) int32 { return r.atts[fa.N-1].srv }

// pick is r's scanflow.Picker: the policy's choice for r's tablet over
// its coordinator's view of the tablet's replicas.
func (r *request) pick(now time.Time, history []selection.Attempt, hedge bool) (selection.Decision, error) {
	c := r.cl
	s := c.sim
	// One Input serves every decision: a policy keeps none of it.
	in := &s.in
	*in = selection.Input{Tablet: s.tablets[r.key], Profile: c.profile, Attempts: history, Hedge: hedge, View: c.view(s, r.set, s.now),
		Now: now, Rand: c.rng, State: c.states[r.key], LocalHost: "coordinator"}
	if c.prober != nil {
		s.takeAnswers(c)
	}
	d, err := c.policy.Select(in)
	if s.dg != nil {
		s.dg.pick(r, in, d, err)
	}
	if err == nil && c.prober != nil {
		if ids := c.prober.ProbeTargets(in); len(ids) > 0 {
			s.pushProbes(c, ids)
		}
	}
	*in = selection.Input{}
	return d, err
}

// apply carries out a flow's actions as the tablet actor does.
func (s *sim) apply(r *request, acts []scanflow.Action) {
	c := r.cl
	now := s.t(s.now)
	for _, act := range acts {
		switch act.Kind {
		case scanflow.ActDispatch:
			fa := act.Attempt
			i, ok := s.lookup(fa.Sel.Server)
			if !ok {
				panic("policysim: policy chose unknown server " + string(fa.Sel.Server))
			}
			a := &r.att1
			if fa.N != 1 {
				a = new(attempt)
			}
			*a = attempt{req: r, n: fa.N, srv: i, hedge: fa.Sel.Hedge, busyTimeout: int64(fa.Decision.BusyTimeout)}
			for len(r.atts) < int(fa.N) {
				r.atts = append(r.atts, nil)
			}
			r.atts[fa.N-1] = a
			c.dispatched(now, i)
			c.countDispatch(now.Unix(), fa.Sel.Hedge)
			s.res.Dispatches++
			if fa.Sel.Hedge {
				s.res.Hedges++
			}
			s.push(event{at: s.now + int64(s.cfg.OneWay), kind: evStartScan, att: a})
		case scanflow.ActCancel:
			if a := r.atts[act.Attempt.N-1]; a != nil {
				s.push(event{at: s.now + int64(s.cfg.OneWay), kind: evCancel, att: a})
			}
		case scanflow.ActAccount:
			c.ended(now, r.srvOf(act.Attempt), act.Result)
			switch act.Result {
			case selection.Busy:
				s.res.Busy++
			case selection.Timeout:
				s.res.Timeouts++
			}
		case scanflow.ActSlowdown:
			c.slowdown(now, r.srvOf(act.Attempt))
		case scanflow.ActLatency:
			c.latency(now, r.srvOf(act.Attempt), act.Latency)
		case scanflow.ActTimer:
			if act.Timer == scanflow.TimerDeadline {
				// Every flow's deadline is its start + MaxFlowAge: they
				// come in arrival order, so a FIFO holds them, not the heap.
				s.deadlines = append(s.deadlines, deadline{at: s.now + int64(act.After), req: r})
				s.compactDeadlines()
				continue
			}
			var n uint32
			if act.Attempt != nil {
				n = act.Attempt.N
			}
			s.push(event{at: s.now + int64(act.After), kind: evFlowTimer, req: r, timer: act.Timer, n: n})
		case scanflow.ActFail:
			r.failed = true
		case scanflow.ActComplete:
			if r.done {
				panic(fmt.Sprintf("policysim: request %d completed twice", r.id))
			}
			r.done = true
			s.open--
			s.res.Completions++
			if r.measured {
				if r.answered {
					s.res.Completed++
				} else {
					s.res.Failed++
				}
			}
		case scanflow.ActTimeoutSignal:
			s.push(event{at: s.now + 2*int64(s.cfg.OneWay), kind: evSignal, msg: msgStarted, srv: r.srvOf(act.Attempt)})
		}
	}
}

// startScan: a StartScan reaches its server.
func (s *sim) startScan(a *attempt) {
	sv := s.servers[a.srv]
	a.arrived = s.now
	a.rif = len(sv.running) + sv.queued
	if !sv.hung && len(sv.running) < s.cfg.Workers {
		s.start(sv, a)
		return
	}
	a.phase = phaseQueued
	sv.enqueue(a)
	if a.busyTimeout > 0 && !sv.hung {
		s.push(event{at: s.now + a.busyTimeout, kind: evServerBusy, att: a})
	}
}

func (s *sim) start(sv *server, a *attempt) {
	a.phase = phaseRunning
	a.began = s.now
	sv.running = append(sv.running, a)
	mean := float64(s.cfg.ServiceMean) * sv.slow
	if sv.fast {
		mean /= s.cfg.RateFactor
	}
	d := int64(s.svc.ExpFloat64() * mean)
	s.push(event{at: s.now + d, kind: evServiceDone, att: a})
	if d > int64(acceptNoticeDelay) {
		s.push(event{at: s.now + int64(acceptNoticeDelay), kind: evNotice, att: a})
	}
}

// acceptNoticeDelay is the scan server's AcceptNoticeDelay: a scan whose
// first batch does not follow its start within it is announced started.
const acceptNoticeDelay = time.Millisecond

func (s *sim) startNext(sv *server) {
	for !sv.hung && len(sv.running) < s.cfg.Workers {
		a := sv.next()
		if a == nil {
			return
		}
		s.start(sv, a)
	}
}

func (s *sim) serviceDone(a *attempt) {
	sv := s.servers[a.srv]
	if a.phase != phaseRunning || sv.hung {
		return
	}
	a.phase = phaseEnded
	sv.stopRunning(a)
	sv.est.add(s.now, a.rif, s.now-a.arrived)
	s.toClient(a, msgFinished, s.now-a.began)
	s.startNext(sv)
}

func (s *sim) serverBusy(a *attempt) {
	sv := s.servers[a.srv]
	if a.phase != phaseQueued || sv.hung {
		return
	}
	a.phase = phaseEnded
	sv.queued--
	s.toClient(a, msgBusy, 0)
	// The server also publishes a busy signal with its queue to every
	// coordinator (through NATS: two hops).
	s.push(event{at: s.now + 2*int64(s.cfg.OneWay), kind: evSignal, msg: msgBusy, srv: a.srv, val: int64(sv.queued)})
}

func (s *sim) cancel(a *attempt) {
	sv := s.servers[a.srv]
	if sv.hung {
		return
	}
	switch a.phase {
	case phaseQueued:
		a.phase = phaseEnded
		sv.queued--
	case phaseRunning:
		a.phase = phaseEnded
		sv.stopRunning(a)
		s.startNext(sv)
	default:
		return
	}
	s.toClient(a, msgCanceled, 0)
}

func (s *sim) toClient(a *attempt, m msgKind, val int64) {
	s.push(event{at: s.now + int64(s.cfg.OneWay), kind: evToClient, att: a, msg: m, val: val})
}

// clientMessage: a server's message reaches the attempt's coordinator.
func (s *sim) clientMessage(a *attempt, m msgKind, val int64) {
	r := a.req
	c := r.cl
	now := s.t(s.now)
	c.heard(now, a.srv)
	if m == msgStarted {
		c.queueReport(a.srv, int(val))
		if s.dg != nil {
			s.dg.report(c, a.srv)
		}
	}
	if r.flow.Done() {
		return
	}
	switch m {
	case msgStarted:
		s.apply(r, r.flow.OnStarted(now, a.n, false, 0))
	case msgBusy:
		s.apply(r, r.flow.OnBusy(now, a.n, r.pick))
	case msgFinished:
		if !r.answered {
			r.answered = true
			if r.measured {
				s.res.Latencies = append(s.res.Latencies, time.Duration(s.now-r.arrival))
				if s.dg != nil {
					s.dg.latency(r, a, time.Duration(s.now-r.arrival), int64(s.cfg.OneWay))
				}
			}
		}
		// One block per scan, read in the service time: the tablet
		// actor's recordBlockTime.
		fin := s.finished(r, a.n, messages.ErrorCode_ERROR_CODE_UNSPECIFIED)
		fin.Batches, fin.BlocksRead, fin.DurationUs = 1, 1, val/int64(time.Microsecond)
		if fa := r.flow.Attempt(a.n); fa != nil && fa.Decision.Placement != selection.PlacementUnknown && fin.DurationUs > 0 {
			c.blockTimes.Record(fa.Decision.Placement, time.Duration(fin.DurationUs)*time.Microsecond)
		}
		s.apply(r, r.flow.OnFinished(now, fin, r.pick))
	case msgCanceled:
		s.apply(r, r.flow.OnFinished(now, s.finished(r, a.n, messages.ErrorCode_ERROR_CODE_CANCELLED), r.pick))
	}
}

// finished returns the run's one ScanFinished, reset to attempt n of r
// ending with code: a flow reads the message it is handed and keeps none
// of it.
func (s *sim) finished(r *request, n uint32, code messages.ErrorCode) *messages.ScanFinished {
	if s.fin == nil {
		s.fin = new(messages.ScanFinished)
	}
	s.fin.Reset()
	s.fin.RequestId, s.fin.Attempt, s.fin.Error = r.flow.Req.GetRequestId(), n, code
	return s.fin
}

// beat is one host's load report in flight.
type beat struct{ ids, queued, active []int32 }

// heartbeat: host h reports its servers' queues and running scans to
// every coordinator (through NATS: two hops). A hung server reports
// nothing.
func (s *sim) heartbeat(h int32) {
	b := &beat{}
	for _, i := range s.hosts[h] {
		sv := s.servers[i]
		if sv.hung {
			continue
		}
		b.ids = append(b.ids, i)
		b.queued = append(b.queued, int32(sv.queued))
		b.active = append(b.active, int32(len(sv.running)))
	}
	if len(b.ids) > 0 {
		s.push(event{at: s.now + 2*int64(s.cfg.OneWay), kind: evHeartbeatIn, hb: b})
	}
	if s.running() {
		s.push(event{at: s.now + int64(s.cfg.Heartbeat), kind: evHeartbeat, srv: h})
	}
}

func (s *sim) heartbeatIn(e event) {
	now := s.t(s.now)
	for _, c := range s.clients {
		for k, i := range e.hb.ids {
			c.sync(i)
			l := &c.srv[i].work
			l.QueueLen, l.Active = int(e.hb.queued[k]), int(e.hb.active[k])
			l.LastHeartbeat = now
			l.Alive = true
			c.srv[i].heardAt = s.now
			c.touch(i)
		}
	}
}

// sweep: every coordinator drops the servers that missed
// HeartbeatMisses heartbeats, and ends the attempts it had there (the
// tablet actor's lost check).
func (s *sim) sweep() {
	limit := int64(s.cfg.HeartbeatMisses) * int64(s.cfg.Heartbeat)
	for _, c := range s.clients {
		for i := range c.srv {
			if !c.srv[i].work.Alive || s.now-c.srv[i].heardAt <= limit {
				continue
			}
			c.markDead(int32(i))
			sv := s.servers[i]
			held := append(slices.Clone(sv.running), sv.queue[sv.head:]...)
			for _, a := range held {
				if a == nil || a.req.cl != c || a.req.flow.Done() {
					continue
				}
				s.apply(a.req, a.req.flow.OnServerLost(s.t(s.now), a.n, a.req.pick))
			}
		}
	}
}
