package selection

import (
	"bytes"
	"slices"
	"time"
)

// TabletState is per-tablet mutable policy state, owned by one tablet
// actor (never shared between goroutines). The zero value is ready to use.
//
// It holds round-robin counters, Ribbon's server subset, and caches that
// make repeated decisions cheap: the tablet's rendezvous orders (keyed by
// group, salt and the group's membership fingerprint, so they survive new
// load views whose membership did not change) and scratch slices reused by
// every call. A TabletState may be reused for another tablet: caches are
// dropped when the tablet changes.
type TabletState struct {
	// RoundRobin is the round-robin counter of the round-robin,
	// ribbon-zone and clickhouse-round_robin policies.
	RoundRobin uint64

	key    []byte // tablet key the caches belong to
	keyTmp []byte
	buf    []byte // hash input scratch

	caches    [6]orderCache
	nextCache int
	pairs     []hashPair

	// marked holds the servers of the current call's history with their
	// mark* flags (distinct, only servers with a flag).
	marked []mark

	hostMarks []uint32
	hostEpoch uint32

	idx       []int32
	idx2      []int32
	dead      []int32 // adaptive: hosts of timed-out attempts (scratch)
	scores    []float64
	zoneStats []zoneStat
	flags     []uint8

	subset subsetState
	dist   distCache
}

type mark struct {
	i int32
	m uint8
}

type hashPair struct {
	h u128
	i int32
}

type orderKind uint8

const (
	kindServers orderKind = iota
	kindHosts
)

type orderCache struct {
	valid bool
	kind  orderKind
	group string
	salt  string
	fp    [2]uint64
	n     int // members when computed
	order []int32
}

// subsetState is Ribbon's ServerListSubsetFilter state.
type subsetState struct {
	members []ServerID
	at      time.Time
	group   string
	fp      [2]uint64
	init    bool
}

// distCache caches ClickHouse hostname distances per host index.
type distCache struct {
	valid bool
	mode  uint8
	local string
	group string
	fp    [2]uint64
	d     []int
}

// Clone returns a deep copy of st that shares no memory with it: decisions
// made with the copy (an explained route, say) leave st exactly as it was.
// (A plain struct copy would share the cached orders and the subset, and
// the copy's decisions would overwrite them in place.)
func (st *TabletState) Clone() *TabletState {
	c := *st
	c.key = slices.Clone(st.key)
	c.keyTmp = slices.Clone(st.keyTmp)
	c.buf = slices.Clone(st.buf)
	for i := range c.caches {
		c.caches[i].order = slices.Clone(st.caches[i].order)
	}
	c.pairs = slices.Clone(st.pairs)
	c.marked = slices.Clone(st.marked)
	c.hostMarks = slices.Clone(st.hostMarks)
	c.idx = slices.Clone(st.idx)
	c.idx2 = slices.Clone(st.idx2)
	c.dead = slices.Clone(st.dead)
	c.scores = slices.Clone(st.scores)
	c.zoneStats = slices.Clone(st.zoneStats)
	c.flags = slices.Clone(st.flags)
	c.subset.members = slices.Clone(st.subset.members)
	c.dist.d = slices.Clone(st.dist.d)
	return &c
}

// setTablet points the caches at t, dropping them if the tablet changed.
func (st *TabletState) setTablet(t Tablet) {
	st.keyTmp = appendTabletKey(st.keyTmp[:0], t)
	if bytes.Equal(st.key, st.keyTmp) && st.key != nil {
		return
	}
	st.key = append(st.key[:0], st.keyTmp...)
	for i := range st.caches {
		st.caches[i].valid = false
	}
	st.subset = subsetState{members: st.subset.members[:0]}
	st.dist.valid = false
}

// order returns a prefix of at least need elements (all when need ≥ the
// member count) of the rendezvous order (indices) of g's servers
// (kindServers) or hosts (kindHosts) for the current tablet and salt. It is
// cached: a prefix is computed by selection in O(n), the full order by a
// sort, and a later call needing more extends the cache.
func (st *TabletState) order(g *groupIndex, kind orderKind, salt string, need int) []int32 {
	n := len(g.alive)
	if kind == kindHosts {
		n = len(g.hosts)
	}
	need = min(max(need, 0), n)
	for i := range st.caches {
		c := &st.caches[i]
		if c.valid && c.kind == kind && c.fp == g.fp && c.salt == salt && c.group == g.name && c.n == n {
			if len(c.order) >= need {
				return c.order
			}
			c.valid = false // recompute longer below, in this slot
			st.nextCache = i
			break
		}
	}
	c := &st.caches[st.nextCache]
	st.nextCache = (st.nextCache + 1) % len(st.caches)
	c.valid, c.kind, c.group, c.salt, c.fp, c.n = true, kind, g.name, salt, g.fp, n
	st.pairs = slices.Grow(st.pairs[:0], n)[:n]
	st.buf = append(st.buf[:0], st.key...)
	kl := len(st.key)
	for i := 0; i < n; i++ {
		member := ""
		if kind == kindHosts {
			member = g.hosts[i].name
		} else {
			member = string(g.alive[i].ID)
		}
		st.pairs[i].i = int32(i)
		st.pairs[i].h, st.buf = hashMember(st.buf, kl, member, salt)
	}
	k := n
	if want := max(need, 16); want*4 < n {
		k = want
		selectSmallest(st.pairs, k)
	}
	// Indices are in ID (or host name) order, so index breaks hash ties
	// like RendezvousOrder's name order.
	slices.SortFunc(st.pairs[:k], cmpPair)
	c.order = slices.Grow(c.order[:0], k)[:k]
	for j := range c.order {
		c.order[j] = st.pairs[j].i
	}
	if cap(st.pairs) > 256 {
		st.pairs = nil // rarely needed again; keep TabletState small
	}
	return c.order
}

func cmpPair(a, b hashPair) int {
	if c := a.h.cmp(b.h); c != 0 {
		return c
	}
	return int(a.i - b.i)
}

// selectSmallest moves the k smallest pairs (by cmpPair) to p[:k], in no
// particular order: a bounded insertion into a sorted prefix, O(n) for
// random input.
func selectSmallest(p []hashPair, k int) {
	if k <= 0 || k >= len(p) {
		return
	}
	slices.SortFunc(p[:k], cmpPair)
	for j := k; j < len(p); j++ {
		if cmpPair(p[j], p[k-1]) >= 0 {
			continue
		}
		x := p[j]
		p[j] = p[k-1]
		m := k - 1
		for m > 0 && cmpPair(x, p[m-1]) < 0 {
			p[m] = p[m-1]
			m--
		}
		p[m] = x
	}
}

// newHostEpoch returns a fresh epoch for hostMarks sized n.
func (st *TabletState) newHostEpoch(n int) uint32 {
	if len(st.hostMarks) < n {
		st.hostMarks = make([]uint32, n+n/4)
		st.hostEpoch = 0
	}
	st.hostEpoch++
	if st.hostEpoch == 0 {
		clear(st.hostMarks)
		st.hostEpoch = 1
	}
	return st.hostEpoch
}
