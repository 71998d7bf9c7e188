package selection

import (
	"slices"
	"sort"
	"time"

	"github.com/spaolacci/murmur3"
)

// groupIndex is the per-group data every policy needs, built once per view
// (at NewLoadView) so that decisions do not regroup the servers per call.
// It is immutable after construction and shared by concurrent readers.
type groupIndex struct {
	name string
	// alive: the group's live servers, sorted by ID. Policy indices ("server
	// index" below) are positions in this slice.
	alive []*ServerLoad
	// hosts: distinct hosts of alive, sorted by name; hostOf[i] is the host
	// index of alive[i]; hosts[h].servers lists server indices (ID order).
	hosts  []hostEntry
	hostOf []int32
	// maxPerHost is the largest number of servers on one host.
	maxPerHost int
	// latMedian is the median of the alive servers' start-latency
	// estimates (ServerLoad.StartLatency, those with one; 0 = none): what
	// a typical server's estimate is, to compare one server's with.
	latMedian time.Duration
	// zones: distinct zones of alive, sorted by name; zoneOf like hostOf.
	zones  []zoneEntry
	zoneOf []int32
	// errs[d][i] and slows[d][i] copy alive[i].Errors[d] / Slowdowns[d]
	// (zero when absent) for decay index d of the view: contiguous, so
	// policies that read every server's counters (clickhouse-*) stay in
	// cache.
	errs, slows [][]DecayedCount
	// fp fingerprints the membership (IDs and hosts of alive, in order):
	// two views whose group has the same fp have the same indices, so
	// per-tablet caches of rendezvous orders survive a new view.
	fp [2]uint64
}

type hostEntry struct {
	name    string
	servers []int32
	// lastHeartbeat: the newest heartbeat of any of its servers.
	lastHeartbeat time.Time
	// lastAnswer: the newest LastAnswer of its servers; unansweredSince:
	// the oldest non-zero UnansweredSince of its servers.
	lastAnswer, unansweredSince time.Time
}

type zoneEntry struct {
	name string
	n    int
	// unhealthy counts servers whose default circuit breaker (3 failures,
	// 10 s factor, 30 s cap) is open at the view's time or whose last
	// failure (with no success since) is less than 10 s old.
	unhealthy int
}

// recentFailure: a failure younger than this makes a server unhealthy for
// the adaptive policy's zone avoidance.
const recentFailure = 10 * time.Second

var emptyGroup = &groupIndex{}

// groupName normalises a group name: empty means "default".
func groupName(g string) string {
	if g == "" {
		return DefaultGroup
	}
	return g
}

// DefaultGroup is the resource group of profiles and servers that name none.
const DefaultGroup = "default"

// group returns the index of group name (never nil). Views built by
// NewLoadView have it precomputed; a view built as a struct literal gets a
// fresh index per call (correct, slower).
func (v *LoadView) group(name string) *groupIndex {
	name = groupName(name)
	if v.groups != nil {
		if g, ok := v.groups[name]; ok {
			return g
		}
		return emptyGroup
	}
	var mine []*ServerLoad
	for _, s := range v.Servers {
		if s != nil && s.Alive && groupName(s.Group) == name {
			mine = append(mine, s)
		}
	}
	if len(mine) == 0 {
		return emptyGroup
	}
	if !sort.SliceIsSorted(mine, func(i, j int) bool { return mine[i].ID < mine[j].ID }) {
		sort.Slice(mine, func(i, j int) bool { return mine[i].ID < mine[j].ID })
	}
	return newGroupIndex(name, mine, v.At, len(v.Decays))
}

// buildGroups indexes the alive servers of every group.
func buildGroups(servers []*ServerLoad, at time.Time, decays int) map[string]*groupIndex {
	// Common case: one group. Collect per group without a map first.
	first := ""
	one := true
	alive := 0
	for _, s := range servers {
		if s == nil || !s.Alive {
			continue
		}
		g := groupName(s.Group)
		if alive == 0 {
			first = g
		} else if g != first {
			one = false
		}
		alive++
	}
	out := map[string]*groupIndex{}
	if alive == 0 {
		return out
	}
	if one {
		list := make([]*ServerLoad, 0, alive)
		for _, s := range servers {
			if s != nil && s.Alive {
				list = append(list, s)
			}
		}
		out[first] = newGroupIndex(first, list, at, decays)
		return out
	}
	by := map[string][]*ServerLoad{}
	for _, s := range servers {
		if s == nil || !s.Alive {
			continue
		}
		g := groupName(s.Group)
		by[g] = append(by[g], s)
	}
	for name, list := range by {
		out[name] = newGroupIndex(name, list, at, decays)
	}
	return out
}

// newGroupIndex indexes alive (sorted by ID, all alive, all of group name).
func newGroupIndex(name string, alive []*ServerLoad, at time.Time, decays int) *groupIndex {
	n := len(alive)
	g := &groupIndex{name: name, alive: alive}
	idx := make([]int32, 2*n)
	g.hostOf, g.zoneOf = idx[:n:n], idx[n:]
	hostIdx := make(map[string]int32, n/2+1)
	var hostNames, zoneNames []string
	fpLen := 0
	for _, s := range alive {
		if _, ok := hostIdx[s.Host]; !ok {
			hostIdx[s.Host] = 0
			hostNames = append(hostNames, s.Host)
		}
		known := false
		for _, z := range zoneNames {
			if z == s.Zone {
				known = true
				break
			}
		}
		if !known {
			zoneNames = append(zoneNames, s.Zone)
		}
		fpLen += len(s.ID) + len(s.Host) + 2
	}
	sort.Strings(hostNames)
	sort.Strings(zoneNames)
	g.latMedian = medianStartLatency(alive)
	g.hosts = make([]hostEntry, len(hostNames))
	for i, h := range hostNames {
		hostIdx[h] = int32(i)
		g.hosts[i].name = h
	}
	g.zones = make([]zoneEntry, len(zoneNames))
	for i, z := range zoneNames {
		g.zones[i].name = z
	}
	counts := make([]int32, len(hostNames))
	buf := make([]byte, 0, fpLen)
	for i, s := range alive {
		h := hostIdx[s.Host]
		z := int32(sort.SearchStrings(zoneNames, s.Zone))
		g.hostOf[i] = h
		g.zoneOf[i] = z
		counts[h]++
		he := &g.hosts[h]
		if s.LastHeartbeat.After(he.lastHeartbeat) {
			he.lastHeartbeat = s.LastHeartbeat
		}
		if s.LastAnswer.After(he.lastAnswer) {
			he.lastAnswer = s.LastAnswer
		}
		if u := s.UnansweredSince; !u.IsZero() && (he.unansweredSince.IsZero() || u.Before(he.unansweredSince)) {
			he.unansweredSince = u
		}
		ze := &g.zones[z]
		ze.n++
		if tripped(s, at, defaultBreaker) ||
			(s.ConsecutiveFailures > 0 && !s.LastFailure.IsZero() && at.Sub(s.LastFailure) < recentFailure) {
			ze.unhealthy++
		}
		buf = append(buf, s.ID...)
		buf = append(buf, 0)
		buf = append(buf, s.Host...)
		buf = append(buf, 0)
	}
	// Per-host server lists share one backing array.
	backing := make([]int32, n)
	off := 0
	for h := range g.hosts {
		g.hosts[h].servers = backing[off : off : off+int(counts[h])]
		off += int(counts[h])
	}
	for i := range alive {
		he := &g.hosts[g.hostOf[i]]
		he.servers = append(he.servers, int32(i))
	}
	for _, c := range counts {
		g.maxPerHost = max(g.maxPerHost, int(c))
	}
	g.fp[0], g.fp[1] = murmur3.Sum128(buf)
	if decays > 0 {
		g.errs = make([][]DecayedCount, decays)
		g.slows = make([][]DecayedCount, decays)
		all := make([]DecayedCount, 2*decays*n)
		for d := 0; d < decays; d++ {
			g.errs[d] = all[2*d*n : (2*d+1)*n : (2*d+1)*n]
			g.slows[d] = all[(2*d+1)*n : (2*d+2)*n : (2*d+2)*n]
			for i, s := range alive {
				if d < len(s.Errors) {
					g.errs[d][i] = s.Errors[d]
				}
				if d < len(s.Slowdowns) {
					g.slows[d][i] = s.Slowdowns[d]
				}
			}
		}
	}
	return g
}

// index returns the server index of id in g, or false.
func (g *groupIndex) index(id ServerID) (int32, bool) {
	a := g.alive
	lo, hi := 0, len(a)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if a[m].ID < id {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(a) && a[lo].ID == id {
		return int32(lo), true
	}
	return 0, false
}

// pending is the load measure of queue-aware policies (bookkeeper,
// ribbon-zone, adaptive): the larger of this coordinator's in-flight scans
// on the server and the server's own last report of running + queued
// scans. InFlight is fresh but sees only this coordinator; Active+QueueLen
// sees every coordinator but is as old as the last heartbeat or busy
// answer. Taking the maximum never double-counts our own scans (they are
// part of the server's report) and reacts to whichever is more recent.
func pending(s *ServerLoad) int {
	p := s.Active + s.QueueLen
	if s.InFlight > p {
		p = s.InFlight
	}
	if p < 0 {
		p = 0
	}
	return p
}

// breaker holds circuit-breaker parameters (Ribbon's ServerStats).
type breaker struct {
	threshold int           // successive failures to trip (3)
	factor    time.Duration // blackout per doubling (10 s)
	max       time.Duration // blackout cap (30 s)
}

var defaultBreaker = breaker{threshold: 3, factor: 10 * time.Second, max: 30 * time.Second}

// blackout is how long a server with f consecutive failures stays tripped
// after its last failure: min(2^min(f−threshold,16) × factor, max), 0 below
// the threshold.
func (b breaker) blackout(f int) time.Duration {
	if b.threshold <= 0 || f < b.threshold {
		return 0
	}
	d := f - b.threshold
	if d > 16 {
		d = 16
	}
	t := b.factor * time.Duration(int64(1)<<uint(d))
	if t > b.max || t < 0 {
		t = b.max
	}
	return t
}

// tripped reports whether s's circuit breaker is open at now.
func tripped(s *ServerLoad, now time.Time, b breaker) bool {
	bo := b.blackout(s.ConsecutiveFailures)
	if bo <= 0 || s.LastFailure.IsZero() {
		return false
	}
	return now.Before(s.LastFailure.Add(bo))
}

// medianStartLatency is the median of the servers' non-zero StartLatency
// (the upper one of an even count), 0 when none has one.
func medianStartLatency(ss []*ServerLoad) time.Duration {
	l := make([]time.Duration, 0, len(ss))
	for _, s := range ss {
		if s.StartLatency > 0 {
			l = append(l, s.StartLatency)
		}
	}
	if len(l) == 0 {
		return 0
	}
	slices.Sort(l)
	return l[len(l)/2]
}
