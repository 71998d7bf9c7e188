package selection

import "github.com/spaolacci/murmur3"

// randomPolicy is the "random" baseline: a uniformly random live server of
// the group, avoiding servers already tried in this scan while others
// remain. Busy timeout and delay per docs/policies.md (busy timeout escalation, error delay). It never hedges.
type randomPolicy struct{ p *Profile }

func (pol randomPolicy) Select(in *Input) (Decision, error) {
	var c call
	if err := c.beginFirst(in, pol.p); err != nil {
		return Decision{}, err
	}
	var i int32
	if c.nFailed+c.nFlight == 0 {
		i = int32(c.rnd.IntN(len(c.g.alive)))
	} else {
		i, c.st.idx2 = c.pickFresh(c.all(), c.st.idx2)
	}
	d := c.decisionA5(i)
	if in.Explain {
		d.Candidates = c.explain(c.all())
	}
	return d, nil
}

// roundRobinPolicy is the "round-robin" baseline: the group's live servers
// in ID order, rotated per tablet (TabletState.RoundRobin, starting at an
// offset hashed from the tablet so tablets do not all start at the same
// server), skipping servers already tried in this scan while others
// remain. Busy timeout and delay per docs/policies.md (busy timeout escalation, error delay). It never hedges.
type roundRobinPolicy struct{ p *Profile }

func (pol roundRobinPolicy) Select(in *Input) (Decision, error) {
	var c call
	if err := c.beginFirst(in, pol.p); err != nil {
		return Decision{}, err
	}
	n := len(c.g.alive)
	i := c.rrPick(n, func(i int32) int32 { return i })
	d := c.decisionA5(i)
	if in.Explain {
		d.Candidates = c.explain(c.all())
	}
	return d, nil
}

// tabletOffset is a per-tablet starting offset for round-robin counters.
func (c *call) tabletOffset() uint64 {
	h, _ := murmur3.Sum128(c.st.key)
	return h
}

// rrPick walks n candidates (at(k) maps position k to a server index)
// round-robin from the tablet's counter and returns the first fresh one,
// else the first not in flight, else the first; it advances the counter
// past the choice. n must be > 0.
func (c *call) rrPick(n int, at func(int32) int32) int32 {
	start := (c.tabletOffset() + c.st.RoundRobin) % uint64(n)
	best, bestK, level := int32(-1), 0, 3
	for k := 0; k < n && level > 0; k++ {
		i := at(int32((start + uint64(k)) % uint64(n)))
		l := 2
		if c.fresh(i) {
			l = 0
		} else if !c.flightAt(i) {
			l = 1
		}
		if l < level {
			best, bestK, level = i, k, l
		}
	}
	c.st.RoundRobin += uint64(bestK) + 1
	return best
}
