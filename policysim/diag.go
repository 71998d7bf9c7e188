package policysim

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/scanplane/scanplane/selection"
)

// Diag is what a run with Config.Diagnose records about the policy's
// choices: what the coordinator's view said and what was so at the
// servers when it chose, and the latencies of requests by how much
// capacity their replicas had when they arrived. It reads the model's
// state and draws no random number: a run gives the same Result with and
// without it.
type Diag struct {
	// Decisions: first attempts of counted requests (no hedge, no retry).
	Decisions int `json:"decisions"`
	// NotShortest: the chosen replica had more scans (running + queued)
	// at its server than another replica when chosen; Excess: their mean
	// difference over every decision, in scans; Picked and Shortest: the
	// mean scans at the chosen replica and at the replica with fewest.
	NotShortest float64 `json:"not_shortest"`
	Excess      float64 `json:"excess_scans"`
	Picked      float64 `json:"picked_scans"`
	Shortest    float64 `json:"shortest_scans"`
	// ViewNotShortest: the chosen replica's load in the view
	// (max(InFlight, Active+QueueLen)) was above another's.
	ViewNotShortest float64 `json:"view_not_shortest"`
	// ViewBias and ViewError: the mean of (load in the view − scans at
	// the server) and of its absolute value over the candidates.
	ViewBias  float64 `json:"view_bias_scans"`
	ViewError float64 `json:"view_error_scans"`
	// InfoAge: the mean age of the chosen server's queue information at
	// this coordinator (its newest heartbeat or ScanStarted queue
	// report), ms; InfoOld: the share older than 100 ms.
	InfoAge float64 `json:"info_age_ms"`
	InfoOld float64 `json:"info_older_100ms"`
	// Home and Away: the shares of decisions the policy placed at the
	// tablet's home host or away from it (adaptive; 0 for policies that
	// place none). HomeLonger: home chosen while another replica had at
	// least Workers fewer scans (a service time less to wait);
	// AwayNoGain: away while home had no more scans than the chosen one.
	Home       float64 `json:"home"`
	HomeLonger float64 `json:"home_longer_by_workers"`
	Away       float64 `json:"away"`
	AwayNoGain float64 `json:"away_no_gain"`
	// Classes: the counted requests by their replicas' state on arrival.
	Classes []DiagClass `json:"classes"`
	// Tail: the slowest counted requests, those at or above the run's p99
	// and at or above its p99.9: what they were and where their time went.
	Tail []DiagTail `json:"tail"`
}

// DiagTail describes the counted requests at or above one latency
// quantile of the run. Latency is the wait before the answering attempt
// was sent (earlier attempts: busy answers, timeouts; or the hedge
// delay), the network, the answering attempt's wait in its server's
// queue and its service time; Before, Queue and Service are their means.
type DiagTail struct {
	Quantile float64 `json:"quantile"`
	FromMs   float64 `json:"from_ms"`
	Requests int     `json:"requests"`
	// Trapped, Tight: shares of the tail in those classes (Classes).
	Trapped float64 `json:"trapped"`
	Tight   float64 `json:"tight"`
	// First, Retry, Hedge: shares answered by the first attempt, by a
	// later attempt sent after earlier ones failed (busy, timeout), and
	// by a hedge.
	First float64 `json:"first"`
	Retry float64 `json:"retry"`
	Hedge float64 `json:"hedge"`
	// Attempts: the mean number of the answering attempt.
	Attempts  float64 `json:"attempts"`
	BeforeMs  float64 `json:"before_ms"`
	QueueMs   float64 `json:"queue_ms"`
	ServiceMs float64 `json:"service_ms"`
	// Excess, Picked, ViewPicked: the first decision's scans at the
	// chosen replica over the replica with fewest, at the chosen one,
	// and the chosen one's load in the view (Diag's fields, for these
	// requests).
	Excess     float64 `json:"excess_scans"`
	Picked     float64 `json:"picked_scans"`
	ViewPicked float64 `json:"view_picked_scans"`
}

// DiagClass is the latency of one class of requests.
type DiagClass struct {
	// Class: "slow=k" (k replicas below the average service rate),
	// "trapped" (every replica in a run of consecutive slow servers
	// whose capacity is below the load of the keys that live only on
	// that run: its queues grow whatever a policy chooses), "tight" (the
	// same at 80–100 % of the capacity), "free" (neither), "hot" (the
	// key's replica set draws at least twice the average set's load).
	Class string  `json:"class"`
	Share float64 `json:"share"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
}

// diag collects a Diag during a run.
type diag struct {
	s *sim
	d Diag
	// sums of the per-decision quantities Diag reports as means.
	notShortest, excess, picked, shortest, viewNot, bias, abserr, age, old int64
	home, homeLonger, away, awayNoGain                                     int64
	candidates                                                             int64
	// reported[c*Servers+i]: when coordinator c last had a queue report
	// of server i in a ScanStarted (ns; 0: never).
	reported []int64
	// setLoad: each replica set's share of the arrivals.
	setLoad []float64
	// req: each request's record, by id.
	req []diagReq
	lat map[string][]time.Duration
}

// diagReq is what the diagnosis keeps of one request.
type diagReq struct {
	// class: bit 0–3 slow replicas, bits 4–5 trapped (1) or tight (2),
	// bit 6 hot.
	class uint8
	// decided: the first decision was recorded (excess, picked, view).
	decided               bool
	excess, picked, viewP int32
	// Of a counted answered request (lat > 0): its latency, and the
	// answering attempt's number, hedge flag, send time after arrival,
	// queue wait and service time (ns).
	lat                    int64
	n                      uint32
	hedge                  bool
	before, queue, service int64
}

func newDiag(s *sim) *diag {
	g := &diag{s: s, reported: make([]int64, len(s.clients)*s.cfg.Servers), lat: map[string][]time.Duration{}}
	n := s.cfg.Servers
	g.setLoad = make([]float64, n)
	if s.keyCDF == nil {
		for key := range s.cfg.Keys {
			g.setLoad[key%n] += 1 / float64(s.cfg.Keys)
		}
		return g
	}
	// keyPerm: popularity rank → key.
	prev := 0.0
	for r, c := range s.keyCDF {
		g.setLoad[s.keyPerm[r]%int32(n)] += c - prev
		prev = c
	}
	return g
}

// report: coordinator c learnt server i's queue from a ScanStarted.
func (g *diag) report(c *client, i int32) {
	g.reported[c.idx*g.s.cfg.Servers+int(i)] = g.s.now
}

// rate is server i's service rate in units of μ.
func (g *diag) rate(i int32) float64 {
	sv := g.s.servers[i]
	r := 1 / sv.slow
	if sv.fast {
		r *= g.s.cfg.RateFactor
	}
	return r
}

// classify is request r's class on arrival.
func (g *diag) classify(r *request) uint8 {
	s := g.s
	if s.cfg.Replication == 0 {
		return 0
	}
	n := int32(s.cfg.Servers)
	avg := 1.0
	if s.cfg.RateSwitch > 0 {
		avg = (1 + s.cfg.RateFactor) / 2
	}
	// ring is the server at position i of the ring, i may be out of
	// [0, n).
	ring := func(i int32) int32 { return (i%n + n) % n }
	slow := func(i int32) bool { return g.rate(ring(i)) < avg }
	R := int32(s.cfg.Replication)
	k := uint8(0)
	for j := range R {
		if slow(r.set + j) {
			k++
		}
	}
	cl := min(k, 15)
	if g.setLoad[r.set]*float64(n) >= 2 {
		cl |= 1 << 6
	}
	if k < uint8(R) || R >= n {
		return cl
	}
	// The run of consecutive slow servers holding the set: [a, b], the
	// whole ring when every server is slow.
	a, b := r.set, r.set+R-1
	for b-a+1 < n && slow(a-1) {
		a--
	}
	for b-a+1 < n && slow(b+1) {
		b++
	}
	sets := b - a + 1 - (R - 1)
	if b-a+1 == n {
		sets = n
	}
	capacity, load := 0.0, 0.0
	for i := a; i <= b; i++ {
		capacity += g.rate(ring(i))
	}
	for j := a; j < a+sets; j++ {
		load += g.setLoad[ring(j)]
	}
	// Capacity in scans per mean service time at μ, load in the same.
	capacity *= float64(s.cfg.Workers)
	load *= s.cfg.Utilization * s.cfg.Capacity() * s.cfg.ServiceMean.Seconds()
	switch {
	case load >= capacity:
		cl |= 1 << 4
	case load >= 0.8*capacity:
		cl |= 2 << 4
	}
	return cl
}

// pick: the policy chose d (or failed with err) for request r on in.
func (g *diag) pick(r *request, in *selection.Input, d selection.Decision, err error) {
	s := g.s
	first := len(in.Attempts) == 0 && !in.Hedge
	if first {
		for len(g.req) <= r.id {
			g.req = append(g.req, diagReq{})
		}
		g.req[r.id].class = g.classify(r)
	}
	if !first || !r.measured || err != nil {
		return
	}
	chosen, ok := s.ids[d.Server]
	if !ok {
		return
	}
	actual := func(i int32) int64 { sv := s.servers[i]; return int64(len(sv.running) + sv.queued) }
	minA, minV := int64(math.MaxInt64), int64(math.MaxInt64)
	var pickedV int64
	for _, l := range in.View.Servers {
		if !l.Alive {
			continue
		}
		i := s.ids[l.ID]
		a, v := actual(i), int64(max(l.InFlight, l.Active+l.QueueLen, 0))
		minA, minV = min(minA, a), min(minV, v)
		g.bias += v - a
		g.abserr += max(v-a, a-v)
		g.candidates++
		if i == chosen {
			pickedV = v
			info := max(r.cl.srv[i].heardAt, g.reported[r.cl.idx*s.cfg.Servers+int(i)])
			g.age += s.now - info
			if s.now-info > int64(100*time.Millisecond) {
				g.old++
			}
		}
	}
	if minA == math.MaxInt64 {
		return
	}
	g.d.Decisions++
	pa := actual(chosen)
	if pa > minA {
		g.notShortest++
	}
	if pickedV > minV {
		g.viewNot++
	}
	g.excess += pa - minA
	g.picked += pa
	g.shortest += minA
	rec := &g.req[r.id]
	rec.decided, rec.excess, rec.picked, rec.viewP = true, int32(pa-minA), int32(pa), int32(pickedV)
	switch d.Placement {
	case selection.PlacementHome:
		g.home++
		if pa-minA >= int64(s.cfg.Workers) {
			g.homeLonger++
		}
	case selection.PlacementAway:
		g.away++
		home := selection.HomeHost(in.Tablet, in.View, selection.DefaultGroup)
		for _, l := range in.View.Servers {
			if i := s.ids[l.ID]; l.Alive && i != chosen && l.Host == home && actual(i) <= pa {
				g.awayNoGain++
				break
			}
		}
	}
}

// latency: counted request r got its first data after d, from attempt
// a, whose answer took one-way latency ow to arrive.
func (g *diag) latency(r *request, a *attempt, d time.Duration, ow int64) {
	var cl uint8
	if r.id < len(g.req) {
		rec := &g.req[r.id]
		cl = rec.class
		rec.lat, rec.n, rec.hedge = int64(d), a.n, a.hedge
		rec.before = a.arrived - ow - r.arrival
		rec.queue = a.began - a.arrived
		rec.service = g.s.now - ow - a.began
	}
	k := "slow=" + strconv.Itoa(int(cl&15))
	g.lat[k] = append(g.lat[k], d)
	switch cl >> 4 & 3 {
	case 1:
		g.lat["trapped"] = append(g.lat["trapped"], d)
	case 2:
		g.lat["tight"] = append(g.lat["tight"], d)
	default:
		g.lat["free"] = append(g.lat["free"], d)
	}
	if cl&(1<<6) != 0 {
		g.lat["hot"] = append(g.lat["hot"], d)
	}
}

// result is the Diag of the run.
func (g *diag) result() *Diag {
	d := g.d
	n := float64(max(1, d.Decisions))
	nc := float64(max(1, g.candidates))
	d.NotShortest, d.Excess = float64(g.notShortest)/n, float64(g.excess)/n
	d.Picked, d.Shortest = float64(g.picked)/n, float64(g.shortest)/n
	d.ViewNotShortest = float64(g.viewNot) / n
	d.ViewBias, d.ViewError = float64(g.bias)/nc, float64(g.abserr)/nc
	d.InfoAge, d.InfoOld = float64(g.age)/n/1e6, float64(g.old)/n
	d.Home, d.HomeLonger = float64(g.home)/n, float64(g.homeLonger)/n
	d.Away, d.AwayNoGain = float64(g.away)/n, float64(g.awayNoGain)/n
	total := 0
	for k, v := range g.lat {
		if k[0] == 's' {
			total += len(v)
		}
	}
	names := make([]string, 0, len(g.lat))
	for k := range g.lat {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		v := g.lat[k]
		slices.Sort(v)
		q := func(p float64) float64 {
			i := int(math.Ceil(p*float64(len(v)))) - 1
			return ms(v[min(max(i, 0), len(v)-1)])
		}
		d.Classes = append(d.Classes, DiagClass{Class: k, Share: float64(len(v)) / float64(max(1, total)), P99: q(0.99), P999: q(0.999)})
	}
	for _, q := range []float64{0.99, 0.999} {
		d.Tail = append(d.Tail, g.tail(q))
	}
	return &d
}

// tail is the DiagTail of the counted requests at or above the run's q
// quantile (nearest rank, as Result.Quantile).
func (g *diag) tail(q float64) DiagTail {
	lats := g.s.res.Latencies // sorted by Run before result
	t := DiagTail{Quantile: q}
	if len(lats) == 0 {
		return t
	}
	from := lats[min(max(int(math.Ceil(q*float64(len(lats))))-1, 0), len(lats)-1)]
	t.FromMs = ms(from)
	var decided int
	for i := range g.req {
		rec := &g.req[i]
		if rec.lat <= 0 || rec.lat < int64(from) {
			continue
		}
		t.Requests++
		switch rec.class >> 4 & 3 {
		case 1:
			t.Trapped++
		case 2:
			t.Tight++
		}
		switch {
		case rec.hedge:
			t.Hedge++
		case rec.n > 1:
			t.Retry++
		default:
			t.First++
		}
		t.Attempts += float64(rec.n)
		t.BeforeMs += float64(rec.before)
		t.QueueMs += float64(rec.queue)
		t.ServiceMs += float64(rec.service)
		if rec.decided {
			decided++
			t.Excess += float64(rec.excess)
			t.Picked += float64(rec.picked)
			t.ViewPicked += float64(rec.viewP)
		}
	}
	n, nd := float64(max(1, t.Requests)), float64(max(1, decided))
	t.Trapped, t.Tight = t.Trapped/n, t.Tight/n
	t.First, t.Retry, t.Hedge, t.Attempts = t.First/n, t.Retry/n, t.Hedge/n, t.Attempts/n
	t.BeforeMs, t.QueueMs, t.ServiceMs = t.BeforeMs/n/1e6, t.QueueMs/n/1e6, t.ServiceMs/n/1e6
	t.Excess, t.Picked, t.ViewPicked = t.Excess/nd, t.Picked/nd, t.ViewPicked/nd
	return t
}
