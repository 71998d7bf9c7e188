package selection

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func adProfile(mods ...func(*Options)) *Profile {
	p := profileFor(PolicyAdaptive)
	for _, m := range mods {
		m(&p.Options)
	}
	return p
}

// modView copies base with mod applied to every server.
func modView(base *LoadView, mod func(s *ServerLoad)) *LoadView {
	var ss []*ServerLoad
	for _, s := range base.Servers {
		c := *s
		mod(&c)
		ss = append(ss, &c)
	}
	v := NewLoadView(ss, base.Decays, base.At)
	v.StartLatencyP50, v.StartLatencyP95, v.RecentDispatches, v.RecentHedges = base.StartLatencyP50, base.StartLatencyP95, base.RecentDispatches, base.RecentHedges
	return v
}

type adHarness struct {
	t   *testing.T
	p   *Profile
	tab Tablet
}

func (h adHarness) sel(v *LoadView, att []Attempt, hedge bool, seed uint64) (Decision, error) {
	return mustPolicy(h.t, h.p).Select(&Input{Tablet: h.tab, Profile: h.p, View: v, Attempts: att, Hedge: hedge,
		Rand: rng(seed), Now: t0, State: &TabletState{}})
}

func (h adHarness) must(v *LoadView, att []Attempt, hedge bool, seed uint64) Decision {
	h.t.Helper()
	d, err := h.sel(v, att, hedge, seed)
	if err != nil {
		h.t.Fatal(err)
	}
	return d
}

// wantHome fails the test unless, for each of 30 seeds, the scan goes to
// host home exactly when want is; what names the case.
func (h adHarness) wantHome(v *LoadView, home string, want bool, what string) {
	h.t.Helper()
	for seed := uint64(0); seed < 30; seed++ {
		if d := h.must(v, nil, false, seed); (d.Host == home) != want {
			h.t.Fatalf("%s: %s, home %s, want home %v", what, d.Host, home, want)
		}
	}
}

func TestAdaptiveHomeHost(t *testing.T) {
	v := hostsView(10, 3)
	for k := 0; k < 50; k++ {
		tab := tablet(k)
		home := HomeHost(tab, v, "default")
		if order := HostOrder(tab, v, "default"); order[0] != home || len(order) != 10 {
			t.Fatalf("HostOrder %v home %s", order, home)
		}
		h := adHarness{t, adProfile(), tab}
		servers := map[ServerID]bool{}
		for seed := uint64(0); seed < 60; seed++ {
			d := h.must(v, nil, false, seed)
			if d.Host != home {
				t.Fatalf("tablet %d: %s not home %s", k, d.Host, home)
			}
			servers[d.Server] = true
		}
		if len(servers) != 3 {
			t.Fatalf("idle home host: picks should spread over its 3 servers: %v", servers)
		}
	}
}

func TestAdaptiveQueueAwareSpill(t *testing.T) {
	base := hostsView(6, 2)
	tab := tablet(3)
	order := HostOrder(tab, base, "")
	home, next := order[0], order[1]
	h := adHarness{t, adProfile(), tab}
	// One home server loaded: its sibling takes the scans.
	v := modView(base, func(s *ServerLoad) {
		if s.Host == home && s.ID[len(s.ID)-1] == '0' {
			s.InFlight = 3
		}
	})
	for seed := uint64(0); seed < 30; seed++ {
		if d := h.must(v, nil, false, seed); d.Host != home || d.Server[len(d.Server)-1] != '1' {
			t.Fatalf("sibling: %+v", d)
		}
	}
	// Home host loaded beyond spillCost (4) + band (1): spill to the next host.
	v = modView(base, func(s *ServerLoad) {
		if s.Host == home {
			s.QueueLen = 6
		}
	})
	for seed := uint64(0); seed < 30; seed++ {
		if d := h.must(v, nil, false, seed); d.Host != next {
			t.Fatalf("spill: %s, want %s", d.Host, next)
		}
	}
	// Loaded but within spillCost + band: stay home.
	v = modView(base, func(s *ServerLoad) {
		if s.Host == home {
			s.QueueLen = 5
		}
	})
	for seed := uint64(0); seed < 30; seed++ {
		if d := h.must(v, nil, false, seed); d.Host != home {
			t.Fatalf("within spillCost: %s", d.Host)
		}
	}
	// Workers scale the queue: 6 queued over 4 workers is 1.5 per worker.
	v = modView(base, func(s *ServerLoad) {
		s.Workers = 4
		if s.Host == home {
			s.QueueLen = 6
		}
	})
	if d := h.must(v, nil, false, 1); d.Host != home {
		t.Errorf("workers: %s", d.Host)
	}
	// Drained: back home.
	if d := h.must(base, nil, false, 1); d.Host != home {
		t.Errorf("drained: %s", d.Host)
	}
	// Home and next both loaded: the third host.
	v = modView(base, func(s *ServerLoad) {
		if s.Host == home || s.Host == next {
			s.InFlight = 10
		}
	})
	if d := h.must(v, nil, false, 1); d.Host != order[2] {
		t.Errorf("third host: %s want %s", d.Host, order[2])
	}
	// All top hosts tripped: fallback finds another host.
	v = modView(base, func(s *ServerLoad) {
		if s.Host == home || s.Host == next || s.Host == order[2] {
			s.ConsecutiveFailures, s.LastFailure = 5, t0
		}
	})
	for seed := uint64(0); seed < 30; seed++ {
		d := h.must(v, nil, false, seed)
		if d.Host == home || d.Host == next || d.Host == order[2] {
			t.Fatalf("fallback: %s", d.Host)
		}
	}
}

// TestAdaptiveInFlightWeight: with every server reporting the same load,
// the scans this coordinator has in flight on the home server count
// inFlightWeight (4) times beside the report, so two of them send the
// scan away; with inFlightWeight 0 (the default) only the larger of the
// report and our own count is scored, and the scan stays home.
func TestAdaptiveInFlightWeight(t *testing.T) {
	tab := tablet(5)
	base := hostsView(6, 1, func(s *ServerLoad) { s.Workers, s.Active = 4, 4 })
	order := HostOrder(tab, base, "")
	v := modView(base, func(s *ServerLoad) {
		if s.Host == order[0] {
			s.InFlight = 2
		}
	})
	noSpill := func(o *Options) { o.SpillCost = 0 }
	h := adHarness{t, adProfile(noSpill, func(o *Options) { o.InFlightWeight = 4 }), tab}
	for seed := uint64(0); seed < 30; seed++ {
		if d := h.must(v, nil, false, seed); d.Host != order[1] {
			t.Fatalf("inFlightWeight %v: %s, want %s (home %s)", h.p.Options.InFlightWeight, d.Host, order[1], order[0])
		}
	}
	h = adHarness{t, adProfile(noSpill), tab}
	for seed := uint64(0); seed < 30; seed++ {
		if d := h.must(v, nil, false, seed); d.Host != order[0] {
			t.Fatalf("inFlightWeight 0: %s, want home %s", d.Host, order[0])
		}
	}
}

// TestAdaptiveHomeBand: with no cost of leaving home and the home server
// two queued scans (half a scan per worker) above the others, the default
// homeBand (1) keeps the scan home; homeBand 0 sends it to the shortest
// queue; homeBand 0.4 still leaves home (0.5 > 0.4).
func TestAdaptiveHomeBand(t *testing.T) {
	tab := tablet(5)
	base := hostsView(6, 1, func(s *ServerLoad) { s.Workers, s.Active = 4, 4 })
	order := HostOrder(tab, base, "")
	v := modView(base, func(s *ServerLoad) {
		if s.Host == order[0] {
			s.QueueLen = 2
		}
	})
	noSpill := func(o *Options) { o.SpillCost = 0 }
	for _, c := range []struct {
		band float64
		home bool
	}{{1, true}, {0, false}, {0.4, false}, {0.6, true}} {
		h := adHarness{t, adProfile(noSpill, func(o *Options) { o.HomeBand = c.band }), tab}
		h.wantHome(v, order[0], c.home, fmt.Sprintf("homeBand %v", c.band))
	}
}

// TestAdaptiveLatencyWeight: the home server's start latency is 1.4
// medians, below what the slowness term counts (1.5 medians of the
// servers' estimates, the p95): with latencyWeight 0 the scan stays home;
// with 3 it scores 1.2 more, beyond the home band (1), and goes away.
func TestAdaptiveLatencyWeight(t *testing.T) {
	tab := tablet(5)
	base := hostsView(6, 1, func(s *ServerLoad) { s.Workers, s.Active, s.StartLatency = 4, 4, time.Millisecond })
	base.StartLatencyP50, base.StartLatencyP95 = time.Millisecond, 5*time.Millisecond
	order := HostOrder(tab, base, "")
	v := modView(base, func(s *ServerLoad) {
		if s.Host == order[0] {
			s.StartLatency = 1400 * time.Microsecond
		}
	})
	noSpill := func(o *Options) { o.SpillCost = 0 }
	for _, c := range []struct {
		weight float64
		home   bool
	}{{0, true}, {3, false}, {2, true}} {
		h := adHarness{t, adProfile(noSpill, func(o *Options) { o.LatencyWeight = c.weight }), tab}
		h.wantHome(v, order[0], c.home, fmt.Sprintf("latencyWeight %v", c.weight))
	}
}

func TestAdaptiveAvoidance(t *testing.T) {
	base := hostsView(6, 2)
	tab := tablet(8)
	order := HostOrder(tab, base, "")
	home := order[0]
	h := adHarness{t, adProfile(), tab}
	s0, s1 := ServerID(home+":1000/0"), ServerID(home+":1000/1")
	// Busy on a home server in this scan: the sibling next.
	for seed := uint64(0); seed < 20; seed++ {
		d := h.must(base, []Attempt{att(s0, home, Busy)}, false, seed)
		if d.Server != s1 {
			t.Fatalf("after busy: %v", d.Server)
		}
	}
	// Both home servers busy in this scan: next host; error delay applies.
	d := h.must(base, []Attempt{att(s0, home, Busy), att(s1, home, Error)}, false, 1)
	if d.Host != order[1] || d.Delay != 100*time.Millisecond || d.BusyTimeout != 33*time.Millisecond {
		t.Errorf("home exhausted: %+v", d)
	}
	// Decayed errors on one home server: mostly avoided (score +2, weight
	// e^-4 of its sibling's), never starved of every sample.
	v := modView(base, func(s *ServerLoad) {
		if s.ID == s0 {
			s.Errors = []DecayedCount{{Count: 1, Origin: t0}, {Count: 1, Origin: t0}}
		}
	})
	n0 := 0
	for seed := uint64(0); seed < 400; seed++ {
		d := h.must(v, nil, false, seed)
		if d.Host != home {
			t.Fatalf("errors: left home %v", d.Server)
		}
		if d.Server == s0 {
			n0++
		}
	}
	if n0 == 0 || n0 > 20 {
		t.Fatalf("errors: the erroring server got %d of 400 picks, want a few (about 2%%)", n0)
	}
	// With 2 errors (+4): more than 3 worse, nothing.
	v = modView(base, func(s *ServerLoad) {
		if s.ID == s0 {
			s.Errors = []DecayedCount{{Count: 2, Origin: t0}, {Count: 2, Origin: t0}}
		}
	})
	for seed := uint64(0); seed < 100; seed++ {
		if d := h.must(v, nil, false, seed); d.Server != s1 {
			t.Fatalf("2 errors: %v", d.Server)
		}
	}
	// ... until they decay away: adaptive's errorHalfLife is 5 s, so two
	// half-lives clear them (with ClickHouse's 60 s they would still count).
	seen := map[ServerID]bool{}
	for seed := uint64(0); seed < 40; seed++ {
		d, err := mustPolicy(t, h.p).Select(&Input{Tablet: tab, Profile: h.p, View: v, Rand: rng(seed), Now: t0.Add(10 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		seen[d.Server] = true
	}
	if !seen[s0] {
		t.Error("decayed errors still avoided")
	}
	// Busy answers (decayed) are avoided too, but count at most 2 (+2,
	// like one error): the server is not starved of every sample.
	v = modView(base, func(s *ServerLoad) {
		if s.ID == s0 {
			s.Busy = []DecayedCount{{Count: 8, Origin: t0}, {Count: 8, Origin: t0}}
		}
	})
	n0 = 0
	for seed := uint64(0); seed < 400; seed++ {
		d := h.must(v, nil, false, seed)
		if d.Host != home {
			t.Fatalf("busy count: left home %v", d.Server)
		}
		if d.Server == s0 {
			n0++
		}
	}
	if n0 == 0 || n0 > 20 {
		t.Fatalf("busy count: the busy server got %d of 400 picks, want a few (about 2%%)", n0)
	}
	// Slowdown counts grow with traffic under p95 hedging: they do not
	// move traffic (the start-latency estimate does).
	v = modView(base, func(s *ServerLoad) {
		if s.ID == s1 {
			s.Slowdowns = []DecayedCount{{Count: 8, Origin: t0}, {Count: 8, Origin: t0}}
		}
	})
	seen = map[ServerID]bool{}
	for seed := uint64(0); seed < 40; seed++ {
		seen[h.must(v, nil, false, seed).Server] = true
	}
	if !seen[s0] || !seen[s1] {
		t.Errorf("slowdown counts moved traffic: %v", seen)
	}
	// Slow start latency relative to the fleet median.
	v = modView(base, func(s *ServerLoad) {
		if s.ID == s0 {
			s.StartLatency = 50 * time.Millisecond
		}
	})
	v.StartLatencyP50, v.StartLatencyP95 = 5*time.Millisecond, 10*time.Millisecond
	if d := h.must(v, nil, false, 3); d.Server != s1 {
		t.Errorf("start latency: %v", d.Server)
	}
	// ... an estimate that is long without new samples is forgotten:
	// it decays toward the fleet median (StartLatencyForget).
	v = modView(base, func(s *ServerLoad) {
		if s.ID == s0 {
			s.StartLatency, s.StartLatencyAt = 50*time.Millisecond, t0.Add(-time.Minute)
		}
	})
	v.StartLatencyP50, v.StartLatencyP95 = 2*time.Millisecond, 10*time.Millisecond
	if got := v.StartLatencyOf(v.Server(s0), t0); got > 3*time.Millisecond {
		t.Errorf("a minute-old 50ms estimate is still %v", got)
	}
	if got := v.StartLatencyOf(v.Server(s0), t0.Add(-time.Minute)); got != 50*time.Millisecond {
		t.Errorf("a fresh estimate changed: %v", got)
	}
	seen = map[ServerID]bool{}
	for seed := uint64(0); seed < 40; seed++ {
		seen[h.must(v, nil, false, seed).Server] = true
	}
	if !seen[s0] {
		t.Error("a server slow a minute ago is still shunned")
	}
	// A timeout (no answer at all) means the host process may be hung:
	// the retry leaves the host instead of trying the sibling.
	for seed := uint64(0); seed < 20; seed++ {
		d := h.must(base, []Attempt{att(s0, home, Timeout)}, false, seed)
		if d.Host == home {
			t.Fatalf("after a timeout the retry stayed on the host: %v", d.Server)
		}
		d = h.must(base, []Attempt{att(s0, home, Stalled)}, false, seed)
		if d.Host == home {
			t.Fatalf("after a stall the retry stayed on the host: %v", d.Server)
		}
	}
	// Stale heartbeat of the home host (process paused): leave it.
	v = modView(base, func(s *ServerLoad) {
		if s.Host == home {
			s.LastHeartbeat = t0.Add(-3 * time.Second)
		}
	})
	if d := h.must(v, nil, false, 1); d.Host == home {
		t.Errorf("stale home host: %v", d.Server)
	}
	// Circuit breaker: tripped home servers are skipped ...
	v = modView(base, func(s *ServerLoad) {
		if s.Host == home {
			s.ConsecutiveFailures, s.LastFailure = 3, t0
		}
	})
	if d := h.must(v, nil, false, 1); d.Host == home {
		t.Errorf("tripped: %v", d.Server)
	}
	// ... for adaptive's short blackout (breakerTimeoutFactor 1 s; Ribbon's
	// 10 s would still hold them).
	v = modView(base, func(s *ServerLoad) {
		if s.Host == home {
			s.ConsecutiveFailures, s.LastFailure = 3, t0.Add(-2*time.Second)
		}
	})
	if d := h.must(v, nil, false, 1); d.Host != home {
		t.Errorf("blackout over: %v", d.Server)
	}
}

func TestAdaptiveZoneAvoidance(t *testing.T) {
	tab := tablet(12)
	base := hostsView(6, 2)
	order := HostOrder(tab, base, "")
	home, next := order[0], order[1]
	// Zone A: home + 1 other host, half of zone A's servers failing; zone B: the rest.
	zoneOf := map[string]string{home: "A", order[2]: "A"}
	v := modView(base, func(s *ServerLoad) {
		s.Zone = "B"
		if z, ok := zoneOf[s.Host]; ok {
			s.Zone = z
		}
		if s.Host == order[2] {
			s.ConsecutiveFailures, s.LastFailure = 1, t0.Add(-time.Second)
		}
	})
	h := adHarness{t, adProfile(), tab}
	// Zone A: 2 of 4 servers unhealthy ≥ 0.5 → avoided: home costs 8, the
	// next host (zone B) costs spillCost 4.
	for seed := uint64(0); seed < 20; seed++ {
		if d := h.must(v, nil, false, seed); d.Host != next {
			t.Fatalf("zone avoidance: %s want %s", d.Host, next)
		}
	}
	// A higher blackout percentage keeps the zone.
	h.p = adProfile(func(o *Options) { o.ZoneBlackoutPercent = 0.9 })
	if d := h.must(v, nil, false, 1); d.Host != home {
		t.Errorf("blackout 0.9: %s", d.Host)
	}
	// A single zone is never avoided.
	h.p = adProfile()
	one := modView(v, func(s *ServerLoad) { s.Zone = "A" })
	if d := h.must(one, nil, false, 1); d.Host != home {
		t.Errorf("single zone: %s", d.Host)
	}
}

func TestAdaptiveHedging(t *testing.T) {
	base := hostsView(6, 2)
	tab := tablet(30)
	order := HostOrder(tab, base, "")
	home := order[0]
	s0, s1 := ServerID(home+":1000/0"), ServerID(home+":1000/1")
	h := adHarness{t, adProfile(), tab}
	// Learned hedge delay.
	for p95, want := range map[time.Duration]time.Duration{0: 50 * time.Millisecond, time.Millisecond: 3 * time.Millisecond,
		30 * time.Millisecond: 30 * time.Millisecond, 5 * time.Second: time.Second} {
		v := modView(base, func(*ServerLoad) {})
		v.StartLatencyP95 = p95
		d := h.must(v, nil, false, 1)
		if d.HedgeDelay != want || d.DataTimeout != want {
			t.Errorf("p95 %v: delay %v/%v want %v", p95, d.HedgeDelay, d.DataTimeout, want)
		}
	}
	// Hedge to the sibling on the same host first.
	slow := []Attempt{att(s0, home, Slow)}
	for seed := uint64(0); seed < 20; seed++ {
		d := h.must(base, slow, true, seed)
		if d.Server != s1 || d.Delay != 0 {
			t.Fatalf("sibling hedge: %+v", d)
		}
	}
	// Second hedge (sibling in flight too): another host.
	two := append(slow[:1:1], Attempt{Server: s1, Host: home, Result: Pending, Hedge: true})
	if d := h.must(base, two, true, 1); d.Host == home {
		t.Errorf("second hedge on the same host: %v", d.Server)
	}
	// Sibling with a slow start-latency estimate: off-host.
	v := modView(base, func(s *ServerLoad) {
		if s.ID == s1 {
			s.StartLatency, s.StartLatencyAt = 40*time.Millisecond, t0
		}
	})
	v.StartLatencyP95 = 10 * time.Millisecond
	if d := h.must(v, slow, true, 1); d.Host == home {
		t.Errorf("slow sibling: %v", d.Server)
	}
	// Sibling with errors: off-host.
	v = modView(base, func(s *ServerLoad) {
		if s.ID == s1 {
			s.Errors = []DecayedCount{{Count: 1, Origin: t0}, {Count: 1, Origin: t0}}
		}
	})
	if d := h.must(v, slow, true, 1); d.Host == home {
		t.Errorf("erroring sibling: %v", d.Server)
	}
	// Host heartbeat stale (host process paused): off-host.
	v = modView(base, func(s *ServerLoad) {
		if s.Host == home {
			s.LastHeartbeat = t0.Add(-3 * time.Second)
		}
	})
	if d := h.must(v, slow, true, 1); d.Host == home {
		t.Errorf("stale host: %v", d.Server)
	}
	// Budget: 5 hedges of 100 dispatches = 5% → declined; 4 → allowed.
	v = modView(base, func(*ServerLoad) {})
	v.RecentDispatches, v.RecentHedges = 100, 5
	if _, err := h.sel(v, slow, true, 1); !errors.Is(err, ErrNoHedge) {
		t.Errorf("budget spent: %v", err)
	}
	v.RecentHedges = 4
	if _, err := h.sel(v, slow, true, 1); err != nil {
		t.Errorf("budget left: %v", err)
	}
	v.RecentDispatches, v.RecentHedges = 0, 0
	if _, err := h.sel(v, slow, true, 1); err != nil {
		t.Errorf("no history: %v", err)
	}
	h.p = adProfile(func(o *Options) { o.HedgeBudget = 0.5 })
	v.RecentDispatches, v.RecentHedges = 100, 20
	if _, err := h.sel(v, slow, true, 1); err != nil {
		t.Errorf("budget 0.5: %v", err)
	}
	// Hedge off.
	h.p = adProfile(func(o *Options) { o.Hedge = false })
	if d := h.must(base, nil, false, 1); d.HedgeDelay != 0 || d.DataTimeout != 0 {
		t.Errorf("hedge off: %+v", d)
	}
	if _, err := h.sel(base, slow, true, 1); !errors.Is(err, ErrNoHedge) {
		t.Errorf("hedge off: %v", err)
	}
	// Only in-flight servers left: ErrNoHedge.
	h.p = adProfile()
	one := hostsView(1, 2)
	both := []Attempt{att("h000:1000/0", "h000", Slow), att("h000:1000/1", "h000", Pending)}
	if _, err := h.sel(one, both, true, 1); !errors.Is(err, ErrNoHedge) {
		t.Errorf("nothing left: %v", err)
	}
}

// TestAdaptiveSilence: a server holding a scan of ours without answering
// counts its silence as start latency (a pause shows in milliseconds, not
// when the paused scans finally answer); a host none of whose servers
// answered since is left whole, also by hedges; a silence older than
// adSilenceMemory no longer counts.
func TestAdaptiveSilence(t *testing.T) {
	base := hostsView(6, 2)
	base.StartLatencyP50, base.StartLatencyP95 = time.Millisecond, 3*time.Millisecond
	tab := tablet(8)
	home := HostOrder(tab, base, "")[0]
	h := adHarness{t, adProfile(), tab}
	s0, s1 := ServerID(home+":1000/0"), ServerID(home+":1000/1")
	silent := func(since, siblingAnswer time.Duration) *LoadView {
		return modView(base, func(s *ServerLoad) {
			switch s.ID {
			case s0:
				s.UnansweredSince, s.LastAnswer = t0.Add(-since), t0.Add(-time.Minute)
			case s1:
				s.LastAnswer = t0.Add(-siblingAnswer)
			}
		})
	}
	picks := func(v *LoadView) (n0, away int) {
		for seed := uint64(0); seed < 200; seed++ {
			d := h.must(v, nil, false, seed)
			if d.Server == s0 {
				n0++
			}
			if d.Host != home {
				away++
			}
		}
		return n0, away
	}
	// s0 silent for 20 ms (p95 3 ms), its sibling answered 1 ms ago: the
	// sibling.
	if n0, away := picks(silent(20*time.Millisecond, time.Millisecond)); n0 != 0 || away != 0 {
		t.Errorf("silent server: %d picks of 200, %d away from home", n0, away)
	}
	// Silent for less than the p95: normal, both share.
	if n0, away := picks(silent(2*time.Millisecond, time.Millisecond)); n0 < 40 || away != 0 {
		t.Errorf("2 ms silence: %d picks of 200 (want about half), %d away", n0, away)
	}
	// The sibling had nothing to answer: still not suspect.
	if n0, away := picks(silent(20*time.Millisecond, 20*time.Millisecond)); n0 != 0 || away != 0 {
		t.Errorf("silent server, idle sibling: %d picks of 200, %d away from home", n0, away)
	}
	// Both servers of the host silent: the host is left.
	both := modView(base, func(s *ServerLoad) {
		if s.Host == home {
			s.UnansweredSince = t0.Add(-30 * time.Millisecond)
		}
	})
	if _, away := picks(both); away != 200 {
		t.Errorf("silent host: only %d of 200 left it", away)
	}
	// A silence that began longer ago than adSilenceMemory is not counted.
	if n0, away := picks(silent(adSilenceMemory+time.Second, 20*time.Second)); n0 < 40 || away != 0 {
		t.Errorf("old silence: %d picks of 200, %d away", n0, away)
	}
	// Hedging an attempt the silent host never started: off the host; the
	// sibling when the host answered after the attempt was sent.
	pending := []Attempt{{Server: s0, Host: home, Result: Pending, Start: t0.Add(-6 * time.Millisecond)}}
	for seed := uint64(0); seed < 20; seed++ {
		if d := h.must(silent(6*time.Millisecond, 20*time.Millisecond), pending, true, seed); d.Host == home {
			t.Fatalf("hedge of a silent host stayed on it: %v", d.Server)
		}
		if d := h.must(silent(6*time.Millisecond, time.Millisecond), pending, true, seed); d.Server != s1 {
			t.Fatalf("hedge with an answering sibling: %v, want %v", d.Server, s1)
		}
	}
}

// TestAdaptiveSlowHost: a whole slow host can set the fleet p95 itself (a
// quarter of the scans), so its servers are compared with the median
// of the servers' estimates too: leave a home host whose estimates are 5
// times the others'; stay on one whose estimates are in a healthy
// server's ordinary spread.
func TestAdaptiveSlowHost(t *testing.T) {
	base := hostsView(4, 2, func(s *ServerLoad) { s.StartLatency, s.StartLatencyAt = 1200*time.Microsecond, t0 })
	base.StartLatencyP50, base.StartLatencyP95 = 1200*time.Microsecond, 6*time.Millisecond
	tab := tablet(8)
	home := HostOrder(tab, base, "")[0]
	h := adHarness{t, adProfile(), tab}
	for _, c := range []struct {
		lat  time.Duration
		home bool
	}{{6 * time.Millisecond, false}, {2500 * time.Microsecond, true}} {
		v := modView(base, func(s *ServerLoad) {
			if s.Host == home {
				s.StartLatency, s.StartLatencyAt = c.lat, t0
			}
		})
		for seed := uint64(0); seed < 50; seed++ {
			if d := h.must(v, nil, false, seed); (d.Host == home) != c.home {
				t.Fatalf("home estimates %v: picked %v (home %s), want home %v", c.lat, d.Server, home, c.home)
			}
		}
	}
}

// TestAdaptiveSlowMemory: a whole slow host is remembered longer
// (adSlowForget) than one server's outlier (StartLatencyForget): 3 s after
// their last samples of 6 ms (others 1.2 ms) a slow host is still left,
// while a lone slow server is tried again.
func TestAdaptiveSlowMemory(t *testing.T) {
	base := hostsView(4, 2, func(s *ServerLoad) { s.StartLatency, s.StartLatencyAt = 1200*time.Microsecond, t0 })
	tab := tablet(8)
	home := HostOrder(tab, base, "")[0]
	s0 := ServerID(home + ":1000/0")
	h := adHarness{t, adProfile(), tab}
	old := t0.Add(-3 * time.Second)
	host := modView(base, func(s *ServerLoad) {
		if s.Host == home {
			s.StartLatency, s.StartLatencyAt = 6*time.Millisecond, old
		}
	})
	one := modView(base, func(s *ServerLoad) {
		if s.ID == s0 {
			s.StartLatency, s.StartLatencyAt = 6*time.Millisecond, old
		}
	})
	n0 := 0
	for seed := uint64(0); seed < 200; seed++ {
		if d := h.must(host, nil, false, seed); d.Host == home {
			t.Fatalf("slow host 3 s ago: picked %v at home", d.Server)
		}
		if h.must(one, nil, false, seed).Server == s0 {
			n0++
		}
	}
	if n0 == 0 {
		t.Error("a lone server slow 3 s ago got no scan of 200")
	}
}
