package selection

import (
	"math"
	"slices"
	"time"
)

// adaptivePolicy is scanplane's own policy; the algorithm is documented in
// the package comment (doc.go, "The adaptive policy").
type adaptivePolicy struct{ p *Profile }

// Score weights of the adaptive policy (see doc.go).
const (
	adErrWeight  = 2.0
	adBusyWeight = 1.0
	adErrCap     = 8   // decayed errors counted at most
	adBusyCap    = 2   // decayed busy answers counted at most
	adSlowCap    = 8.0 // cap of the start-latency term
	adSlowFree   = 1.5 // an estimate up to this × the servers' median is free
	adSlowWeight = 3.0 // score per median above that
	adSlowForget = 6 * time.Second
	// adSilenceMemory: a silence that began longer ago than this no longer
	// counts (the heartbeat staleness rule covers a host that stays
	// silent); counting it longer would keep a recovered server shunned,
	// for only a dispatch can end a silence.
	adSilenceMemory = 4 * time.Second
	adZonePenalty   = 8.0
	adStalePenalty  = 8.0
	adTemperature   = 0.5 // softness of the pick among a host's servers
	adCutoff        = 3.0 // a host's servers this much worse get nothing
	adSiblingSlowAt = 2   // sibling hedge needs StartLatency < this × p95
)

// adaptive per-call context.
type adCtx struct {
	o        *Options
	br       breaker
	decay    DecayParams
	p50, p95 time.Duration
	avoidAny bool
	avoid    uint64 // bit z set: zone z avoided (zones ≥ 64 never avoided)
	exclHost int32  // host excluded from scoring (-1)
	// staleBefore: a host whose newest heartbeat is before this is stale
	// (zero when staleHeartbeat is 0: no heartbeat is).
	staleBefore time.Time
	// dead: hosts where an attempt of this scan timed out (no answer at
	// all) or stalled: the host process is likely paused or hung, so its
	// siblings are no better; skipped like exclHost.
	dead []int32
	// slowHost and slowHostIs: the last hostSlow answer of this call (-1:
	// none). A host's servers are scored one after another, and all of
	// them ask whether their host is slow: the answer is computed once per
	// host, not once per server (k decays for k servers, not k²).
	slowHost   int32
	slowHostIs bool
	// spill: score per host rank away from home (Options.SpillCost, or
	// less when the view's BlockTimes show leaving home costs less).
	spill float64
}

// skip reports whether host h is excluded for this call.
func (a *adCtx) skip(h int32) bool {
	return h == a.exclHost || slices.Contains(a.dead, h)
}

func (pol adaptivePolicy) Select(in *Input) (Decision, error) {
	var c call
	if err := c.begin(in, pol.p); err != nil {
		return Decision{}, err
	}
	o := &c.p.Options
	hedgeOn := o.Hedge && o.HedgeBudget > 0
	if in.Hedge {
		if !hedgeOn {
			return Decision{}, ErrNoHedge
		}
		if v := c.v; v.RecentHedges > 0 && float64(v.RecentHedges) >= o.HedgeBudget*float64(v.RecentDispatches) {
			return Decision{}, ErrNoHedge
		}
	}
	a := adCtx{o: o, br: o.breaker(), decay: c.p.Decay(), p50: c.v.StartLatencyP50, p95: c.v.StartLatencyP95, exclHost: -1, dead: c.st.dead[:0],
		slowHost: -1, spill: o.SpillCost}
	if l, ok := c.v.BlockTimes.Spill(); ok {
		a.spill = min(a.spill, l)
	}
	for _, at := range in.Attempts {
		if at.Result == Timeout || at.Result == Stalled {
			if i, ok := c.g.index(at.Server); ok && !slices.Contains(a.dead, c.g.hostOf[i]) {
				a.dead = append(a.dead, c.g.hostOf[i])
			}
		}
	}
	c.st.dead = a.dead
	if o.StaleHeartbeat > 0 {
		a.staleBefore = c.v.At.Add(-o.StaleHeartbeat)
	}
	c.zoneAvoidance(&a)

	top := min(len(c.g.hosts), 1+max(0, o.SpillHosts))
	topHosts := c.st.order(c.g, kindHosts, "", top)[:top]
	rankOf := func(h int32) int {
		for r, t := range topHosts {
			if t == h {
				return r
			}
		}
		return top
	}

	choice := int32(-1)
	if in.Hedge && c.lastFlight >= 0 {
		choice = c.siblingHedge(&a)
		if choice < 0 {
			a.exclHost = c.g.hostOf[c.lastFlight]
		}
	}
	if choice < 0 {
		// Level 0: the home host and the next spillHosts hosts.
		cands := c.st.idx[:0]
		for _, h := range topHosts {
			if a.skip(h) {
				continue
			}
			for _, i := range c.g.hosts[h].servers {
				if c.fresh(i) && !tripped(c.g.alive[i], c.now, a.br) {
					cands = append(cands, i)
				}
			}
		}
		c.st.idx = cands
		if len(cands) > 0 {
			choice = c.coldPick(cands, &a, rankOf)
		}
	}
	if choice < 0 {
		choice = c.adaptiveFallback(&a, rankOf)
	}
	if choice < 0 {
		if in.Hedge {
			return Decision{}, ErrNoHedge
		}
		return Decision{}, ErrNoServer
	}
	d := c.decisionA5(choice)
	d.Placement = PlacementAway
	if rankOf(c.g.hostOf[choice]) == 0 {
		d.Placement = PlacementHome
	}
	if hedgeOn {
		d.HedgeDelay = adaptiveHedgeDelay(o, c.v.StartLatencyP95)
		d.DataTimeout = d.HedgeDelay
	}
	if in.Explain {
		d.Candidates, d.Scores = c.adaptiveExplain(&a, rankOf)
	}
	return d, nil
}

// adaptiveHedgeDelay is clamp(p95, hedgeDelayMin, hedgeDelayMax), or
// hedgeDelayDefault while p95 is unknown.
func adaptiveHedgeDelay(o *Options, p95 time.Duration) time.Duration {
	if p95 <= 0 {
		return o.HedgeDelayDefault
	}
	d := p95
	if o.HedgeDelayMax > 0 && d > o.HedgeDelayMax {
		d = o.HedgeDelayMax
	}
	if d < o.HedgeDelayMin {
		d = o.HedgeDelayMin
	}
	return d
}

// zoneAvoidance marks zones whose unhealthy fraction reaches
// zoneBlackoutPercent, when at least two zones exist and not all would be
// avoided.
func (c *call) zoneAvoidance(a *adCtx) {
	zs := c.g.zones
	if len(zs) < 2 || len(zs) > 64 {
		return
	}
	var avoid uint64
	n := 0
	for z := range zs {
		if zs[z].n > 0 && float64(zs[z].unhealthy)/float64(zs[z].n) >= a.o.ZoneBlackoutPercent {
			avoid |= 1 << uint(z)
			n++
		}
	}
	if n > 0 && n < len(zs) {
		a.avoid, a.avoidAny = avoid, true
	}
}

// score is the adaptive cost of server i at host rank r (lower is better).
func (c *call) score(i int32, r int, a *adCtx) float64 {
	s := c.g.alive[i]
	w := max(1, s.Workers)
	sc := c.adQueue(s)/float64(w) + a.spill*float64(r)
	if lw := a.o.LatencyWeight; lw > 0 && c.v.StartLatencyP50 > 0 {
		// This coordinator's own recent start latencies there: fresher
		// than a queue report when its scans went there since.
		sc += lw * max(0, float64(c.v.StartLatencyOf(s, c.now))/float64(c.v.StartLatencyP50)-1)
	}
	if e := c.v.ErrorsOf(s, a.decay, c.now); e > 0 {
		sc += adErrWeight * float64(min(e, adErrCap))
	}
	if b := c.v.BusyOf(s, a.decay, c.now); b > 0 {
		// Capped low: pending already says how loaded the server is now;
		// this only remembers that it was saturated, and a larger memory
		// outlives the saturation (it cannot fade faster than its decay).
		sc += adBusyWeight * float64(min(b, adBusyCap))
	}
	if t := c.adSlowTerm(i, a); t > 0 {
		sc += t
	}
	if a.avoidAny && a.avoid&(1<<uint(c.g.zoneOf[i])) != 0 {
		sc += adZonePenalty
	}
	if c.hostStale(c.g.hostOf[i], a) {
		sc += adStalePenalty
	}
	return sc
}

// adQueue is the queue adaptive scores server s by: its last reported
// Active + QueueLen plus inFlightWeight × this coordinator's scans in
// flight there (pending(s) when inFlightWeight is 0).
func (c *call) adQueue(s *ServerLoad) float64 {
	k := c.p.Options.InFlightWeight
	if k <= 0 {
		return float64(pending(s))
	}
	return float64(max(0, s.Active+s.QueueLen)) + k*float64(max(0, s.InFlight))
}

// coldPick scores cands and picks in two steps. The host: the one nearest
// home among the servers scoring within homeBand of the best (home wins
// near-ties, so the cache is kept; a scan leaves home only when that saves
// more than spillCost + homeBand). The server on that host: random with
// probability ∝ exp(−(score − host best)/adTemperature), none adCutoff or
// more worse. Siblings near each other share the traffic (no herding on a
// stale view), and one a little worse still gets some, which keeps its
// latency estimate fresh so it can come back; a hard cut-off would starve
// it of the samples that forgive it.
func (c *call) coldPick(cands []int32, a *adCtx, rankOf func(int32) int) int32 {
	scores := c.st.scores[:0]
	best := math.Inf(1)
	for _, i := range cands {
		sc := c.score(i, rankOf(c.g.hostOf[i]), a)
		scores = append(scores, sc)
		best = math.Min(best, sc)
	}
	c.st.scores = scores
	minRank := math.MaxInt
	for k, i := range cands {
		if scores[k] <= best+a.o.HomeBand {
			minRank = min(minRank, rankOf(c.g.hostOf[i]))
		}
	}
	hostBest := math.Inf(1)
	for k, i := range cands {
		if rankOf(c.g.hostOf[i]) == minRank {
			hostBest = math.Min(hostBest, scores[k])
		}
	}
	total := 0.0
	for k, i := range cands {
		w := 0.0
		if d := scores[k] - hostBest; rankOf(c.g.hostOf[i]) == minRank && d < adCutoff {
			w = math.Exp(-d / adTemperature)
		}
		scores[k] = w
		total += w
	}
	x := c.rnd.Float64() * total
	pick := int32(-1)
	for k, w := range scores {
		if w > 0 {
			pick = cands[k]
			if x < w {
				break
			}
			x -= w
		}
	}
	return pick
}

// adaptiveFallback: no usable server on the top hosts. Power of two
// choices over all usable servers (fresh, not tripped, not on the excluded
// host), then a full scan, then the least bad server not in flight (any
// server when not hedging).
func (c *call) adaptiveFallback(a *adCtx, rankOf func(int32) int) int32 {
	n := len(c.g.alive)
	usable := func(i int32) bool {
		return c.fresh(i) && !a.skip(c.g.hostOf[i]) && !tripped(c.g.alive[i], c.now, a.br)
	}
	var got [2]int32
	k := 0
	for try := 0; try < 16 && k < 2; try++ {
		i := int32(c.rnd.IntN(n))
		if usable(i) && (k == 0 || got[0] != i) {
			got[k] = i
			k++
		}
	}
	switch k {
	case 2:
		if c.score(got[1], rankOf(c.g.hostOf[got[1]]), a) < c.score(got[0], rankOf(c.g.hostOf[got[0]]), a) {
			return got[1]
		}
		return got[0]
	case 1:
		return got[0]
	}
	cands := c.st.idx[:0]
	for i := range int32(n) {
		if usable(i) {
			cands = append(cands, i)
		}
	}
	if len(cands) == 0 {
		// Least bad: anything not in flight, tripped, tried or on the
		// excluded host included, penalised by the score.
		for i := range int32(n) {
			if !c.flightAt(i) {
				cands = append(cands, i)
			}
		}
	}
	if len(cands) == 0 && !c.in.Hedge {
		for i := range int32(n) {
			cands = append(cands, i)
		}
	}
	c.st.idx = cands
	if len(cands) == 0 {
		return -1
	}
	best, bs := int32(-1), math.Inf(1)
	for _, i := range cands {
		sc := c.score(i, rankOf(c.g.hostOf[i]), a)
		if c.failedAt(i) {
			sc += 100
		}
		if tripped(c.g.alive[i], c.now, a.br) {
			sc += 1000
		}
		if sc < bs {
			best, bs = i, sc
		}
	}
	return best
}

// adSlowTerm is the score of server i's slowness, at most adSlowCap: the
// larger of (1) how far its latency (adLatency) exceeds the fleet's p95,
// in p95s, and (2) adSlowWeight per median by which its start-latency
// estimate exceeds adSlowFree times the median of the servers' estimates.
// (1) alone misses a whole slow host, whose scans can be enough of the
// fleet's to set the p95; (2) compares estimates with estimates (both
// means over cache hits and misses), not with the median scan, which a
// healthy server's estimate often exceeds.
func (c *call) adSlowTerm(i int32, a *adCtx) float64 {
	t := 0.0
	if a.p95 > 0 {
		t = float64(c.adLatency(i))/float64(a.p95) - 1
	}
	if m := c.g.latMedian; m > 0 {
		forget := StartLatencyForget
		if c.hostSlowOnce(c.g.hostOf[i], a) {
			forget = adSlowForget
		}
		t = max(t, adSlowWeight*(float64(decayedStartLatency(c.g.alive[i], m, c.now, forget))/float64(m)-adSlowFree))
	}
	return min(adSlowCap, t)
}

// hostSlowOnce is hostSlow(h, c.g.latMedian), computed once per run of
// asks about the same host in this call (a.slowHost).
func (c *call) hostSlowOnce(h int32, a *adCtx) bool {
	if h != a.slowHost {
		a.slowHost, a.slowHostIs = h, c.hostSlow(h, c.g.latMedian)
	}
	return a.slowHostIs
}

// hostSlow reports whether every server of host h (at least two) has an
// estimate over adSlowFree × m, decayed with adSlowForget: a slow machine
// (disk, CPU) rather than one server's outlier. Its servers' estimates
// are then forgotten with adSlowForget (6 s) instead of
// StartLatencyForget (2 s): a host left for being slow is sampled only
// when tried again, and every try of a still slow host costs slow scans;
// one server's outlier (a cold start, a pause) is still forgotten with
// StartLatencyForget, or its sibling would carry the host's traffic alone
// for many seconds.
func (c *call) hostSlow(h int32, m time.Duration) bool {
	ss := c.g.hosts[h].servers
	if len(ss) < 2 {
		return false
	}
	for _, i := range ss {
		if float64(decayedStartLatency(c.g.alive[i], m, c.now, adSlowForget)) <= adSlowFree*float64(m) {
			return false
		}
	}
	return true
}

// adLatency is server i's start latency as adaptive sees it: its estimate
// (LoadView.StartLatencyOf) or, when longer, how long it has been silent,
// holding a scan of ours with no answer since (a paused server shows in
// milliseconds, where the estimate learns only when the paused scans
// finally answer). A silence that began more than adSilenceMemory ago is
// not counted. Only the server's own silence counts: a sibling of a
// paused server is not suspect until a scan sent to it goes unanswered too
// (a paused host process shows so within milliseconds), so one paused
// server leaves its host's traffic, and the cache, to its siblings.
func (c *call) adLatency(i int32) time.Duration {
	s := c.g.alive[i]
	lat := c.v.StartLatencyOf(s, c.now)
	since := s.UnansweredSince
	if since.IsZero() || c.now.Sub(since) > adSilenceMemory {
		return lat
	}
	return max(lat, c.now.Sub(since))
}

// silentSince is when host h's silence began: its oldest unanswered
// dispatch (the oldest non-zero UnansweredSince of its servers), when no
// server of the host answered after it (their newest LastAnswer); zero
// when the host is not silent. Computed here, on the rare sibling-hedge
// path, rather than stored per host in every view.
func (g *groupIndex) silentSince(h int32) time.Time {
	var lastAnswer, unansweredSince time.Time
	for _, i := range g.hosts[h].servers {
		s := g.alive[i]
		if s.LastAnswer.After(lastAnswer) {
			lastAnswer = s.LastAnswer
		}
		if u := s.UnansweredSince; !u.IsZero() && (unansweredSince.IsZero() || u.Before(unansweredSince)) {
			unansweredSince = u
		}
	}
	if unansweredSince.IsZero() || !lastAnswer.Before(unansweredSince) {
		return time.Time{}
	}
	return unansweredSince
}

// hostStale: the host's newest heartbeat is older than staleHeartbeat at
// the view's time (a paused or hung host process).
func (c *call) hostStale(h int32, a *adCtx) bool {
	hb := c.g.heartbeat[h]
	return !hb.IsZero() && hb.Before(a.staleBefore)
}

// siblingHedge returns a healthy sibling of the newest in-flight attempt's
// server on the same host, or -1 when the host is suspect or has none.
func (c *call) siblingHedge(a *adCtx) int32 {
	h := c.g.hostOf[c.lastFlight]
	he := &c.g.hosts[h]
	if c.hostStale(h, a) || a.skip(h) {
		return -1
	}
	// The host said nothing since the in-flight attempt was sent and the
	// attempt was not even started: its process may be paused or hung,
	// which holds the siblings too.
	if at := c.newestFlight(); at != nil && at.Result != Started {
		if ss := c.g.silentSince(h); !ss.IsZero() && !ss.After(at.Start) {
			return -1
		}
	}
	flights := 0
	for _, i := range he.servers {
		if c.flightAt(i) {
			flights++
		}
	}
	if flights > 1 {
		return -1 // a sibling hedge is already in flight there
	}
	cands := c.st.idx2[:0]
	for _, i := range he.servers {
		s := c.g.alive[i]
		if !c.fresh(i) || tripped(s, c.now, a.br) || c.v.ErrorsOf(s, a.decay, c.now) > 0 ||
			(a.p95 > 0 && c.adLatency(i) >= adSiblingSlowAt*a.p95) {
			continue
		}
		cands = append(cands, i)
	}
	c.st.idx2 = cands
	if len(cands) == 0 {
		return -1
	}
	return c.coldPick(cands, a, func(int32) int { return 0 })
}

// newestFlight is the newest in-flight attempt of this scan, nil if none.
func (c *call) newestFlight() *Attempt {
	for k := len(c.in.Attempts) - 1; k >= 0; k-- {
		if inFlight(c.in.Attempts[k].Result) {
			return &c.in.Attempts[k]
		}
	}
	return nil
}

// adaptiveExplain lists the top hosts' servers by score (Explain only).
func (c *call) adaptiveExplain(a *adCtx, rankOf func(int32) int) ([]ServerID, []float64) {
	type e struct {
		i  int32
		sc float64
	}
	var all []e
	for i := range int32(len(c.g.alive)) {
		r := rankOf(c.g.hostOf[i])
		if r > max(0, a.o.SpillHosts) {
			continue
		}
		all = append(all, e{i, c.score(i, r, a)})
	}
	slices.SortStableFunc(all, func(x, y e) int {
		switch {
		case x.sc < y.sc:
			return -1
		case x.sc > y.sc:
			return 1
		}
		return 0
	})
	out := make([]ServerID, len(all))
	scores := make([]float64, len(all))
	for k := range all {
		out[k], scores[k] = c.g.alive[all[k].i].ID, all[k].sc
	}
	return out, scores
}
