package selection

import (
	"math"
	"math/rand/v2"
	"time"
)

// Marks of a server index during one call.
const (
	markFailed uint8 = 1 << iota // an attempt of this scan failed there
	markFlight                   // an attempt of this scan is pending/started/slow there
)

// inFlight reports whether an attempt with result r is still running
// (pending, started without data, or slow): a hedge must avoid its server.
func inFlight(r AttemptResult) bool { return r == Pending || r == Started || r == Slow }

// call is the per-Select working set shared by all policies.
type call struct {
	in  *Input
	p   *Profile
	v   *LoadView
	g   *groupIndex
	st  *TabletState
	rnd *rand.Rand
	now time.Time

	failed  int // attempts with Failed() results
	errs    int // attempts with IsError() results
	hedges  int // attempts dispatched as hedges
	nFailed int // distinct live servers with a failed attempt
	nFlight int // distinct live servers with an in-flight attempt
	// lastFlight is the server index of the newest in-flight attempt, -1.
	lastFlight int32
}

// beginFirst is begin for a policy that never hedges: a hedge request
// gets ErrNoHedge.
func (c *call) beginFirst(in *Input, def *Profile) error {
	if err := c.begin(in, def); err != nil {
		return err
	}
	if in.Hedge {
		return ErrNoHedge
	}
	return nil
}

// begin prepares c for in; def is the policy's own profile, used when
// in.Profile is nil.
func (c *call) begin(in *Input, def *Profile) error {
	c.in = in
	c.p = in.Profile
	if c.p == nil {
		c.p = def
	}
	if c.p == nil || in.View == nil {
		return ErrNoServer
	}
	c.v = in.View
	c.g = c.v.group(c.p.Group)
	c.st = in.State
	if c.st == nil {
		c.st = new(TabletState)
	}
	c.now = in.Now
	if c.now.IsZero() {
		c.now = c.v.At
	}
	c.rnd = in.Rand
	if c.rnd == nil {
		// Deterministic fallback; callers should pass their own source.
		c.rnd = rand.New(rand.NewPCG(uint64(c.now.UnixNano()), uint64(len(in.Attempts))))
	}
	c.lastFlight = -1
	for _, a := range in.Attempts {
		if a.Result.Failed() {
			c.failed++
		}
		if a.Result.IsError() {
			c.errs++
		}
		if a.Hedge {
			c.hedges++
		}
	}
	if len(c.g.alive) == 0 {
		return ErrNoServer
	}
	c.st.setTablet(in.Tablet)
	c.st.marked = c.st.marked[:0]
	for _, a := range in.Attempts {
		i, ok := c.g.index(a.Server)
		if !ok {
			continue
		}
		var m uint8
		if a.Result.Failed() {
			m |= markFailed
		}
		if inFlight(a.Result) {
			m |= markFlight
			c.lastFlight = i
		}
		if m == 0 {
			continue
		}
		k := 0
		for k < len(c.st.marked) && c.st.marked[k].i != i {
			k++
		}
		if k == len(c.st.marked) {
			c.st.marked = append(c.st.marked, mark{i: i})
		}
		old := c.st.marked[k].m
		if m&markFailed != 0 && old&markFailed == 0 {
			c.nFailed++
		}
		if m&markFlight != 0 && old&markFlight == 0 {
			c.nFlight++
		}
		c.st.marked[k].m = old | m
	}
	return nil
}

// markOf returns the marks of server index i in this call. Attempts are
// few, so a linear scan of the marked servers beats a per-server array
// (and keeps TabletState small).
func (c *call) markOf(i int32) uint8 {
	for _, e := range c.st.marked {
		if e.i == i {
			return e.m
		}
	}
	return 0
}

func (c *call) failedAt(i int32) bool { return c.markOf(i)&markFailed != 0 }
func (c *call) flightAt(i int32) bool { return c.markOf(i)&markFlight != 0 }
func (c *call) fresh(i int32) bool    { return len(c.st.marked) == 0 || c.markOf(i) == 0 }

// plans returns the profile's attempt plans (Accumulo's default plans when
// a hand-built profile has none).
func (c *call) plans() []AttemptPlan {
	if len(c.p.AttemptPlans) == 0 {
		return defaultPlans
	}
	return c.p.AttemptPlans
}

// planIndex is docs/policies.md (attempts and the plan index): min(failed attempts, plans−1).
func (c *call) planIndex() int {
	n := len(c.plans())
	if c.failed < n-1 {
		return c.failed
	}
	return n - 1
}

// decision fills the common fields for server index i.
func (c *call) decision(i int32, plan int, busy time.Duration) Decision {
	s := c.g.alive[i]
	d := Decision{Server: s.ID, Host: s.Host, PlanIndex: plan, BusyTimeout: busy}
	if !c.in.Hedge {
		d.Delay = errorDelay(c.errs)
	}
	return d
}

// decisionA5 is decision with the plan index and busy timeout of
// docs/policies.md (plan index, busy timeout escalation) for this scan's failed attempts: accumulo's rule,
// which every policy without plans of its own uses too (doc.go, "Busy
// timeout and delay").
func (c *call) decisionA5(i int32) Decision {
	return c.decision(i, c.planIndex(), busyTimeoutA5(c.p, c.plans(), c.failed))
}

// explain returns the servers of idx as IDs when Input.Explain is set.
func (c *call) explain(idx []int32) []ServerID {
	if !c.in.Explain {
		return nil
	}
	out := make([]ServerID, len(idx))
	for k, i := range idx {
		out[k] = c.g.alive[i].ID
	}
	return out
}

// busyTimeoutA5 is docs/policies.md (busy timeout escalation): plan[attempts].busyTimeout while
// attempts < plans, then lastPlan.busyTimeout × multiplier^(attempts −
// plans + 1) capped at maxBusyTimeout (0 = uncapped). A multiplier of 0
// gives 0, which means wait indefinitely.
func busyTimeoutA5(p *Profile, plans []AttemptPlan, attempts int) time.Duration {
	if len(plans) == 0 {
		return 0
	}
	if attempts < len(plans) {
		return plans[attempts].BusyTimeout
	}
	t := plans[len(plans)-1].BusyTimeout
	if t <= 0 {
		return t
	}
	m := p.BusyTimeoutMultiplier
	if m <= 0 {
		return 0
	}
	limit := p.MaxBusyTimeout
	if limit <= 0 {
		limit = math.MaxInt64
	}
	k := attempts - len(plans) + 1
	for j := 0; j < k && m > 1; j++ {
		if t > limit/time.Duration(m) {
			t = limit
			break
		}
		t *= time.Duration(m)
	}
	if t > limit {
		t = limit
	}
	return t
}

// errorDelay is docs/policies.md (error delay): 0 without errors, else
// min(30 s, 100 ms × 2^(errors−1)).
func errorDelay(errs int) time.Duration {
	if errs <= 0 {
		return 0
	}
	if errs > 10 {
		return 30 * time.Second
	}
	d := 100 * time.Millisecond << uint(errs-1)
	if d > 30*time.Second {
		d = 30 * time.Second
	}
	return d
}

// preferFresh returns, in dst, the servers of idx with no failed or
// in-flight attempt in this scan; if there are none, those with no
// in-flight attempt; if none either, all of idx unless hedging (then
// none).
func (c *call) preferFresh(idx, dst []int32) []int32 {
	dst = dst[:0]
	for _, i := range idx {
		if c.fresh(i) {
			dst = append(dst, i)
		}
	}
	if len(dst) == 0 {
		for _, i := range idx {
			if !c.flightAt(i) {
				dst = append(dst, i)
			}
		}
	}
	if len(dst) == 0 && !c.in.Hedge {
		dst = append(dst, idx...)
	}
	return dst
}

// pickFresh returns a uniformly random server of preferFresh(idx), or -1
// when that is empty. dst is scratch.
func (c *call) pickFresh(idx, dst []int32) (int32, []int32) {
	dst = c.preferFresh(idx, dst)
	if len(dst) == 0 {
		return -1, dst
	}
	return dst[c.rnd.IntN(len(dst))], dst
}

// all returns the indices 0..n-1 of the group's servers in st.idx.
func (c *call) all() []int32 {
	n := len(c.g.alive)
	c.st.idx = growInt32(c.st.idx, n)
	for i := range c.st.idx {
		c.st.idx[i] = int32(i)
	}
	return c.st.idx
}

func growInt32(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n, n+n/4)
	}
	return s[:n]
}
