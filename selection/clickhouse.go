package selection

import (
	"math"
	"slices"
	"sync"
	"time"
)

type chMode int

const (
	chRandom chMode = iota
	chNearestHostname
	chLevenshtein
	chInOrder
	chFirstOrRandom
	chRoundRobin
	chLongestCommonPrefix
	chLongestCommonSuffix
	chLeastRequest
)

// hostnameMode reports whether mode's priority is a hostname distance.
func (m chMode) hostnameMode() bool {
	switch m {
	case chNearestHostname, chLevenshtein, chLongestCommonPrefix, chLongestCommonSuffix:
		return true
	}
	return false
}

// clickhousePolicy is ClickHouse's replica selection (docs/policies.md, clickhouse) with
// one load_balancing mode. Replicas (the group's live servers, in the
// tablet's unsalted rendezvous order as "configuration order") are sorted
// by (max(0, errors − maxIgnoredErrors), slowdowns if hedging, replica
// priority (replicaPriority, default 1), mode priority, random redrawn per
// call) — PoolState::compare in ClickHouse's PoolWithFailoverBase.h — and
// the first one not already tried in this scan is used. Errors and
// slowdowns are the pool's counts (chPool): the coordinator adds 1 per
// failed try and per slowdown to the view's tallies, the pool halves them
// on ClickHouse's per-pool clock.
//
// Every attempt's busy timeout is connectTimeoutWithFailover (1s,
// ClickHouse's connect_timeout_with_failover_ms) unless that is 0, when
// the attemptPlans' escalation applies. Hedging (hedge = true, ClickHouse's
// default): every decision carries HedgeDelay = hedgedConnectionTimeout
// (50ms) and DataTimeout = receiveDataTimeout (2s); a hedge call returns
// the next replica in order that has no attempt in flight, or ErrNoHedge.
// With ClickHouse's defaults an attempt not accepted within 50ms is hedged
// long before it times out.
type clickhousePolicy struct {
	p    *Profile
	mode chMode
	pool *chPool
}

// newClickHousePolicy is the policy of p with load_balancing mode.
func newClickHousePolicy(p *Profile, mode chMode) clickhousePolicy {
	return clickhousePolicy{p: p, mode: mode, pool: &chPool{}}
}

type chKey struct {
	errs, slow uint32
	cfg        int // replica (config) priority
	prio       int // mode priority
	rnd        uint64
}

func (a chKey) less(b chKey) bool {
	if a.errs != b.errs {
		return a.errs < b.errs
	}
	if a.slow != b.slow {
		return a.slow < b.slow
	}
	if a.cfg != b.cfg {
		return a.cfg < b.cfg
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
	var dist []int
	if pol.mode.hostnameMode() {
		dist = c.hostDistances(pol.mode, in.LocalHost)
	}
	lrBest := int32(-1)
	if pol.mode == chLeastRequest {
		lrBest = c.leastRequestWinner(o.LeastRequestChoiceCount, o.LeastRequestActiveRequestBias)
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
	var counts []uint32 // errors then slowdowns per server index; nil = all 0
	if pol.pool != nil {
		counts = pol.pool.query(c.g, c.v.decayIndex(clickhouseTally), c.now, o.ErrorHalfLife, o.ErrorCap, !in.Explain)
	}
	key := func(pos int, i int32) chKey {
		var k chKey
		if counts != nil {
			k.errs = counts[i]
			if o.Hedge {
				k.slow = counts[n+int(i)]
			}
		}
		// distributed_replica_max_ignored_errors, on the query's copy.
		if k.errs > o.MaxIgnoredErrors {
			k.errs -= o.MaxIgnoredErrors
		} else {
			k.errs = 0
		}
		if len(o.ReplicaPriority) > 0 {
			k.cfg = o.replicaPriority(c.g.alive[i])
		} else {
			k.cfg = DefaultReplicaPriority
		}
		switch pol.mode {
		case chNearestHostname, chLevenshtein, chLongestCommonPrefix, chLongestCommonSuffix:
			k.prio = dist[c.g.hostOf[i]]
		case chLeastRequest:
			if i != lrBest {
				k.prio = 1
			}
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
	if o.ConnectTimeoutWithFailover > 0 {
		// connect_timeout_with_failover_ms: ClickHouse has no busy
		// timeout escalation; every try gets the same timeout.
		d.BusyTimeout = o.ConnectTimeoutWithFailover
	}
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

// hostDistances returns, per host index, the mode priority of the host
// name for local: differing bytes at equal positions over the shorter
// length (nearest_hostname, case-sensitive), the case-insensitive
// Levenshtein distance, or minus the length of the longest common prefix
// or suffix (case-sensitive; ClickHouse negates the similarity so that
// lower is preferred). Cached in the state per (mode, local host,
// membership).
func (c *call) hostDistances(mode chMode, local string) []int {
	dc := &c.st.dist
	if dc.valid && dc.mode == uint8(mode) && dc.local == local && dc.group == c.g.name && dc.fp == c.g.fp && len(dc.d) == len(c.g.hosts) {
		return dc.d
	}
	dc.valid, dc.mode, dc.local, dc.group, dc.fp = true, uint8(mode), local, c.g.name, c.g.fp
	dc.d = slices.Grow(dc.d[:0], len(c.g.hosts))[:len(c.g.hosts)]
	for h := range c.g.hosts {
		name := c.g.hosts[h].name
		switch mode {
		case chNearestHostname:
			dc.d[h] = hostnameDifference(local, name)
		case chLongestCommonPrefix:
			dc.d[h] = -commonPrefixLen(local, name)
		case chLongestCommonSuffix:
			dc.d[h] = -commonSuffixLen(local, name)
		default:
			dc.d[h] = levenshteinFold(local, name)
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

// commonPrefixLen is ClickHouse's getHostNameLongestCommonPrefix: the
// number of equal leading bytes (case-sensitive).
func commonPrefixLen(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// commonSuffixLen is ClickHouse's getHostNameLongestCommonSuffix: the
// number of equal trailing bytes (case-sensitive).
func commonSuffixLen(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[len(a)-1-n] == b[len(b)-1-n] {
		n++
	}
	return n
}

// leastRequestWinner is ClickHouse's least_request (GetPriorityForLoadBalancing.cpp,
// Envoy's LEAST_REQUEST): a uniform sample of min(max(2, choiceCount), n)
// distinct servers of the pool (a partial Fisher–Yates shuffle), and the
// first of them with the strictly highest 1 / (in-flight + 1)^bias wins.
// The winner gets mode priority 0, every other server 1. In-flight is the
// view's ServerLoad.InFlight (this coordinator's scans dispatched there and
// not finished), ClickHouse's connections in use.
func (c *call) leastRequestWinner(choiceCount int, bias float64) int32 {
	n := len(c.g.alive)
	k := min(max(2, choiceCount), n)
	idx := slices.Grow(c.st.idx[:0], n)[:n]
	for i := range idx {
		idx[i] = int32(i)
	}
	for i := 0; i+1 < n && i < k; i++ {
		j := i + c.rnd.IntN(n-i)
		idx[i], idx[j] = idx[j], idx[i]
	}
	best, bestScore := idx[0], 0.0
	for _, i := range idx[:k] {
		score := 1 / math.Pow(float64(max(c.g.alive[i].InFlight, 0))+1, bias)
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	c.st.idx = idx
	return best
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

// clickhouseTally is the decay parameter of the load view's counters that
// clickhouse-* policies read (Profile.Decay): a plain tally that never
// halves and is not capped. The policy applies ClickHouse's halving and cap
// itself, in its chPool.
var clickhouseTally = DecayParams{}

// chPool is the error and slowdown state of ClickHouse's
// PoolWithFailoverBase (src/Common/PoolWithFailoverBase.h) for one
// clickhouse-* policy: one count pair per replica and ONE halving clock
// (last_error_decrease_time) for the whole pool. Every Select is a query:
//
//   - errors and slowdowns counted since the previous query (the view's
//     tallies grew) are added first, errors capped at errorCap
//     (updateSharedErrorCounts: min(max_error_cap, count + new); slowdowns
//     are not capped);
//   - then updateErrorCounts: on the first query the clock is set to now;
//     later, shift = (now − clock) / errorHalfLife whole periods, and if
//     shift > 0 every count of the pool (replicas not alive included) is
//     shifted right by it and the clock is set to now, dropping the
//     remainder of the period.
//
// So counts halve only when a query comes, at most once per half-life,
// and a halving restarts the period. Differences from ClickHouse:
// ClickHouse measures in whole seconds (time(nullptr)), this in the clock's
// resolution; errorHalfLife 0 means "never halves" (ClickHouse's 0 clears
// every count at every query; 1ms comes close); errorCap 0 means
// "uncapped" (ClickHouse's 0 would keep every count at 0).
//
// A replica's tallies are first read as a baseline (its errors before this
// policy saw it do not count, as a profile reload, like ClickHouse's
// SYSTEM RELOAD CONFIG, starts with clean counts). An Explain call reads
// the state without changing it (as ClickHouse's system.clusters does).
type chPool struct {
	mu sync.Mutex
	// last is last_error_decrease_time; zero before the first query.
	last time.Time
	byID map[ServerID]*chReplica
	// g is the group index at is aligned with (at[i] is g.alive[i]'s
	// state); the tallies of one view never change, so a query with the
	// same g has nothing new to add.
	g  *groupIndex
	at []*chReplica
}

type chReplica struct {
	errs, slows uint32
	// seenErrs and seenSlows are the view tallies already added.
	seenErrs, seenSlows DecayedCount
}

// tallyDelta is what the tally cur adds to seen: the growth when it is
// the same counter (same origin), all of cur when the counter restarted
// (a newer origin: the view reset it, or the server re-registered), and 0
// for a stale view (older origin or smaller count). newer reports whether
// cur should replace seen.
func tallyDelta(seen, cur DecayedCount) (delta uint32, newer bool) {
	switch {
	case cur.Origin.After(seen.Origin):
		return cur.Count, true
	case cur.Origin.Equal(seen.Origin) && cur.Count > seen.Count:
		return cur.Count - seen.Count, true
	}
	return 0, false
}

func addCapped(a, b, limit uint32) uint32 {
	s := uint64(a) + uint64(b)
	if limit > 0 && s > uint64(limit) {
		s = uint64(limit)
	}
	if s > math.MaxUint32 {
		s = math.MaxUint32
	}
	return uint32(s)
}

// query runs one query's updates (see chPool) at now for g's alive
// servers, whose view tallies are their Errors[di] and Slowdowns[di]
// (none when di < 0), and returns their counts after the updates, errors then
// slowdowns (2n values), or nil when all are 0. With commit false nothing
// is stored.
func (p *chPool) query(g *groupIndex, di int, now time.Time, halfLife time.Duration, limit uint32, commit bool) []uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(g.alive)
	fresh := p.g != g
	if fresh && commit {
		if p.byID == nil {
			p.byID = make(map[ServerID]*chReplica, n)
		}
		// Forget replicas gone for good (their counts are 0 and they are
		// not in this view) so the map stays the size of the group.
		if len(p.byID) > 2*n+16 {
			for id, r := range p.byID {
				if r.errs == 0 && r.slows == 0 {
					if _, ok := g.index(id); !ok {
						delete(p.byID, id)
					}
				}
			}
		}
		p.at = p.at[:0]
		for i, s := range g.alive {
			r := p.byID[s.ID]
			if r == nil {
				r = &chReplica{}
				if di >= 0 {
					r.seenErrs, r.seenSlows = g.errAt(di, i), g.slowAt(di, i)
				}
				p.byID[s.ID] = r
			}
			p.at = append(p.at, r)
		}
		p.g = g
	}
	// updateErrorCounts: the shift of this query.
	shift := 0
	if p.last.IsZero() {
		if commit {
			p.last = now
		}
	} else if d := now.Sub(p.last); d >= 0 && halfLife > 0 {
		if k := d / halfLife; k > 0 {
			shift = int(min(k, 64))
			if commit {
				p.last = now
			}
		}
	}
	var out []uint32
	for i, s := range g.alive {
		var r *chReplica
		if commit || !fresh {
			r = p.at[i]
		} else {
			r = p.byID[s.ID]
		}
		if r == nil {
			continue // first sight (Explain): the baseline, 0
		}
		e, sl := r.errs, r.slows
		if fresh {
			if di >= 0 {
				errT, slowT := g.errAt(di, i), g.slowAt(di, i)
				if d, newer := tallyDelta(r.seenErrs, errT); newer {
					e = addCapped(e, d, limit)
					if commit {
						r.seenErrs = errT
					}
				}
				if d, newer := tallyDelta(r.seenSlows, slowT); newer {
					sl = addCapped(sl, d, 0)
					if commit {
						r.seenSlows = slowT
					}
				}
			}
			if commit {
				r.errs, r.slows = e, sl
			}
		}
		e, sl = shr(e, shift), shr(sl, shift)
		if e|sl != 0 {
			if out == nil {
				out = make([]uint32, 2*n)
			}
			out[i], out[n+i] = e, sl
		}
	}
	if commit && shift > 0 {
		for _, r := range p.byID {
			r.errs, r.slows = shr(r.errs, shift), shr(r.slows, shift)
		}
	}
	return out
}

func shr(v uint32, k int) uint32 {
	if k >= 32 {
		return 0
	}
	return v >> uint(k)
}
