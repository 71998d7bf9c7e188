package coordinator

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/scanplane/scanplane/internal/actorenv"
	"github.com/scanplane/scanplane/selection"
)

// LoadBoard publishes the coordinator's immutable selection.LoadView. Host
// actors replace their host's servers; tablet actors read snapshots without
// blocking (an atomic load). A snapshot is rebuilt when something changed,
// but not more often than every max(minStale, 2 × the last rebuild's cost):
// under constant traffic on a large cluster rebuilding stays a bounded
// share of one core, at the price of counters up to a few ms stale. It is
// also rebuilt every refresh period for the time-windowed figures. Safe for
// concurrent use.
type LoadBoard struct {
	now      func() time.Time
	refresh  time.Duration
	minStale time.Duration
	cost     atomic.Int64 // ns the last rebuild took
	// onRebuild, when set (before the board is used), is told every
	// rebuild's cost (CoordMetrics).
	onRebuild func(time.Duration)
	// env measures the rebuild's cost (CoordinatorConfig.Env).
	env actorenv.Env

	mu    sync.Mutex
	hosts map[string][]*selection.ServerLoad
	// order lists the hosts by their smallest server ID (firsts), so that
	// a rebuild hands the view its servers nearly sorted by ID and the
	// view's sort has little left to do (it was most of a rebuild's time
	// at 1000 servers in random map order).
	order  []hostKey
	firsts map[string]selection.ServerID
	// decays is replaced, never changed in place: views share it.
	decays []selection.DecayParams
	// views builds the snapshots, sharing with the previous one what did
	// not change (the membership's host and zone indices).
	views selection.ViewBuilder
	lat   []time.Duration // ring of recent start latencies
	// latScratch: rebuild's copy of lat for selecting percentiles.
	latScratch []time.Duration
	blockTimes selection.BlockTimes
	latNext    int
	latFull    bool
	// latTotal counts the start latencies ever recorded; latP50 and
	// latP95 are the percentiles rebuild last selected, when latTotal was
	// latAt (latSelects counts the selections).
	latTotal, latAt uint64
	latP50, latP95  time.Duration
	latSelects      int
	window          [10]struct {
		sec               int64
		dispatches, hedge uint64
	}

	dirty atomic.Bool
	cur   atomic.Pointer[selection.LoadView]
}

// latSelectEvery: a rebuild selects the start-latency percentiles again
// once 1/latSelectEvery of the ring's samples (at least one) were
// recorded since the last selection; in between a view carries the last
// ones, which miss at most that share of the samples.
const latSelectEvery = 32

// NewLoadBoard returns an empty board. now is injected for tests.
func NewLoadBoard(now func() time.Time, decays []selection.DecayParams) *LoadBoard {
	b := &LoadBoard{now: now, refresh: 100 * time.Millisecond, minStale: time.Millisecond, hosts: map[string][]*selection.ServerLoad{},
		firsts: map[string]selection.ServerID{},
		decays: slices.Clone(decays), lat: make([]time.Duration, 1024)}
	b.dirty.Store(true)
	return b
}

// SetHost replaces the servers of one host (nil removes the host). The
// board takes ownership of the slice and its elements.
func (b *LoadBoard) SetHost(host string, servers []*selection.ServerLoad) {
	var first selection.ServerID
	for i, s := range servers {
		if i == 0 || s.ID < first {
			first = s.ID
		}
	}
	b.mu.Lock()
	if old, had := b.firsts[host]; !had || servers == nil || old != first {
		if had {
			if i, ok := slices.BinarySearchFunc(b.order, hostKey{old, host}, cmpHostKey); ok {
				b.order = slices.Delete(b.order, i, i+1)
			}
			delete(b.firsts, host)
		}
		if servers != nil {
			k := hostKey{first, host}
			i, _ := slices.BinarySearchFunc(b.order, k, cmpHostKey)
			b.order = slices.Insert(b.order, i, k)
			b.firsts[host] = first
		}
	}
	if servers == nil {
		delete(b.hosts, host)
	} else {
		b.hosts[host] = servers
	}
	b.mu.Unlock()
	b.dirty.Store(true)
}

// hostKey orders the board's hosts: by smallest server ID, then name.
type hostKey struct {
	first selection.ServerID
	host  string
}

func cmpHostKey(a, b hostKey) int {
	if c := strings.Compare(string(a.first), string(b.first)); c != 0 {
		return c
	}
	return strings.Compare(a.host, b.host)
}

// SetDecays changes the decay parameters the view carries.
func (b *LoadBoard) SetDecays(d []selection.DecayParams) {
	b.mu.Lock()
	b.decays = slices.Clone(d)
	b.mu.Unlock()
	b.dirty.Store(true)
}

// Decays returns the decay parameters in use.
func (b *LoadBoard) Decays() []selection.DecayParams {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.decays)
}

// RecordStartLatency adds one dispatch → first data latency.
func (b *LoadBoard) RecordStartLatency(d time.Duration) {
	b.mu.Lock()
	b.lat[b.latNext] = d
	b.latTotal++
	b.latNext++
	if b.latNext == len(b.lat) {
		b.latNext, b.latFull = 0, true
	}
	b.mu.Unlock()
}

// RecordBlockTime adds one finished scan's server time per block read,
// at home or away from its tablet's home host (selection.BlockTimes).
func (b *LoadBoard) RecordBlockTime(p selection.Placement, perBlock time.Duration) {
	b.mu.Lock()
	b.blockTimes.Record(p, perBlock)
	b.mu.Unlock()
}

// CountDispatch counts a primary dispatch or a hedge in the 10 s window.
func (b *LoadBoard) CountDispatch(hedge bool) {
	sec := b.now().Unix()
	b.mu.Lock()
	w := &b.window[sec%int64(len(b.window))]
	if w.sec != sec {
		w.sec, w.dispatches, w.hedge = sec, 0, 0
	}
	if hedge {
		w.hedge++
	} else {
		w.dispatches++
	}
	b.mu.Unlock()
}

// Latest returns the last snapshot built, without rebuilding (nil before
// the first View): for readers that only need slowly changing figures.
func (b *LoadBoard) Latest() *selection.LoadView { return b.cur.Load() }

// View returns the current snapshot.
func (b *LoadBoard) View() *selection.LoadView {
	v := b.cur.Load()
	if v != nil && b.fresh(v, b.now()) {
		return v
	}
	return b.rebuild()
}

// fresh reports whether snapshot v may still be served at now.
func (b *LoadBoard) fresh(v *selection.LoadView, now time.Time) bool {
	age := now.Sub(v.At)
	if age < 0 || age >= b.refresh {
		return age < 0
	}
	if !b.dirty.Load() {
		return true
	}
	return age < max(b.minStale, 2*time.Duration(b.cost.Load()))
}

func (b *LoadBoard) rebuild() *selection.LoadView {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if v := b.cur.Load(); v != nil && b.fresh(v, now) {
		return v // another goroutine rebuilt it meanwhile
	}
	start := time.Now()
	defer func() {
		d := b.env.Since(start)
		b.cost.Store(int64(d))
		if b.onRebuild != nil {
			b.onRebuild(d)
		}
	}()
	b.dirty.Store(false)
	n := 0
	for _, s := range b.hosts {
		n += len(s)
	}
	servers := make([]*selection.ServerLoad, 0, n)
	for _, k := range b.order {
		servers = append(servers, b.hosts[k.host]...)
	}
	v := b.views.Build(servers, b.decays, now)
	// p50 and p95 of recent start latencies.
	m := b.latNext
	if b.latFull {
		m = len(b.lat)
	}
	if m >= 20 {
		// Two selections in a reused buffer, not a sort, and only once
		// latSelectEvery of the ring's samples are new since the last:
		// a rebuild runs up to once per scan, on the path from a
		// ScanRequest to its StartScan, and one sample moves the
		// percentiles of the ring's m little.
		if b.latSelects == 0 || b.latTotal-b.latAt >= uint64(max(1, m/latSelectEvery)) {
			b.latScratch = append(b.latScratch[:0], b.lat[:m]...)
			b.latP50 = selection.SelectKth(b.latScratch, m/2)
			b.latP95 = selection.SelectKth(b.latScratch, (m*95)/100)
			b.latAt = b.latTotal
			b.latSelects++
		}
		v.StartLatencyP50, v.StartLatencyP95 = b.latP50, b.latP95
	}
	sec := now.Unix()
	for _, w := range b.window {
		if w.sec > sec-int64(len(b.window)) && w.sec <= sec {
			v.RecentDispatches += w.dispatches
			v.RecentHedges += w.hedge
		}
	}
	v.BlockTimes = b.blockTimes
	b.cur.Store(v)
	return v
}
