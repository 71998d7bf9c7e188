package selection

import (
	"math"
	"sync"
	"time"
)

// peakEWMAPolicy is "peak-ewma": power of two choices over peak-EWMA
// latency × (pending + 1), as Finagle's P2CPeakEwma balancer does it (and
// Linkerd and tower after it); docs/policies.md (peak-ewma).
//
//   - Candidates: every live server of the group (Finagle balances over all
//     endpoints, with no tablet affinity), preferring those this scan has
//     not tried (preferFresh).
//   - Two distinct candidates are drawn uniformly at random (Finagle's
//     P2CPick: b drawn from n−1 and shifted past a); the one with the lower
//     load is taken, a on ties.
//   - load = cost × (pending + 1), pending = ServerLoad.InFlight (this
//     coordinator's scans there, Finagle's per-client pending); a server
//     without latency history (cost 0) with pending > 0 loads
//     Penalty + pending (Finagle: a new node is probed at most once).
//   - cost is Finagle's peak-sensitive EWMA of the server's round-trip
//     time (peakEWMA): a sample above it replaces it at once, a lower one
//     is blended with weight 1 − exp(−Δt/τ), τ = decayTime; every read
//     decays it toward 0 as Finagle's Metric.get does.
//   - Samples come from the load view (the coordinator measures; the
//     policy is a pure function of its inputs plus this estimator table):
//     a new value of ServerLoad.StartLatency (the coordinator's
//     dispatch → first data average) is one sample at StartLatencyAt, and
//     a new LastFailure is one sample equal to the first plan's busy
//     timeout (a failure counts as a round trip as long as the timeout).
//     The view's StartLatency is itself an average (¼ weight on the new
//     sample), so one slow scan raises the cost by a quarter of its excess
//     rather than all of it: a documented deviation (docs/policies.md).
//   - No hedging (Finagle's balancer has none); busy timeouts and error
//     delays follow the attempt plans like the other plan-less policies.
//
// The estimator table is shared by every tablet that uses the profile
// (Finagle keeps one per client) and guarded by a mutex; time comes only
// from Input.Now.
type peakEWMAPolicy struct {
	p *Profile
	t *peakTable
}

func newPeakEWMAPolicy(p *Profile) peakEWMAPolicy {
	return peakEWMAPolicy{p: p, t: &peakTable{m: map[ServerID]*peakServer{}}}
}

// Default decay time (Finagle's Balancers.p2cPeakEwma decayTime = 10.seconds).
const defaultDecayTime = 10 * time.Second

// peakPenalty is Finagle's PeakEwma Penalty, Long.MaxValue >> 16 (ns).
const peakPenalty = float64(math.MaxInt64 >> 16)

// peakEWMA is Finagle's PeakEwma Metric (finagle-core
// loadbalancer/PeakEwma.scala with util/Ema.scala), time in ns. tower's
// load/peak_ewma.rs RttEstimate is the same estimator started at a
// default RTT instead of "no observation" (newPeakEWMA with rtt > 0).
type peakEWMA struct {
	stamp int64   // last timestamp observed (monotone)
	has   bool    // the Ema holds an observation (Finagle: time != MinValue)
	at    int64   // the Ema's time
	cost  float64 // the Ema: peak-sensitive average RTT, ns
}

// newPeakEWMA returns a metric created at t: Finagle's (no history) when
// defaultRTT is 0, tower's RttEstimate::new(defaultRTT) otherwise.
func newPeakEWMA(t int64, defaultRTT float64) peakEWMA {
	m := peakEWMA{stamp: t}
	if defaultRTT > 0 {
		m.has, m.at, m.cost = true, t, defaultRTT
	}
	return m
}

// observe is Metric.observe(rtt) at time t: monotone stamp, a peak resets
// the Ema to the sample, else Ema.update(stamp, rtt) with window tau.
func (m *peakEWMA) observe(t int64, rtt, tau float64) {
	if t-m.stamp > 0 {
		m.stamp = t
	}
	if rtt > m.cost {
		m.has, m.cost = false, 0 // Ema.reset
	}
	if !m.has {
		m.has, m.at, m.cost = true, m.stamp, rtt
		return
	}
	td := m.stamp - m.at
	m.at = m.stamp
	w := 0.0
	if tau != 0 {
		w = math.Exp(-float64(td) / tau)
	}
	// Explicit conversions: no fused multiply-add, so the result is the
	// same IEEE value as Finagle's and tower's.
	m.cost = float64(rtt*(1-w)) + float64(m.cost*w)
}

// load is Metric.get at t: decay to t (observe(0)), then
// Penalty + pending without history, else cost × (pending + 1).
func (m *peakEWMA) load(t int64, pending int, tau float64) float64 {
	m.observe(t, 0, tau)
	if m.cost == 0 && pending != 0 {
		return peakPenalty + float64(pending)
	}
	return m.cost * float64(pending+1)
}

// peakTable holds one estimator per server, keyed by ID; a new
// incarnation starts afresh.
type peakTable struct {
	mu sync.Mutex
	m  map[ServerID]*peakServer
}

type peakServer struct {
	inc string
	est peakEWMA
	// The last view sample and failure ingested.
	sampleAt time.Time
	sample   time.Duration
	failAt   time.Time
}

func (pol peakEWMAPolicy) Select(in *Input) (Decision, error) {
	var c call
	if err := c.beginFirst(in, pol.p); err != nil {
		return Decision{}, err
	}
	o := &c.p.Options
	tau := float64(o.DecayTime)
	if tau <= 0 {
		tau = float64(defaultDecayTime)
	}
	failRTT := time.Second
	if pl := c.plans(); pl[0].BusyTimeout > 0 {
		failRTT = pl[0].BusyTimeout
	}
	cands := c.preferFresh(c.all(), c.st.idx2)
	c.st.idx2 = cands
	n := len(cands)
	a, b := cands[c.rnd.IntN(n)], int32(-1)
	if n > 1 {
		ia := 0
		for k, i := range cands {
			if i == a {
				ia = k
				break
			}
		}
		ib := c.rnd.IntN(n - 1)
		if ib >= ia {
			ib++
		}
		b = cands[ib]
	}
	var la, lb float64
	pol.t.mu.Lock()
	la = pol.t.load(&c, a, tau, o.DefaultRTT, failRTT)
	if b >= 0 {
		lb = pol.t.load(&c, b, tau, o.DefaultRTT, failRTT)
	}
	pol.t.prune(c.v)
	pol.t.mu.Unlock()
	choice := a
	if b >= 0 && lb < la {
		choice = b
	}
	d := c.decisionA5(choice)
	if in.Explain {
		if b >= 0 {
			d.Candidates = c.explain([]int32{a, b})
			d.Scores = []float64{la / 1e6, lb / 1e6}
		} else {
			d.Candidates = c.explain([]int32{a})
			d.Scores = []float64{la / 1e6}
		}
	}
	return d, nil
}

// load ingests server i's new samples from the view and returns its load
// at c.now. The caller holds t.mu.
func (t *peakTable) load(c *call, i int32, tau float64, defaultRTT, failRTT time.Duration) float64 {
	s := c.g.alive[i]
	now := c.now.UnixNano()
	e := t.m[s.ID]
	if e == nil || e.inc != s.Incarnation {
		// Start at the oldest event still to ingest, so that history the
		// view already holds is applied at its own time and decays to now.
		start := now
		if at := s.StartLatencyAt; s.StartLatency > 0 && !at.IsZero() && at.UnixNano() < start {
			start = at.UnixNano()
		}
		if f := s.LastFailure; !f.IsZero() && f.UnixNano() < start && float64(c.now.Sub(f)) < 5*tau {
			start = f.UnixNano()
		}
		e = &peakServer{inc: s.Incarnation, est: newPeakEWMA(start, float64(defaultRTT))}
		if f := s.LastFailure; !f.IsZero() && float64(c.now.Sub(f)) >= 5*tau {
			e.failAt = f // too old to matter: exp(−5) of a peak
		}
		t.m[s.ID] = e
	}
	type ev struct {
		at  int64
		rtt float64
	}
	var evs [2]ev
	k := 0
	// A sample is new when it was taken after the last one ingested (a
	// concurrent caller may hold an older view: its sample is not new), or,
	// without a time, when its value changed.
	newer := s.StartLatencyAt.After(e.sampleAt) || (s.StartLatencyAt.IsZero() && s.StartLatency != e.sample)
	if s.StartLatency > 0 && newer {
		at := now
		if !s.StartLatencyAt.IsZero() {
			at = s.StartLatencyAt.UnixNano()
		}
		evs[k] = ev{at, float64(s.StartLatency)}
		k++
		e.sampleAt, e.sample = s.StartLatencyAt, s.StartLatency
	}
	if f := s.LastFailure; !f.IsZero() && f.After(e.failAt) {
		evs[k] = ev{f.UnixNano(), float64(failRTT)}
		k++
		e.failAt = f
	}
	if k == 2 && evs[1].at < evs[0].at {
		evs[0], evs[1] = evs[1], evs[0]
	}
	for _, x := range evs[:k] {
		e.est.observe(x.at, x.rtt, tau)
	}
	return e.est.load(now, s.InFlight, tau)
}

// prune drops the estimators of servers gone from the view once the table
// holds many more servers than the view. The caller holds t.mu.
func (t *peakTable) prune(v *LoadView) {
	if len(t.m) <= 2*len(v.Servers)+64 {
		return
	}
	for id := range t.m {
		if v.Server(id) == nil {
			delete(t.m, id)
		}
	}
}
