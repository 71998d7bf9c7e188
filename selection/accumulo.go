package selection

// accumuloPolicy is Accumulo's ConfigurableScanServerSelector (docs/policies.md,
// accumulo): plan index = min(failed attempts, plans−1); the plan's salted
// rendezvous subset of N servers; servers already tried (busy or error) in
// this scan are removed unless that empties the subset; a uniformly random
// pick; busy timeout escalation and error delay. It never hedges
// (ErrNoHedge).
type accumuloPolicy struct{ p *Profile }

func (pol accumuloPolicy) Select(in *Input) (Decision, error) {
	var c call
	if err := c.beginFirst(in, pol.p); err != nil {
		return Decision{}, err
	}
	plan := c.plans()[c.planIndex()]
	size := plan.Servers.Count(len(c.g.alive))
	subset := c.st.order(c.g, kindServers, plan.Salt, size)[:size]
	var i int32
	i, c.st.idx2 = c.pickFresh(subset, c.st.idx2)
	if i < 0 {
		return Decision{}, ErrNoServer
	}
	d := c.decisionA5(i)
	d.Candidates = c.explain(subset)
	return d, nil
}

// accumuloHostPolicy is Accumulo's ConfigurableScanServerHostSelector
// (docs/policies.md, accumulo-host): a plan's "servers" counts hosts, taken as the first N
// distinct hosts of the servers' salted rendezvous order (a host with more
// servers is a bit more likely to be chosen). A host is exhausted when all
// its live servers have a failed attempt in this scan. The first plan with
// a non-exhausted host is used: a random non-exhausted host of it, then a
// random untried server on that host. When every host of every plan is
// exhausted, history is ignored and the last plan's hosts are used. The
// busy timeout is the reached plan's (no multiplier or cap); delay per
// the error delay rule. It never hedges (ErrNoHedge).
type accumuloHostPolicy struct{ p *Profile }

func (pol accumuloHostPolicy) Select(in *Input) (Decision, error) {
	var c call
	if err := c.beginFirst(in, pol.p); err != nil {
		return Decision{}, err
	}
	plans := c.plans()
	pi := -1
	var host int32
	for i := range plans {
		hosts := c.planHosts(plans[i])
		live := c.st.idx[:0]
		for _, h := range hosts {
			if !c.hostExhausted(h) {
				live = append(live, h)
			}
		}
		c.st.idx = live
		if len(live) > 0 {
			pi, host = i, live[c.rnd.IntN(len(live))]
			break
		}
	}
	if pi < 0 {
		pi = len(plans) - 1
		hosts := c.planHosts(plans[pi])
		host = hosts[c.rnd.IntN(len(hosts))]
	}
	servers := c.g.hosts[host].servers
	var i int32
	c.st.idx = c.st.idx[:0]
	for _, s := range servers {
		if !c.failedAt(s) && !c.flightAt(s) {
			c.st.idx = append(c.st.idx, s)
		}
	}
	if len(c.st.idx) > 0 {
		i = c.st.idx[c.rnd.IntN(len(c.st.idx))]
	} else {
		i = servers[c.rnd.IntN(len(servers))]
	}
	d := c.decision(i, pi, plans[pi].BusyTimeout)
	if in.Explain {
		hosts := c.planHosts(plans[pi])
		for _, h := range hosts {
			for _, s := range c.g.hosts[h].servers {
				d.Candidates = append(d.Candidates, c.g.alive[s].ID)
			}
		}
	}
	return d, nil
}

// planHosts returns (in st.idx2) the first plan.Servers.Count(hosts)
// distinct hosts of the servers' rendezvous order for the plan's salt.
func (c *call) planHosts(plan AttemptPlan) []int32 {
	want := plan.Servers.Count(len(c.g.hosts))
	// want × maxPerHost servers hold at least want distinct hosts.
	order := c.st.order(c.g, kindServers, plan.Salt, want*c.g.maxPerHost)
	epoch := c.st.newHostEpoch(len(c.g.hosts))
	out := c.st.idx2[:0]
	for _, s := range order {
		if len(out) >= want {
			break
		}
		h := c.g.hostOf[s]
		if c.st.hostMarks[h] != epoch {
			c.st.hostMarks[h] = epoch
			out = append(out, h)
		}
	}
	c.st.idx2 = out
	return out
}

// hostExhausted: every live server of host h failed in this scan.
func (c *call) hostExhausted(h int32) bool {
	servers := c.g.hosts[h].servers
	if len(servers) > c.nFailed {
		return false
	}
	for _, s := range servers {
		if !c.failedAt(s) {
			return false
		}
	}
	return true
}
