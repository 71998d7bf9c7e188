package selection

import (
	"math"
	"slices"
	"time"
)

// ribbonPolicy is Ribbon's ZoneAwareLoadBalancer with the
// AvailabilityFilteringRule over a ServerListSubsetFilter (docs/policies.md, ribbon-zone).
//
//   - Subset (subsetSize > 0), kept in TabletState and refreshed every
//     subsetRefresh, when the group's membership changes, or when no member
//     is live: members gone are dropped; members with pending >
//     eliminationConnectionThreshold or more than eliminationFailureThreshold
//     failures in the last second are dropped; then max(floor(size ×
//     subsetEvictPercent) − dropped, shrink) of the worst (failures desc,
//     pending desc) are force-evicted; the subset is refilled at random from
//     the other live servers (healthy ones first).
//   - Servers already tried in this scan are left out while others remain.
//   - Circuit breaker per server from ConsecutiveFailures and LastFailure:
//     tripped when failures ≥ breakerFailureThreshold and now < last
//     failure plus min(2^min(failures−threshold,16) × breakerTimeoutFactor,
//     breakerMaxTimeout).
//   - Zone avoidance with zoneTriggerLoad and zoneBlackoutPercent, the
//     worst zone removed at random weighted by instances among ties within
//     1e-6, the zone to use chosen at random weighted by instances.
//   - AvailabilityFilteringRule inside the zone: skip tripped servers and
//     servers with pending ≥ activeConnectionsLimit (0 = unlimited); round
//     robin (TabletState.RoundRobin from a per-tablet offset) over the rest.
//     If none pass, plain round robin over the same servers — the chosen
//     zone's, or all candidates when no zone was chosen — as Ribbon's
//     CompositePredicate falls back to alwaysTrue within the zone's load
//     balancer. (A chosen zone always has a server that is not tripped;
//     zone avoidance removes zones whose servers are all tripped.)
//
// Load is pending(); Ribbon's per-client active request count is
// approximated by it. It never hedges (ErrNoHedge).
type ribbonPolicy struct{ p *Profile }

// subsetFailureWindow is Ribbon's ServerStats failure-count window.
const subsetFailureWindow = time.Second

func (pol ribbonPolicy) Select(in *Input) (Decision, error) {
	var c call
	if err := c.beginFirst(in, pol.p); err != nil {
		return Decision{}, err
	}
	o := &c.p.Options
	br := o.breaker()
	var base []int32
	if o.SubsetSize > 0 && o.SubsetSize < len(c.g.alive) {
		base = c.ribbonSubset(o)
	} else {
		base = c.all()
	}
	// Leave out servers tried in this scan while others remain (st.idx2).
	cands := c.preferFresh(base, c.st.idx2)
	c.st.idx2 = cands

	zone := c.ribbonZone(cands, o, br)
	// The rule runs over the chosen zone's servers, or over all when no
	// zone was chosen; its fallback (alwaysTrue) stays in the same set.
	choice := c.availabilityRR(cands, zone, o, br)
	if choice < 0 {
		choice = c.plainRR(cands, zone)
	}
	d := c.decisionA5(choice)
	if in.Explain {
		for _, i := range cands {
			if zone < 0 || c.g.zoneOf[i] == zone {
				d.Candidates = append(d.Candidates, c.g.alive[i].ID)
			}
		}
	}
	return d, nil
}

// availabilityRR runs the AvailabilityFilteringRule over cands (only zone
// z when z ≥ 0): round robin over the servers that are not tripped and
// below activeConnectionsLimit; -1 if none.
func (c *call) availabilityRR(cands []int32, z int32, o *Options, br breaker) int32 {
	ok := func(i int32) bool {
		if z >= 0 && c.g.zoneOf[i] != z {
			return false
		}
		s := c.g.alive[i]
		if tripped(s, c.now, br) {
			return false
		}
		return o.ActiveConnectionsLimit <= 0 || pending(s) < o.ActiveConnectionsLimit
	}
	n := 0
	for _, i := range cands {
		if ok(i) {
			n++
		}
	}
	if n == 0 {
		return -1
	}
	k := int((c.tabletOffset() + c.st.RoundRobin) % uint64(n))
	c.st.RoundRobin++
	for _, i := range cands {
		if ok(i) {
			if k == 0 {
				return i
			}
			k--
		}
	}
	return -1
}

// plainRR is round robin over cands (only zone z when z ≥ 0), unfiltered.
func (c *call) plainRR(cands []int32, z int32) int32 {
	n := 0
	for _, i := range cands {
		if z < 0 || c.g.zoneOf[i] == z {
			n++
		}
	}
	k := int((c.tabletOffset() + c.st.RoundRobin) % uint64(n))
	c.st.RoundRobin++
	for _, i := range cands {
		if z < 0 || c.g.zoneOf[i] == z {
			if k == 0 {
				return i
			}
			k--
		}
	}
	return cands[0]
}

type zoneStat struct {
	n, tripped, active int
	in                 bool // still available
}

// ribbonZone runs ZoneAvoidanceRule.getAvailableZones over cands and
// returns the zone to use, or -1 for "the rule over all".
func (c *call) ribbonZone(cands []int32, o *Options, br breaker) int32 {
	nz := len(c.g.zones)
	if nz < 2 {
		return -1
	}
	zs := c.st.zoneStats[:0]
	for range nz {
		zs = append(zs, zoneStat{})
	}
	c.st.zoneStats = zs
	for _, i := range cands {
		z := &zs[c.g.zoneOf[i]]
		z.n++
		s := c.g.alive[i]
		if tripped(s, c.now, br) {
			z.tripped++
		} else {
			z.active += pending(s)
		}
	}
	present := 0
	for z := range zs {
		if zs[z].n > 0 {
			present++
			zs[z].in = true
		}
	}
	if present < 2 {
		return -1
	}
	limited := false
	maxLoad := 0.0
	worst := c.st.idx[:0]
	for z := range zs {
		st := &zs[z]
		if !st.in {
			continue
		}
		load := -1.0
		if st.n > st.tripped {
			load = float64(st.active) / float64(st.n-st.tripped)
		}
		if float64(st.tripped)/float64(st.n) >= o.ZoneBlackoutPercent || load < 0 {
			st.in = false
			limited = true
			continue
		}
		switch {
		case math.Abs(load-maxLoad) < 1e-6:
			worst = append(worst, int32(z))
		case load > maxLoad:
			maxLoad = load
			worst = append(worst[:0], int32(z))
		}
	}
	c.st.idx = worst
	if maxLoad < o.ZoneTriggerLoad && !limited {
		return -1
	}
	if avoid := c.weightedZone(zs, worst); avoid >= 0 {
		zs[avoid].in = false
	}
	remaining := c.st.idx[:0]
	for z := range zs {
		if zs[z].in {
			remaining = append(remaining, int32(z))
		}
	}
	c.st.idx = remaining
	if len(remaining) == present {
		return -1
	}
	return c.weightedZone(zs, remaining)
}

// weightedZone picks one of zones at random weighted by instance count.
func (c *call) weightedZone(zs []zoneStat, zones []int32) int32 {
	total := 0
	for _, z := range zones {
		total += zs[z].n
	}
	if total == 0 {
		return -1
	}
	k := c.rnd.IntN(total) + 1
	sum := 0
	for _, z := range zones {
		sum += zs[z].n
		if k <= sum {
			return z
		}
	}
	return -1
}

// ribbonSubset returns (in st.idx) the live members of the tablet's
// subset, refreshing it when due.
func (c *call) ribbonSubset(o *Options) []int32 {
	ss := &c.st.subset
	refresh := !ss.init || ss.group != c.g.name || ss.fp != c.g.fp || c.now.Sub(ss.at) >= o.SubsetRefresh
	out := c.collectSubset()
	if len(out) == 0 || refresh {
		c.refreshSubset(o)
		out = c.collectSubset()
	}
	return out
}

func (c *call) collectSubset() []int32 {
	out := c.st.idx[:0]
	for _, id := range c.st.subset.members {
		if i, ok := c.g.index(id); ok {
			out = append(out, i)
		}
	}
	c.st.idx = out
	return out
}

// refreshSubset is ServerListSubsetFilter.getFilteredListOfServers.
func (c *call) refreshSubset(o *Options) {
	ss := &c.st.subset
	n := len(c.g.alive)
	const inSubset, excluded = 1, 2
	flags := c.st.flags[:0]
	flags = append(flags, make([]uint8, n)...)
	c.st.flags = flags
	since := c.now.Add(-subsetFailureWindow)
	kept := c.st.idx[:0]
	for _, id := range ss.members {
		i, ok := c.g.index(id)
		if !ok {
			continue // gone or dead
		}
		s := c.g.alive[i]
		if pending(s) > o.EliminationConnectionThreshold || s.FailuresSince(since) > o.EliminationFailureThreshold {
			flags[i] |= excluded
			continue
		}
		kept = append(kept, i)
	}
	size := o.SubsetSize
	eliminated := len(ss.members) - len(kept)
	minElim := int(float64(size) * o.SubsetEvictPercent)
	force := 0
	if size < len(kept) {
		force = len(kept) - size
	} else if minElim > eliminated {
		force = minElim - eliminated
	}
	force = min(force, len(kept))
	if force > 0 {
		slices.SortStableFunc(kept, func(a, b int32) int {
			sa, sb := c.g.alive[a], c.g.alive[b]
			if fa, fb := sa.FailuresSince(since), sb.FailuresSince(since); fa != fb {
				return fb - fa
			}
			if pa, pb := pending(sa), pending(sb); pa != pb {
				return pb - pa
			}
			return cmpString(string(sa.ID), string(sb.ID))
		})
		for _, i := range kept[:force] {
			flags[i] |= excluded
		}
		kept = kept[force:]
	}
	for _, i := range kept {
		flags[i] |= inSubset
	}
	if len(kept) < size {
		need := size - len(kept)
		pool := c.st.idx2[:0]
		for i := range n {
			if flags[i] == 0 {
				pool = append(pool, int32(i))
			}
		}
		if need > len(pool) {
			// Not enough healthy servers: fall back to the whole pool.
			pool = pool[:0]
			for i := range n {
				if flags[i]&inSubset == 0 {
					pool = append(pool, int32(i))
				}
			}
		}
		for k := 0; k < need && k < len(pool); k++ {
			j := k + c.rnd.IntN(len(pool)-k)
			pool[k], pool[j] = pool[j], pool[k]
			kept = append(kept, pool[k])
		}
		c.st.idx2 = pool
	}
	ss.members = ss.members[:0]
	for _, i := range kept {
		ss.members = append(ss.members, c.g.alive[i].ID)
	}
	c.st.idx = kept
	ss.init, ss.at, ss.group, ss.fp = true, c.now, c.g.name, c.g.fp
}
