package selection

import (
	"cmp"
	"slices"
	"sort"
	"time"

	"github.com/spaolacci/murmur3"
)

// groupShape is the part of a group's index that depends on its
// membership alone: the IDs, hosts and zones of its alive servers, in ID
// order. Successive views whose group has the same membership share it
// (ViewBuilder); it is immutable once built.
type groupShape struct {
	name string
	// hosts: distinct hosts of alive, sorted by name; hostOf[i] is the host
	// index of alive[i]; hosts[h].servers lists server indices (ID order).
	hosts  []hostEntry
	hostOf []int32
	// maxPerHost is the largest number of servers on one host.
	maxPerHost int
	// zones0: distinct zones of alive, sorted by name, with their server
	// counts and no unhealthy server; zoneOf like hostOf.
	zones0 []zoneEntry
	zoneOf []int32
	// members holds ID, host and zone of every alive server, in order:
	// what a later view's group is compared with before it shares this
	// shape (so sharing never depends on the old view's servers).
	members []string
	// fp fingerprints the membership (IDs and hosts of alive, in order):
	// two views whose group has the same fp have the same indices, so
	// per-tablet caches of rendezvous orders survive a new view.
	fp [2]uint64
}

// groupIndex is the per-group data every policy needs, built once per view
// (at NewLoadView) so that decisions do not regroup the servers per call.
// It is immutable after construction and shared by concurrent readers.
type groupIndex struct {
	groupShape
	// alive: the group's live servers, sorted by ID. Policy indices ("server
	// index" below) are positions in this slice.
	alive []*ServerLoad
	// latMedian is the median of the alive servers' start-latency
	// estimates (ServerLoad.StartLatency, those with one; 0 = none): what
	// a typical server's estimate is, to compare one server's with.
	latMedian time.Duration
	// heartbeat[h]: the newest heartbeat of any of host h's servers.
	heartbeat []time.Time
	// zones: zones0 with this view's unhealthy counts (zones0 itself when
	// no server is unhealthy).
	zones []zoneEntry
}

type hostEntry struct {
	name    string
	servers []int32
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
	if v.indexed {
		if g := v.indexedGroup(name); g != nil {
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
	b := ViewBuilder{once: true}
	g := &groupIndex{}
	b.fill(g, name, mine, v.At, nil)
	return g
}

// indexedGroup is the group called name of an indexed view, or nil
// (v.groups is sorted by name).
func (v *LoadView) indexedGroup(name string) *groupIndex {
	gs := v.groups
	if len(gs) == 1 {
		if gs[0].name == name {
			return gs[0]
		}
		return nil
	}
	i, ok := slices.BinarySearchFunc(gs, name, func(g *groupIndex, n string) int { return cmpString(g.name, n) })
	if !ok {
		return nil
	}
	return gs[i]
}

// ViewBuilder builds successive LoadViews (the load board's rebuilds) and
// shares with the previous one what did not change: a group whose alive
// servers have the same IDs, hosts and zones in the same order keeps its
// host and zone indices and its fingerprint, and scratch space is reused.
// The views it returns are as immutable as NewLoadView's and give the same
// answers. A ViewBuilder is not safe for concurrent use; its zero value is
// ready.
type ViewBuilder struct {
	// once: this builder builds one view (NewLoadView), which no later
	// view is compared with: its shapes need no members list.
	once  bool
	prev  *LoadView
	lat   []time.Duration
	names []string
	count []int32
	beats []time.Time
	fpBuf []byte
	hash  murmur3.Hash128
	// spare: blocks of recycled views, reused by Build.
	spare []*viewBlock
}

// viewBlock: a view, its first group and the per-view arrays of a small
// group in one allocation.
type viewBlock struct {
	v     LoadView
	g     groupIndex
	one   [1]*groupIndex
	beats [4]time.Time
	zones [4]zoneEntry
}

// Build returns the view of servers at at, like NewLoadView (it takes
// ownership of servers and sorts them; decays is kept, not copied).
func (b *ViewBuilder) Build(servers []*ServerLoad, decays []DecayParams, at time.Time) *LoadView {
	slices.SortFunc(servers, func(a, b *ServerLoad) int { return cmpString(string(a.ID), string(b.ID)) })
	var blk *viewBlock
	if n := len(b.spare); n > 0 {
		blk, b.spare = b.spare[n-1], b.spare[:n-1]
		*blk = viewBlock{}
	} else {
		blk = &viewBlock{}
	}
	v := &blk.v
	v.Servers, v.Decays, v.At, v.indexed, v.blk = servers, decays, at, true, blk
	b.buildGroups(blk)
	b.prev = v
	return v
}

// Recycle hands back v, a view b built that nothing reads any more (its
// caller holds the only reference and no decision is running on it), so
// that a later Build reuses its memory instead of allocating a view: a
// caller that rebuilds many small views recycles each one it replaces.
// When v is taken it returns v's Servers slice, emptied, for the caller's
// next Build. It does not take the last view b built, which the next is
// compared with, nor a view built as a struct literal.
func (b *ViewBuilder) Recycle(v *LoadView) (servers []*ServerLoad, ok bool) {
	if v == nil || v.blk == nil || v == b.prev || len(b.spare) >= maxSpare {
		return nil, false
	}
	servers = v.Servers
	clear(servers)
	b.spare = append(b.spare, v.blk)
	return servers[:0], true
}

// maxSpare bounds the blocks a ViewBuilder keeps for reuse.
const maxSpare = 4

// buildGroups indexes the alive servers of every group.
func (b *ViewBuilder) buildGroups(blk *viewBlock) {
	v := &blk.v
	servers := v.Servers
	// Common case: one group. Collect per group without a map first.
	first := ""
	one, all := true, true
	alive := 0
	for _, s := range servers {
		if s == nil || !s.Alive {
			all = false
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
	if alive == 0 {
		return
	}
	if one {
		list := servers // every server alive: the view's own sorted list
		if !all {
			list = make([]*ServerLoad, 0, alive)
			for _, s := range servers {
				if s != nil && s.Alive {
					list = append(list, s)
				}
			}
		}
		b.fill(&blk.g, first, list, v.At, blk)
		blk.one[0] = &blk.g
		v.groups = blk.one[:]
		return
	}
	by := map[string][]*ServerLoad{}
	for _, s := range servers {
		if s == nil || !s.Alive {
			continue
		}
		g := groupName(s.Group)
		by[g] = append(by[g], s)
	}
	gs := make([]groupIndex, len(by))
	v.groups = make([]*groupIndex, 0, len(by))
	for name := range by {
		v.groups = append(v.groups, nil)
		v.groups[len(v.groups)-1] = &gs[len(v.groups)-1]
		gs[len(v.groups)-1].name = name
	}
	slices.SortFunc(v.groups, func(a, b *groupIndex) int { return cmpString(a.name, b.name) })
	for _, g := range v.groups {
		b.fill(g, g.name, by[g.name], v.At, nil)
	}
}

// fill indexes alive (sorted by ID, all alive, all of group name) into g
// as of at; blk, when not nil, lends its arrays for a small group.
func (b *ViewBuilder) fill(g *groupIndex, name string, alive []*ServerLoad, at time.Time, blk *viewBlock) {
	pg := b.sameMembers(name, alive)
	if pg != nil {
		g.groupShape = pg.groupShape
	} else {
		b.shape(&g.groupShape, name, alive)
	}
	g.alive = alive
	g.latMedian, b.lat = medianStartLatency(alive, b.lat)
	// Heartbeats: in blk for a few hosts, else in the scratch first, to
	// share the previous view's array when no host's newest heartbeat
	// moved (most rebuilds follow a dispatch, not a heartbeat).
	nh := len(g.hosts)
	scratch := pg != nil && (blk == nil || nh > len(blk.beats))
	var beats []time.Time
	switch {
	case scratch:
		beats = slices.Grow(b.beats[:0], nh)[:nh]
		clear(beats)
		b.beats = beats
	case blk != nil && nh <= len(blk.beats):
		beats = blk.beats[:nh:nh]
	default:
		beats = make([]time.Time, nh)
	}
	g.zones = g.zones0
	own := false
	for i, s := range alive {
		if hb := &beats[g.hostOf[i]]; s.LastHeartbeat.After(*hb) {
			*hb = s.LastHeartbeat
		}
		if tripped(s, at, defaultBreaker) ||
			(s.ConsecutiveFailures > 0 && !s.LastFailure.IsZero() && at.Sub(s.LastFailure) < recentFailure) {
			if !own {
				// zones0 is shared: count in this view's own copy.
				if nz := len(g.zones0); blk != nil && nz <= len(blk.zones) {
					g.zones = blk.zones[:nz:nz]
				} else {
					g.zones = make([]zoneEntry, nz)
				}
				copy(g.zones, g.zones0)
				own = true
			}
			g.zones[g.zoneOf[i]].unhealthy++
		}
	}
	switch {
	case !scratch:
		g.heartbeat = beats
	case slices.Equal(pg.heartbeat, beats): // == on time.Time: the same representation
		g.heartbeat = pg.heartbeat
	default:
		g.heartbeat = slices.Clone(beats)
	}
}

// sameMembers returns the previous view's group called name when alive
// has exactly its membership (IDs, hosts and zones, in order), else nil.
func (b *ViewBuilder) sameMembers(name string, alive []*ServerLoad) *groupIndex {
	if b.prev == nil {
		return nil
	}
	pg := b.prev.indexedGroup(name)
	if pg == nil || len(pg.members) != 3*len(alive) {
		return nil
	}
	m := pg.members
	for i, s := range alive {
		if m[3*i] != string(s.ID) || m[3*i+1] != s.Host || m[3*i+2] != s.Zone {
			return nil
		}
	}
	return pg
}

// shape computes sh for alive (sorted by ID, all alive, of group name).
func (b *ViewBuilder) shape(sh *groupShape, name string, alive []*ServerLoad) {
	n := len(alive)
	sh.name = name
	idx := make([]int32, 2*n)
	sh.hostOf, sh.zoneOf = idx[:n:n], idx[n:]
	sh.members = nil
	if !b.once {
		sh.members = make([]string, 0, 3*n)
	}
	// Distinct host names: servers of one host are usually adjacent in ID
	// order, so drop repeats as they come, then sort and compact.
	names := b.names[:0]
	var zoneNames []string
	for _, s := range alive {
		if !b.once {
			sh.members = append(sh.members, string(s.ID), s.Host, s.Zone)
		}
		if len(names) == 0 || names[len(names)-1] != s.Host {
			names = append(names, s.Host)
		}
		if !slices.Contains(zoneNames, s.Zone) {
			zoneNames = append(zoneNames, s.Zone)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	slices.Sort(zoneNames)
	sh.hosts = make([]hostEntry, len(names))
	for i, h := range names {
		sh.hosts[i].name = h
	}
	sh.zones0 = make([]zoneEntry, len(zoneNames))
	for i, z := range zoneNames {
		sh.zones0[i].name = z
	}
	counts := slices.Grow(b.count[:0], len(names))[:len(names)]
	clear(counts)
	h := int32(-1)
	for i, s := range alive {
		if h < 0 || s.Host != alive[i-1].Host {
			h = int32(sort.SearchStrings(names, s.Host))
		}
		z := int32(sort.SearchStrings(zoneNames, s.Zone))
		sh.hostOf[i] = h
		sh.zoneOf[i] = z
		counts[h]++
		sh.zones0[z].n++
	}
	// Per-host server lists share one backing array.
	backing := make([]int32, n)
	off := 0
	for h := range sh.hosts {
		sh.hosts[h].servers = backing[off : off : off+int(counts[h])]
		off += int(counts[h])
	}
	for i := range alive {
		he := &sh.hosts[sh.hostOf[i]]
		he.servers = append(he.servers, int32(i))
	}
	sh.maxPerHost = 0
	for _, c := range counts {
		sh.maxPerHost = max(sh.maxPerHost, int(c))
	}
	clear(names) // keep no host names alive from the scratch
	b.names, b.count = names[:0], counts[:0]
	sh.fp = b.fingerprint(alive)
}

// fingerprint is the murmur3 128-bit hash of every alive server's ID and
// host, each followed by a zero byte, streamed through a reused buffer.
func (b *ViewBuilder) fingerprint(alive []*ServerLoad) [2]uint64 {
	if b.hash == nil {
		b.hash = murmur3.New128()
		b.fpBuf = make([]byte, 0, 512)
	}
	h := b.hash
	h.Reset()
	buf := b.fpBuf[:0]
	put := func(s string) {
		if len(buf)+len(s)+1 > cap(buf) {
			h.Write(buf)
			buf = buf[:0]
		}
		if len(s)+1 > cap(buf) {
			h.Write([]byte(s))
			s = ""
		}
		buf = append(buf, s...)
		buf = append(buf, 0)
	}
	for _, s := range alive {
		put(string(s.ID))
		put(s.Host)
	}
	h.Write(buf)
	var fp [2]uint64
	fp[0], fp[1] = h.Sum128()
	return fp
}

// errAt is alive[i].Errors[d], zero when absent; slowAt likewise for
// Slowdowns.
func (g *groupIndex) errAt(d, i int) DecayedCount {
	if e := g.alive[i].Errors; d < len(e) {
		return e[d]
	}
	return DecayedCount{}
}

func (g *groupIndex) slowAt(d, i int) DecayedCount {
	if e := g.alive[i].Slowdowns; d < len(e) {
		return e[d]
	}
	return DecayedCount{}
}

// index returns the server index of id in g, or false.
func (g *groupIndex) index(id ServerID) (int32, bool) {
	i, ok := slices.BinarySearchFunc(g.alive, id, cmpID)
	if !ok {
		return 0, false
	}
	return int32(i), true
}

// cmpID orders a server against an id by ID, for binary searches over
// ID-sorted server slices.
func cmpID(s *ServerLoad, id ServerID) int { return cmp.Compare(s.ID, id) }

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
// (the upper one of an even count), 0 when none has one. scratch is
// reused and returned (grown).
func medianStartLatency(ss []*ServerLoad, scratch []time.Duration) (time.Duration, []time.Duration) {
	l := scratch[:0]
	for _, s := range ss {
		if s.StartLatency > 0 {
			l = append(l, s.StartLatency)
		}
	}
	if len(l) == 0 {
		return 0, l
	}
	return SelectKth(l, len(l)/2), l
}

// SelectKth returns the k-th smallest element of d (0-based), what
// slices.Sort would put at d[k], reordering d: Hoare's quickselect with a
// median-of-three pivot, O(len(d)) on average, no allocation. (The load
// board's start-latency percentiles and the views' latency medians.)
func SelectKth(d []time.Duration, k int) time.Duration {
	lo, hi := 0, len(d)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		if d[mid] < d[lo] {
			d[mid], d[lo] = d[lo], d[mid]
		}
		if d[hi] < d[lo] {
			d[hi], d[lo] = d[lo], d[hi]
		}
		if d[hi] < d[mid] {
			d[hi], d[mid] = d[mid], d[hi]
		}
		pivot := d[mid]
		i, j := lo, hi
		for i <= j {
			for d[i] < pivot {
				i++
			}
			for d[j] > pivot {
				j--
			}
			if i <= j {
				d[i], d[j] = d[j], d[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return d[k]
		}
	}
	return d[k]
}
