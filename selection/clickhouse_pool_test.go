package selection

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// chPoolRun drives one pool like ClickHouse's PoolWithFailoverBase: at each
// query time it reads the tallies the view would carry then (errors
// counted at the given times), and returns the counts of the last query.
type chEvent struct {
	at     time.Duration // since t0
	server int
	errors uint32
	slows  uint32
}

type chPoolHarness struct {
	t        *testing.T
	pool     *chPool
	servers  []*ServerLoad
	errs     []DecayedCount
	slows    []DecayedCount
	events   []chEvent
	halfLife time.Duration
	cap      uint32
}

func newChPoolHarness(t *testing.T, n int, halfLife time.Duration, limit uint32, events ...chEvent) *chPoolHarness {
	h := &chPoolHarness{t: t, pool: &chPool{}, halfLife: halfLife, cap: limit, events: events,
		errs: make([]DecayedCount, n), slows: make([]DecayedCount, n)}
	for i := 0; i < n; i++ {
		h.servers = append(h.servers, srv(fmt.Sprintf("s%d:9000/0", i), fmt.Sprintf("s%d", i)))
	}
	return h
}

// query applies the events up to at (as the coordinator counts them into
// the view's tallies) and runs a query at t0+at.
func (h *chPoolHarness) query(at time.Duration, commit bool) []uint32 {
	h.t.Helper()
	rest := h.events[:0:0]
	for _, e := range h.events {
		if e.at > at {
			rest = append(rest, e)
			continue
		}
		now := t0.Add(e.at)
		h.errs[e.server] = h.errs[e.server].Add(now, clickhouseTally, e.errors)
		h.slows[e.server] = h.slows[e.server].Add(now, clickhouseTally, e.slows)
	}
	h.events = rest
	var ss []*ServerLoad
	for i, s := range h.servers {
		c := *s
		c.Errors = []DecayedCount{{}, h.errs[i]}
		c.Slowdowns = []DecayedCount{{}, h.slows[i]}
		ss = append(ss, &c)
	}
	v := NewLoadView(ss, []DecayParams{DefaultDecay, clickhouseTally}, t0.Add(at))
	g := v.group("")
	out := h.pool.query(g, 1, t0.Add(at), h.halfLife, h.cap, commit)
	if out == nil {
		out = make([]uint32, 2*len(g.alive))
	}
	return out
}

// TestClickHousePoolClock ports ClickHouse's updateErrorCounts
// (src/Common/PoolWithFailoverBase.h, called by updatePoolStates at the
// start of every getMany): one clock per pool (last_error_decrease_time),
// set at the first query, and when a query finds k ≥ 1 whole half-lives
// since it, every count is shifted right by k and the clock is set to the
// query time (the rest of the period is dropped). Errors of a query are
// added at its end (updateSharedErrorCounts), i.e. before the next
// query's halving. The expected counts are worked out by hand from that
// code. A per-counter grid (each counter halving every half-life since
// its own first error, as view.go's DecayedCount does) gives
// [0 2 1 1 1] here, which is not ClickHouse's answer.
func TestClickHousePoolClock(t *testing.T) {
	s := time.Second
	h := newChPoolHarness(t, 5, 60*s, 1000,
		chEvent{at: 5 * s, server: 3, errors: 4},   // t=70: 4→2; t=140: 2→1
		chEvent{at: 100 * s, server: 4, errors: 1}, // t=140: 1→0 (grid from 100 s: still 1 at 150)
		chEvent{at: 142 * s, server: 1, errors: 2}, // after the last halving
		chEvent{at: 145 * s, server: 2, errors: 1}) // after the last halving
	var got []uint32
	for _, at := range []time.Duration{0, 70 * s, 140 * s, 150 * s} {
		got = h.query(at, true)
	}
	if want := []uint32{0, 2, 1, 1, 0}; !slices.Equal(got[:5], want) {
		t.Errorf("errors at 150 s = %v, want %v (ClickHouse)", got[:5], want)
	}
	// The per-counter grid differs: the pool needs its own clock.
	var grid []uint32
	for _, tally := range h.errs {
		grid = append(grid, tally.Value(t0.Add(150*s), DefaultDecay))
	}
	if want := []uint32{0, 2, 1, 1, 1}; !slices.Equal(grid, want) {
		t.Errorf("per-counter grid = %v, want %v", grid, want)
	}

	// The clock restarts at the halving query: 2 errors at 1 s are 1 after
	// the query at 70 s, still 1 at 129 s (59 s later; a grid from 0 or
	// from 1 s would be at 0 already), 0 at 131 s.
	h = newChPoolHarness(t, 1, 60*s, 1000, chEvent{at: 1 * s, server: 0, errors: 2})
	for _, c := range []struct {
		at   time.Duration
		want uint32
	}{{0, 0}, {70 * s, 1}, {129 * s, 1}, {131 * s, 0}} {
		if got := h.query(c.at, true)[0]; got != c.want {
			t.Errorf("remainder dropped: at %v errors %d, want %d", c.at, got, c.want)
		}
	}

	// No query, no halving: the clock only moves at queries, so a count
	// seen after a long quiet spell is shifted once by all whole periods
	// (8 errors, next query 150 s later: 8 >> 2 = 2), and shifts of 32 or
	// more clear it.
	h = newChPoolHarness(t, 2, 60*s, 1000, chEvent{at: 1 * s, server: 0, errors: 8}, chEvent{at: 1 * s, server: 1, errors: 1000})
	h.query(0, true)
	if got := h.query(150*s, true); got[0] != 2 || got[1] != 250 {
		t.Errorf("quiet spell: %v, want [2 250]", got[:2])
	}
	if got := h.query(150*s+40*60*s, true); got[0] != 0 || got[1] != 0 {
		t.Errorf("shift ≥ 32: %v", got[:2])
	}

	// errorCap caps errors as they are added (min(max_error_cap, count +
	// new)); slowdowns are not capped. A cap of 0 is uncapped.
	h = newChPoolHarness(t, 1, 60*s, 1000, chEvent{at: 1 * s, server: 0, errors: 700, slows: 1500}, chEvent{at: 2 * s, server: 0, errors: 700})
	h.query(0, true)
	if got := h.query(3*s, true); got[0] != 1000 || got[1] != 1500 {
		t.Errorf("cap: errors %d slowdowns %d, want 1000 1500", got[0], got[1])
	}
	h = newChPoolHarness(t, 1, 60*s, 0, chEvent{at: 1 * s, server: 0, errors: 5000})
	h.query(0, true)
	if got := h.query(3*s, true); got[0] != 5000 {
		t.Errorf("cap 0: %d", got[0])
	}
	// errorHalfLife 0: never halves.
	h = newChPoolHarness(t, 1, 0, 1000, chEvent{at: 1 * s, server: 0, errors: 5})
	h.query(0, true)
	if got := h.query(1000*s, true); got[0] != 5 {
		t.Errorf("half-life 0: %d", got[0])
	}
}

// TestClickHousePoolState: reads without commit (Explain) change nothing,
// errors before the pool saw a replica are its baseline, a stale view does
// not count errors twice, and a restarted tally (reset or a new
// registration: a newer origin) counts in full.
func TestClickHousePoolState(t *testing.T) {
	s := time.Second
	h := newChPoolHarness(t, 1, 60*s, 1000, chEvent{at: 1 * s, server: 0, errors: 4})
	h.query(0, true)
	// An Explain at 70 s shows the halving (4 → 2) but does not move the
	// clock: the query at 100 s halves from 0 s, and the next halving
	// needs 60 s from 100 s.
	if got := h.query(70*s, false); got[0] != 2 {
		t.Errorf("explain at 70 s: %d, want 2", got[0])
	}
	if got := h.query(100*s, true); got[0] != 2 {
		t.Errorf("query at 100 s: %d, want 2", got[0])
	}
	if got := h.query(159*s, true); got[0] != 2 {
		t.Errorf("query at 159 s: %d, want 2 (clock at 100 s)", got[0])
	}
	if got := h.query(160*s, true); got[0] != 1 {
		t.Errorf("query at 160 s: %d, want 1", got[0])
	}

	// Baseline: 3 errors before the first query do not count.
	h = newChPoolHarness(t, 1, 60*s, 1000, chEvent{at: 0, server: 0, errors: 3}, chEvent{at: 2 * s, server: 0, errors: 1})
	if got := h.query(1*s, true); got[0] != 0 {
		t.Errorf("baseline: %d", got[0])
	}
	if got := h.query(3*s, true); got[0] != 1 {
		t.Errorf("after baseline: %d, want 1", got[0])
	}

	// A stale view (smaller tally, same origin) adds nothing, and the newer
	// view after it adds nothing again.
	g := func(n uint32, origin time.Time) *groupIndex {
		v := chTallyView([]*ServerLoad{srv("a:1/0", "a")}, []uint32{n}, []uint32{0}, origin)
		return v.group("")
	}
	p := &chPool{}
	q := func(gi *groupIndex, at time.Duration) uint32 {
		out := p.query(gi, 1, t0.Add(at), time.Minute, 1000, true)
		if out == nil {
			return 0
		}
		return out[0]
	}
	q(g(0, time.Time{}), 0)
	v1, v2 := g(1, t0), g(3, t0)
	if got := q(v2, s); got != 3 {
		t.Errorf("v2: %d", got)
	}
	if got := q(v1, 2*s); got != 3 {
		t.Errorf("stale v1: %d", got)
	}
	if got := q(g(3, t0), 3*s); got != 3 {
		t.Errorf("v2 again: %d", got)
	}
	// Restarted (newer origin) with 2: adds 2.
	if got := q(g(2, t0.Add(4*s)), 5*s); got != 5 {
		t.Errorf("restarted tally: %d, want 5", got)
	}
}
