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
	// class of each request by id: bit 0–3 slow replicas, bits 4–5
	// trapped (1) or tight (2), bit 6 hot.
	class []uint8
	lat   map[string][]time.Duration
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
		for len(g.class) <= r.id {
			g.class = append(g.class, 0)
		}
		g.class[r.id] = g.classify(r)
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

// latency: counted request r got its first data after d.
func (g *diag) latency(r *request, d time.Duration) {
	var cl uint8
	if r.id < len(g.class) {
		cl = g.class[r.id]
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
	return &d
}
