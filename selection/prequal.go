package selection

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// prequalPolicy is "prequal": Prequal's probe pool and hot-cold
// lexicographic rule (Wydrowski, Kleinberg, Rumble, Archer, "Load is not
// what you should balance: Introducing Prequal", NSDI'24);
// docs/policies.md (prequal).
//
//   - Probes: after each decision the caller (the tablet actor) asks
//     ProbeTargets for probesPerQuery (r_probe, 3) distinct random live
//     servers of the group and probes them asynchronously; it does not wait.
//     Each server answers with its requests in flight (RIF) and a latency
//     estimate for that RIF, and AddProbe pools the answer when it arrives.
//   - The pool holds at most probePoolSize (16) answers, the newest per
//     server; an answer older than probeMaxAge (1 s) is ignored and
//     dropped. Each query removes probeRemovesPerQuery (r_remove, 1)
//     answers, alternating the oldest and the worst (the hottest when any
//     is hot, else the slowest).
//   - Reuse: an answer may route b_reuse queries,
//     b_reuse = 1 + δ/((1 − m/n)·r_probe − r_remove), δ = 1, m the pool
//     capacity, n the live servers of the group, randomly rounded, at most
//     prequalMaxReuse (16, also used when the denominator is ≤ 0: probes
//     cannot keep up with removals). Each use adds one to the answer's RIF.
//   - Hot-cold lexicographic (HCL) rule: an answer is hot when its RIF
//     exceeds the rifQuantile (Q_RIF, 0.84) quantile of the last
//     prequalRIFHistory (64) RIFs received; the cold answer with the lowest
//     latency wins (ties: lower RIF, then pool order); when all are hot,
//     the lowest RIF (ties: lower latency).
//   - Only answers of live servers of the group that this scan has not
//     tried (no failed or in-flight attempt) are candidates. With none
//     (empty pool), the server is uniformly random among the servers this
//     scan has not tried (the paper's fallback: random).
//   - No hedging (Prequal has none); plan index, busy timeouts and error
//     delays as every plan-less policy (docs/policies.md, shared rules).
//
// The pool is per policy, that is per profile of one coordinator (a
// Prequal client), shared by the tablet actors under a mutex; time comes
// from Input.Now and ProbeReply.At, randomness from the callers' sources.
// An explained decision (Input.Explain) reads the pool without changing it.
// The structure follows prequal-rs (prequal-core pool.rs, balancer.rs,
// history.rs), whose tests prequal_test.go ports.
type prequalPolicy struct {
	p    *Profile
	pool *probePool
}

// Prober is implemented by policies that route by probes (prequal). After
// a decision the caller probes the servers ProbeTargets names and feeds the
// answers to AddProbe as they arrive; it never waits for them.
type Prober interface {
	// ProbeTargets returns the servers to probe for one query (distinct,
	// live, of the profile's group; possibly none). It reads in.View,
	// in.Profile and in.Rand only.
	ProbeTargets(in *Input) []ServerID
	// AddProbe pools one answer; rnd rounds the reuse budget (nil: round
	// down). Answers with a negative RIF or without a time are ignored.
	AddProbe(r ProbeReply, rnd *rand.Rand)
}

// ProbeReply is a scan server's answer to a probe.
type ProbeReply struct {
	Server ServerID
	// RIF: the scans in flight at the server (running and queued) when it
	// answered.
	RIF int
	// Latency: the server's estimate of a scan's latency at that RIF (0 =
	// no estimate yet).
	Latency time.Duration
	// At: when the answer arrived.
	At time.Time
}

// Prequal constants (prequal-rs Config defaults where the paper gives none).
const (
	// prequalMaxReuse caps b_reuse (prequal-rs max_reuse).
	prequalMaxReuse = 16
	// prequalRIFHistory is how many recent RIFs the hot threshold is taken
	// over (prequal-rs rif_history).
	prequalRIFHistory = 64
	// prequalReuseDelta is δ in b_reuse (the paper's δ = 1).
	prequalReuseDelta = 1.0
	// Defaults for zero options of a hand-built profile.
	defaultProbePoolSize = 16
	defaultProbeMaxAge   = time.Second
)

func newPrequalPolicy(p *Profile) prequalPolicy {
	return prequalPolicy{p: p, pool: newProbePool(p.Options)}
}

// probeEntry is one pooled answer.
type probeEntry struct {
	server   ServerID
	at       time.Time
	rif      int
	latency  time.Duration
	usesLeft int
}

// probePool is Prequal's per-client probe pool (prequal-rs pool.rs with
// balancer.rs's bookkeeping). All methods take p.mu except where noted.
type probePool struct {
	mu sync.Mutex

	capacity        int
	maxAge          time.Duration
	quantile        float64
	probesPerQuery  float64
	removesPerQuery float64

	entries []probeEntry
	hist    rifHistory
	// Fractional rates are spread over queries (prequal-rs FracCounter).
	probeAcc, removeAcc float64
	removeOldestNext    bool
	// servers: live servers of the group at the last query (n of b_reuse;
	// 0 before the first query).
	servers int
}

func newProbePool(o Options) *probePool {
	p := &probePool{capacity: o.ProbePoolSize, maxAge: o.ProbeMaxAge, quantile: o.RIFQuantile,
		probesPerQuery: o.ProbesPerQuery, removesPerQuery: o.ProbeRemovesPerQuery, removeOldestNext: true}
	if p.capacity <= 0 {
		p.capacity = defaultProbePoolSize
	}
	if p.maxAge <= 0 {
		p.maxAge = defaultProbeMaxAge
	}
	p.quantile = min(max(p.quantile, 0), 1)
	p.probesPerQuery = max(p.probesPerQuery, 0)
	p.removesPerQuery = max(p.removesPerQuery, 0)
	return p
}

// take is prequal-rs FracCounter.take: whole units of acc + rate.
func take(acc *float64, rate float64) int {
	*acc += rate
	w := math.Floor(*acc)
	*acc -= w
	return int(w)
}

// rifHistory is a window of recent RIFs kept sorted too, so a quantile is
// one look-up (prequal-rs history.rs).
type rifHistory struct {
	recent []int // ring, oldest at next when full
	next   int
	sorted []int
}

func (h *rifHistory) push(rif int) {
	if len(h.recent) == prequalRIFHistory {
		old := h.recent[h.next]
		i, _ := slices.BinarySearch(h.sorted, old)
		h.sorted = slices.Delete(h.sorted, i, i+1)
		h.recent[h.next] = rif
		h.next = (h.next + 1) % prequalRIFHistory
	} else {
		h.recent = append(h.recent, rif)
	}
	i, _ := slices.BinarySearch(h.sorted, rif+1) // after equal values
	h.sorted = slices.Insert(h.sorted, i, rif)
}

// threshold is the q quantile of the window, sorted[floor((len−1)·q)];
// false while the window is empty (nothing is hot).
func (h *rifHistory) threshold(q float64) (int, bool) {
	if len(h.sorted) == 0 {
		return 0, false
	}
	return h.sorted[int(math.Floor(float64(len(h.sorted)-1)*q))], true
}

// add pools r (caller holds mu): the newest answer per server, the oldest
// evicted beyond capacity.
func (p *probePool) add(r ProbeReply, rnd *rand.Rand) {
	if r.RIF < 0 || r.At.IsZero() || r.Server == "" {
		return
	}
	lat := max(r.Latency, 0)
	p.hist.push(r.RIF)
	p.entries = slices.DeleteFunc(p.entries, func(e probeEntry) bool { return e.server == r.Server })
	p.entries = append(p.entries, probeEntry{server: r.Server, at: r.At, rif: r.RIF, latency: lat, usesLeft: p.reuseBudget(rnd)})
	if len(p.entries) > p.capacity {
		p.removeOldest()
	}
}

// reuseBudget is b_reuse = 1 + δ/((1 − m/n)·r_probe − r_remove), randomly
// rounded (prequal-rs reuse_budget), in [1, prequalMaxReuse].
func (p *probePool) reuseBudget(rnd *rand.Rand) int {
	b := float64(prequalMaxReuse)
	if p.servers > 0 {
		fill := float64(p.capacity) / float64(p.servers)
		if d := (1-fill)*p.probesPerQuery - p.removesPerQuery; d > 0 {
			b = min(max(1+prequalReuseDelta/d, 1), prequalMaxReuse)
		}
	}
	w := math.Floor(b)
	n := int(w)
	if rnd != nil && rnd.Float64() < b-w {
		n++
	}
	return max(n, 1)
}

// expire drops answers older than maxAge at now.
func (p *probePool) expire(now time.Time) {
	p.entries = slices.DeleteFunc(p.entries, func(e probeEntry) bool { return now.Sub(e.at) > p.maxAge })
}

func (p *probePool) hot(e *probeEntry, thr int, ok bool) bool { return ok && e.rif > thr }

// hclLess orders answers by the HCL rule: cold before hot; cold by
// (latency, RIF), hot by (RIF, latency).
func (p *probePool) hclLess(a, b *probeEntry, thr int, ok bool) bool {
	ha, hb := p.hot(a, thr, ok), p.hot(b, thr, ok)
	if ha != hb {
		return !ha
	}
	if !ha {
		if a.latency != b.latency {
			return a.latency < b.latency
		}
		return a.rif < b.rif
	}
	if a.rif != b.rif {
		return a.rif < b.rif
	}
	return a.latency < b.latency
}

// best returns the index of the HCL winner among the entries eligible
// says yes to, or −1.
func (p *probePool) best(now time.Time, thr int, ok bool, eligible func(*probeEntry) bool) int {
	k := -1
	for i := range p.entries {
		e := &p.entries[i]
		if now.Sub(e.at) > p.maxAge || !eligible(e) {
			continue
		}
		if k < 0 || p.hclLess(e, &p.entries[k], thr, ok) {
			k = i
		}
	}
	return k
}

// consume uses entry i once: RIF + 1, one use fewer, gone when none left.
func (p *probePool) consume(i int) {
	e := &p.entries[i]
	e.rif++
	e.usesLeft--
	if e.usesLeft <= 0 {
		p.entries = slices.Delete(p.entries, i, i+1)
	}
}

func (p *probePool) removeOldest() {
	k := -1
	for i := range p.entries {
		if k < 0 || p.entries[i].at.Before(p.entries[k].at) {
			k = i
		}
	}
	if k >= 0 {
		p.entries = slices.Delete(p.entries, k, k+1)
	}
}

// removeWorst drops the hot answer with the highest RIF, or when none is
// hot the one with the highest latency (prequal-rs remove_worst).
func (p *probePool) removeWorst(thr int, ok bool) {
	k := -1
	for i := range p.entries {
		e := &p.entries[i]
		if p.hot(e, thr, ok) && (k < 0 || e.rif > p.entries[k].rif) {
			k = i
		}
	}
	if k < 0 {
		for i := range p.entries {
			if k < 0 || p.entries[i].latency > p.entries[k].latency {
				k = i
			}
		}
	}
	if k >= 0 {
		p.entries = slices.Delete(p.entries, k, k+1)
	}
}

// removeForQuery is the per-query removal: r_remove answers, alternating
// oldest and worst.
func (p *probePool) removeForQuery(thr int, ok bool) {
	for n := take(&p.removeAcc, p.removesPerQuery); n > 0; n-- {
		if p.removeOldestNext {
			p.removeOldest()
		} else {
			p.removeWorst(thr, ok)
		}
		p.removeOldestNext = !p.removeOldestNext
	}
}

func (pol prequalPolicy) Select(in *Input) (Decision, error) {
	var c call
	if err := c.beginFirst(in, pol.p); err != nil {
		return Decision{}, err
	}
	p := pol.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	thr, ok := p.hist.threshold(p.quantile)
	idxOf := func(e *probeEntry) (int32, bool) {
		i, found := c.g.index(e.server)
		return i, found && c.fresh(i)
	}
	eligible := func(e *probeEntry) bool { _, ok := idxOf(e); return ok }
	if in.Explain {
		return pol.explain(&c, thr, ok, eligible, idxOf)
	}
	p.servers = len(c.g.alive)
	p.expire(c.now)
	choice := int32(-1)
	if k := p.best(c.now, thr, ok, eligible); k >= 0 {
		choice, _ = idxOf(&p.entries[k])
		p.consume(k)
	}
	p.removeForQuery(thr, ok)
	if choice < 0 {
		choice, c.st.idx2 = c.pickFresh(c.all(), c.st.idx2)
	}
	return c.decisionA5(choice), nil
}

// explain is Select without changing the pool: Candidates are the
// eligible answers in HCL order (Scores: latency in ms for a cold answer,
// 1e9 + RIF for a hot one), or the random fallback's choice.
func (pol prequalPolicy) explain(c *call, thr int, ok bool, eligible func(*probeEntry) bool, idxOf func(*probeEntry) (int32, bool)) (Decision, error) {
	p := pol.pool
	var es []*probeEntry
	for i := range p.entries {
		e := &p.entries[i]
		if c.now.Sub(e.at) <= p.maxAge && eligible(e) {
			es = append(es, e)
		}
	}
	slices.SortStableFunc(es, func(a, b *probeEntry) int {
		switch {
		case p.hclLess(a, b, thr, ok):
			return -1
		case p.hclLess(b, a, thr, ok):
			return 1
		}
		return 0
	})
	if len(es) == 0 {
		i, _ := c.pickFresh(c.all(), nil)
		d := c.decisionA5(i)
		d.Candidates = c.explain([]int32{i})
		return d, nil
	}
	idx := make([]int32, len(es))
	scores := make([]float64, len(es))
	for k, e := range es {
		idx[k], _ = idxOf(e)
		if p.hot(e, thr, ok) {
			scores[k] = 1e9 + float64(e.rif)
		} else {
			scores[k] = float64(e.latency) / 1e6
		}
	}
	d := c.decisionA5(idx[0])
	d.Candidates, d.Scores = c.explain(idx), scores
	return d, nil
}

// ProbeTargets implements Prober: probesPerQuery distinct random live
// servers of the group (fractional rates spread over queries), at most all
// of them.
func (pol prequalPolicy) ProbeTargets(in *Input) []ServerID {
	prof := in.Profile
	if prof == nil {
		prof = pol.p
	}
	if prof == nil || in.View == nil {
		return nil
	}
	g := in.View.group(prof.Group)
	n := len(g.alive)
	p := pol.pool
	p.mu.Lock()
	k := min(take(&p.probeAcc, p.probesPerQuery), n)
	p.mu.Unlock()
	if k <= 0 {
		return nil
	}
	rnd := in.Rand
	if rnd == nil {
		rnd = rand.New(rand.NewPCG(uint64(in.Now.UnixNano()), 3))
	}
	out := make([]ServerID, 0, k)
	if k*4 <= n {
		// Few of many: draw until k distinct.
		for len(out) < k {
			id := g.alive[rnd.IntN(n)].ID
			if !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
		return out
	}
	for _, i := range rnd.Perm(n)[:k] {
		out = append(out, g.alive[i].ID)
	}
	return out
}

// AddProbe implements Prober.
func (pol prequalPolicy) AddProbe(r ProbeReply, rnd *rand.Rand) {
	pol.pool.mu.Lock()
	pol.pool.add(r, rnd)
	pol.pool.mu.Unlock()
}
