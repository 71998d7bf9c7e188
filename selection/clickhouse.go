package selection

import (
	"slices"
)

type chMode int

const (
	chRandom chMode = iota
	chNearestHostname
	chLevenshtein
	chInOrder
	chFirstOrRandom
	chRoundRobin
)

// clickhousePolicy is ClickHouse's replica selection (docs/policies.md, clickhouse) with
// one load_balancing mode. Replicas (the group's live servers, in the
// tablet's unsalted rendezvous order as "configuration order") are sorted
// by (max(0, errors − maxIgnoredErrors), slowdowns if hedging, priority 0,
// mode priority, random redrawn per call) and the first one not already
// tried in this scan is used. Errors and slowdowns are the view's decayed
// counters for the profile's DecayParams (errorHalfLife, errorCap); the
// coordinator adds 1 per failed try and per slowdown.
//
// Hedging (hedge = true): every decision carries HedgeDelay =
// hedgedConnectionTimeout and DataTimeout = receiveDataTimeout; a hedge
// call returns the next replica in order that has no attempt in flight,
// or ErrNoHedge.
type clickhousePolicy struct {
	p    *Profile
	mode chMode
}

type chKey struct {
	errs, slow uint32
	prio       int
	rnd        uint64
}

func (a chKey) less(b chKey) bool {
	if a.errs != b.errs {
		return a.errs < b.errs
	}
	if a.slow != b.slow {
		return a.slow < b.slow
	}
	if a.prio != b.prio {
		return a.prio < b.prio
	}
	return a.rnd < b.rnd
}

func (pol clickhousePolicy) Select(in *Input) (Decision, error) {
	var c call
	if err := c.begin(in, pol.p); err != nil {
		return Decision{}, err
	}
	o := &c.p.Options
	if in.Hedge && !o.Hedge {
		return Decision{}, ErrNoHedge
	}
	n := len(c.g.alive)
	// Positions in the configuration (rendezvous) order matter only to
	// in_order and round_robin; the other modes scan servers in index
	// order (the random last key makes the scan order irrelevant).
	var order []int32
	if pol.mode == chInOrder || pol.mode == chRoundRobin {
		order = c.st.order(c.g, kindServers, "", n)
	}
	decay := c.p.Decay()
	var dist []int
	if pol.mode == chNearestHostname || pol.mode == chLevenshtein {
		dist = c.hostDistances(pol.mode, in.LocalHost)
	}
	var lastUsed int
	if pol.mode == chRoundRobin {
		lastUsed = int(c.st.RoundRobin % uint64(n))
		c.st.RoundRobin++
	}
	firstIdx := int32(-1)
	if pol.mode == chFirstOrRandom {
		first := o.FirstOffset % n
		firstIdx = c.st.order(c.g, kindServers, "", first+1)[first]
	}
	// Exclusion level: 0 = only untouched servers, 1 = no in-flight ones,
	// 2 = any (never when hedging).
	level := 0
	if len(c.st.marked) >= n {
		level = 1
		if c.nFlight >= n {
			if in.Hedge {
				return Decision{}, ErrNoHedge
			}
			level = 2
		}
	}
	var errs, slows []DecayedCount
	if di := c.v.decayIndex(decay); di >= 0 && di < len(c.g.errs) {
		errs, slows = c.g.errs[di], c.g.slows[di]
	}
	key := func(pos int, i int32) chKey {
		var k chKey
		if errs != nil {
			k.errs = errs[i].Value(c.now, decay)
		}
		if k.errs > o.MaxIgnoredErrors {
			k.errs -= o.MaxIgnoredErrors
		} else {
			k.errs = 0
		}
		if o.Hedge && slows != nil {
			k.slow = slows[i].Value(c.now, decay)
		}
		switch pol.mode {
		case chNearestHostname, chLevenshtein:
			k.prio = dist[c.g.hostOf[i]]
		case chInOrder:
			k.prio = pos
		case chFirstOrRandom:
			if i != firstIdx {
				k.prio = 1
			}
		case chRoundRobin:
			switch {
			case pos < lastUsed:
				k.prio = n - 1 - (lastUsed - pos)
			case pos > lastUsed:
				k.prio = pos - lastUsed - 1
			default:
				k.prio = n - 1
			}
		}
		return k
	}
	allowed := func(i int32) bool {
		switch level {
		case 0:
			return c.fresh(i)
		case 1:
			return !c.flightAt(i)
		}
		return true
	}
	best := int32(-1)
	var bk chKey
	ties := 0
	var cands []ServerID
	if in.Explain {
		type ek struct {
			k chKey
			i int32
		}
		all := make([]ek, 0, n)
		for pos := range n {
			i := at(order, pos)
			if allowed(i) {
				k := key(pos, i)
				k.rnd = c.rnd.Uint64()
				all = append(all, ek{k, i})
			}
		}
		slices.SortFunc(all, func(a, b ek) int {
			if a.k.less(b.k) {
				return -1
			}
			if b.k.less(a.k) {
				return 1
			}
			return 0
		})
		for _, e := range all {
			cands = append(cands, c.g.alive[e.i].ID)
		}
		best = all[0].i
	} else {
		// Minimum with uniform random tie-breaking (reservoir): the same
		// distribution as sorting with a random last key.
		for pos := range n {
			i := at(order, pos)
			if !allowed(i) {
				continue
			}
			k := key(pos, i)
			switch {
			case best < 0 || k.less(bk):
				best, bk, ties = i, k, 1
			case !bk.less(k):
				ties++
				if c.rnd.IntN(ties) == 0 {
					best = i
				}
			}
		}
	}
	if best < 0 {
		return Decision{}, ErrNoServer
	}
	d := c.decisionA5(best)
	d.Candidates = cands
	if o.Hedge {
		d.HedgeDelay = o.HedgedConnectionTimeout
		d.DataTimeout = o.ReceiveDataTimeout
	}
	return d, nil
}

// at is order[pos], or pos when order is nil (index order).
func at(order []int32, pos int) int32 {
	if order == nil {
		return int32(pos)
	}
	return order[pos]
}

// hostDistances returns, per host index, the distance of the host name to
// local: differing bytes at equal positions over the shorter length
// (nearest_hostname, case-sensitive) or the case-insensitive Levenshtein
// distance. Cached in the state per (mode, local host, membership).
func (c *call) hostDistances(mode chMode, local string) []int {
	dc := &c.st.dist
	if dc.valid && dc.mode == uint8(mode) && dc.local == local && dc.group == c.g.name && dc.fp == c.g.fp && len(dc.d) == len(c.g.hosts) {
		return dc.d
	}
	dc.valid, dc.mode, dc.local, dc.group, dc.fp = true, uint8(mode), local, c.g.name, c.g.fp
	dc.d = slices.Grow(dc.d[:0], len(c.g.hosts))[:len(c.g.hosts)]
	for h := range c.g.hosts {
		if mode == chNearestHostname {
			dc.d[h] = hostnameDifference(local, c.g.hosts[h].name)
		} else {
			dc.d[h] = levenshteinFold(local, c.g.hosts[h].name)
		}
	}
	return dc.d
}

// hostnameDifference is ClickHouse's getHostNameDifference: the number of
// byte positions, over the shorter length, where a and b differ.
func hostnameDifference(a, b string) int {
	n := min(len(a), len(b))
	d := 0
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			d++
		}
	}
	return d
}

func lowerASCII(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

// levenshteinFold is the ASCII-case-insensitive Levenshtein distance.
func levenshteinFold(a, b string) int {
	if len(a) == 0 {
		return len(b)
	}
	if len(b) == 0 {
		return len(a)
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		ca := lowerASCII(a[i-1])
		for j := 1; j <= len(b); j++ {
			cost := 1
			if ca == lowerASCII(b[j-1]) {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
