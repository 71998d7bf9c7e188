package selection

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestBreaker(t *testing.T) {
	b := defaultBreaker
	for f, want := range map[int]time.Duration{0: 0, 2: 0, 3: 10 * time.Second, 4: 20 * time.Second, 5: 30 * time.Second, 40: 30 * time.Second} {
		if got := b.blackout(f); got != want {
			t.Errorf("blackout(%d) = %v want %v", f, got, want)
		}
	}
	big := breaker{threshold: 3, factor: time.Second, max: time.Hour}
	if got := big.blackout(100); got != time.Hour {
		t.Errorf("2^16 cap then max: %v", got)
	}
	if got := big.blackout(10); got != 128*time.Second {
		t.Errorf("2^7 s: %v", got)
	}
	s := srv("a:1/0", "a", withFailures(3, t0))
	if !tripped(s, t0.Add(9*time.Second), b) || tripped(s, t0.Add(10*time.Second), b) {
		t.Error("3 failures: tripped for 10 s")
	}
	s.ConsecutiveFailures = 2
	if tripped(s, t0, b) {
		t.Error("2 failures: not tripped")
	}
	s.ConsecutiveFailures = 0 // a success resets
	if tripped(s, t0, b) {
		t.Error("reset")
	}
	if tripped(srv("a", "a", withFailures(9, t0)), t0, breaker{}) {
		t.Error("threshold 0: no breaker")
	}
}

func rzProfile(mods ...func(*Options)) *Profile {
	p := profileFor(PolicyRibbonZone)
	p.Options.SubsetSize = 0
	for _, m := range mods {
		m(&p.Options)
	}
	return p
}

// zonesView: zone z has n[z] servers "z<z>-<i>" (own host each).
func zonesView(n []int, mod func(zone, i int, s *ServerLoad)) *LoadView {
	var ss []*ServerLoad
	for z, k := range n {
		for i := 0; i < k; i++ {
			name := fmt.Sprintf("z%d-%02d", z, i)
			s := srv(name+":1/0", name, withZone(fmt.Sprintf("zone%d", z)))
			if mod != nil {
				mod(z, i, s)
			}
			ss = append(ss, s)
		}
	}
	return view(ss...)
}

func zoneCounts(t *testing.T, p *Profile, v *LoadView, n int) map[string]int {
	t.Helper()
	pol := mustPolicy(t, p)
	r := rng(5)
	st := &TabletState{}
	out := map[string]int{}
	for k := 0; k < n; k++ {
		d, err := pol.Select(&Input{Tablet: tablet(k % 7), Profile: p, View: v, Rand: r, State: st, Now: t0})
		if err != nil {
			t.Fatal(err)
		}
		out[v.Server(d.Server).Zone]++
	}
	return out
}

func TestRibbonZoneAvoidance(t *testing.T) {
	p := rzProfile()
	// Low load everywhere: no zone removed; round robin over all servers.
	v := zonesView([]int{3, 3}, nil)
	c := zoneCounts(t, p, v, 600)
	if c["zone0"] < 250 || c["zone1"] < 250 {
		t.Errorf("low load: %v", c)
	}
	// zone0 loaded over the trigger (1 per server ≥ 0.2) and worst: avoided.
	v = zonesView([]int{3, 3}, func(z, i int, s *ServerLoad) {
		if z == 0 {
			s.InFlight = 1
		}
	})
	if c := zoneCounts(t, p, v, 300); c["zone0"] != 0 {
		t.Errorf("worst zone not avoided: %v", c)
	}
	// Trigger not reached (load 0.1 < 0.2): not avoided.
	v = zonesView([]int{10, 10}, func(z, i int, s *ServerLoad) {
		if z == 0 && i == 0 {
			s.InFlight = 1
		}
	})
	if c := zoneCounts(t, p, v, 400); c["zone0"] < 100 {
		t.Errorf("below trigger: %v", c)
	}
	// A higher trigger keeps a loaded zone.
	v = zonesView([]int{3, 3}, func(z, i int, s *ServerLoad) {
		if z == 0 {
			s.InFlight = 1
		}
	})
	if c := zoneCounts(t, rzProfile(func(o *Options) { o.ZoneTriggerLoad = 2 }), v, 300); c["zone0"] < 100 {
		t.Errorf("trigger 2: %v", c)
	}
	// Every server of zone1 tripped: zone1 removed (load −1 / blackout);
	// then the worst remaining zone is removed too and the pick is weighted
	// by instances over what remains.
	v = zonesView([]int{2, 2, 6}, func(z, i int, s *ServerLoad) {
		if z == 1 {
			s.ConsecutiveFailures, s.LastFailure = 5, t0
		}
	})
	c = zoneCounts(t, p, v, 2000)
	if c["zone1"] != 0 {
		t.Errorf("tripped zone used: %v", c)
	}
	// zone0 and zone2 tie at load 0: one is removed at random weighted by
	// instances (zone2 6/8), the other is used: zone0 used ~75%.
	if c["zone0"] < 1300 || c["zone0"] > 1700 {
		t.Errorf("worst-zone tie weighted by instances: %v", c)
	}
	// Blackout percentage: 2 of 3 tripped ≥ 0.5 → zone removed.
	v = zonesView([]int{3, 3, 3}, func(z, i int, s *ServerLoad) {
		if z == 0 && i < 2 {
			s.ConsecutiveFailures, s.LastFailure = 3, t0
		}
		if z == 2 {
			s.InFlight = 5
		}
	})
	c = zoneCounts(t, rzProfile(func(o *Options) { o.ZoneBlackoutPercent = 0.5 }), v, 300)
	if c["zone0"] != 0 || c["zone2"] != 0 || c["zone1"] != 300 {
		t.Errorf("blackout + worst: %v", c)
	}
	// Weighted zone choice among remaining: zone0 worst removed; zone1 (3)
	// vs zone2 (1) ≈ 3:1.
	v = zonesView([]int{2, 3, 1}, func(z, i int, s *ServerLoad) {
		if z == 0 {
			s.InFlight = 3
		}
	})
	c = zoneCounts(t, p, v, 4000)
	if c["zone0"] != 0 || c["zone1"] < 2800 || c["zone1"] > 3200 {
		t.Errorf("weighted by instances: %v", c)
	}
}

func TestRibbonAvailabilityRoundRobin(t *testing.T) {
	v := zonesView([]int{5}, func(z, i int, s *ServerLoad) {
		switch i {
		case 1:
			s.ConsecutiveFailures, s.LastFailure = 3, t0 // tripped
		case 3:
			s.InFlight = 4 // at the limit
		}
	})
	p := rzProfile(func(o *Options) { o.ActiveConnectionsLimit = 4 })
	pol := mustPolicy(t, p)
	st := &TabletState{}
	var seq []ServerID
	for k := 0; k < 9; k++ {
		d, err := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Rand: rng(1), State: st, Now: t0.Add(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		seq = append(seq, d.Server)
	}
	for k, id := range seq {
		if id == "z0-01:1/0" || id == "z0-03:1/0" {
			t.Fatalf("filtered server chosen: %v", seq)
		}
		if seq[(k+3)%9] != id {
			t.Fatalf("not round robin over the 3 eligible: %v", seq)
		}
	}
	if seq[0] == seq[1] || seq[1] == seq[2] || seq[0] == seq[2] {
		t.Fatalf("not a rotation: %v", seq)
	}
	// After the blackout the tripped server is eligible again.
	seen := map[ServerID]bool{}
	for k := 0; k < 8; k++ {
		d, _ := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Rand: rng(1), State: st, Now: t0.Add(11 * time.Second)})
		seen[d.Server] = true
	}
	if !seen["z0-01:1/0"] || seen["z0-03:1/0"] {
		t.Errorf("after blackout: %v", seen)
	}
	// All filtered: still a server (round robin over all).
	all := zonesView([]int{2}, func(z, i int, s *ServerLoad) { s.ConsecutiveFailures, s.LastFailure = 9, t0 })
	if _, err := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: all, Rand: rng(1), Now: t0}); err != nil {
		t.Errorf("all tripped: %v", err)
	}
	// No hedging.
	if _, err := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Rand: rng(1), Hedge: true,
		Attempts: []Attempt{att("z0-00:1/0", "z0-00", Pending)}}); !errors.Is(err, ErrNoHedge) {
		t.Errorf("hedge: %v", err)
	}
}

func TestRibbonSubset(t *testing.T) {
	v := hostsView(100, 1)
	p := profileFor(PolicyRibbonZone) // subsetSize 20
	pol := mustPolicy(t, p)
	st := &TabletState{}
	used := map[ServerID]bool{}
	for k := 0; k < 200; k++ {
		d, err := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Rand: rng(uint64(k)), State: st, Now: t0})
		if err != nil {
			t.Fatal(err)
		}
		used[d.Server] = true
	}
	if len(used) != 20 || len(st.subset.members) != 20 {
		t.Fatalf("subset of 20: used %d, members %d", len(used), len(st.subset.members))
	}
	members := append([]ServerID(nil), st.subset.members...)
	// Within the refresh interval the subset is stable.
	pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Rand: rng(9), State: st, Now: t0.Add(29 * time.Second)})
	if fmt.Sprint(members) != fmt.Sprint(st.subset.members) {
		t.Fatal("subset changed before the refresh interval")
	}
	// At refresh, healthy: force-evict floor(20 × 0.1) = 2 and refill.
	pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Rand: rng(9), State: st, Now: t0.Add(30 * time.Second)})
	kept := 0
	for _, m := range st.subset.members {
		for _, o := range members {
			if m == o {
				kept++
			}
		}
	}
	if kept != 18 || len(st.subset.members) != 20 {
		t.Fatalf("forced eviction: kept %d of 20, size %d", kept, len(st.subset.members))
	}
	// Members with pending > 0 or recent failures are dropped at refresh
	// (and counted against the forced eviction), the worst (most failures)
	// first; a dead member leaves at once.
	members = append([]ServerID(nil), st.subset.members...)
	var ss []*ServerLoad
	for _, s := range v.Servers {
		c := *s
		switch c.ID {
		case members[0]:
			c.InFlight = 1
		case members[1]:
			c.RecentFailures = []time.Time{t0.Add(59 * time.Second)}
		case members[2]:
			c.Alive = false
		}
		ss = append(ss, &c)
	}
	v2 := view(ss...)
	pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v2, Rand: rng(3), State: st, Now: t0.Add(60 * time.Second)})
	in := map[ServerID]bool{}
	for _, m := range st.subset.members {
		in[m] = true
	}
	if in[members[0]] || in[members[1]] || in[members[2]] || len(in) != 20 {
		t.Fatalf("unhealthy members kept: %v", st.subset.members)
	}
	kept = 0
	for _, m := range members[3:] {
		if in[m] {
			kept++
		}
	}
	if kept != 17 {
		t.Errorf("3 eliminated ≥ 2 forced: all 17 others should stay, kept %d", kept)
	}
	// Membership change (a member dies): refresh at once, never a dead one.
	members = append([]ServerID(nil), st.subset.members...)
	ss = nil
	for _, s := range v2.Servers {
		c := *s
		if c.ID == members[5] {
			c.Alive = false
		}
		ss = append(ss, &c)
	}
	v3 := view(ss...)
	for k := 0; k < 50; k++ {
		d, err := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v3, Rand: rng(uint64(k)), State: st, Now: t0.Add(61 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if d.Server == members[5] {
			t.Fatal("dead member chosen")
		}
	}
	for _, m := range st.subset.members {
		if m == members[5] {
			t.Fatal("dead member kept")
		}
	}
}

// Ribbon's ZoneAwareLoadBalancer picks inside the chosen zone with the
// zone's own AvailabilityFilteringRule, whose CompositePredicate falls back
// to alwaysTrue over the zone's servers: when every server of the chosen
// zone is at activeConnectionsLimit, the pick stays in that zone (round
// robin over its servers) even where another zone has servers below it.
func TestRibbonZoneAllOverLimitStaysInZone(t *testing.T) {
	// zone0: load 9/3 = 3 per server (worst, avoided) but two idle servers;
	// zone1: load 2 per server, every server at the limit 2.
	v := zonesView([]int{3, 3}, func(z, i int, s *ServerLoad) {
		switch {
		case z == 0 && i == 0:
			s.InFlight = 9
		case z == 1:
			s.InFlight = 2
		}
	})
	p := rzProfile(func(o *Options) { o.ActiveConnectionsLimit = 2 })
	c := zoneCounts(t, p, v, 300)
	if c["zone1"] != 300 {
		t.Errorf("picks outside the chosen zone: %v", c)
	}
	// Round robin over all of the zone's servers.
	pol := mustPolicy(t, p)
	st := &TabletState{}
	seen := map[ServerID]int{}
	for k := 0; k < 30; k++ {
		d, err := pol.Select(&Input{Tablet: tablet(2), Profile: p, View: v, Rand: rng(uint64(k)), State: st, Now: t0})
		if err != nil {
			t.Fatal(err)
		}
		seen[d.Server]++
	}
	if len(seen) != 3 || seen["z1-00:1/0"] != 10 || seen["z1-01:1/0"] != 10 || seen["z1-02:1/0"] != 10 {
		t.Errorf("not round robin over the zone: %v", seen)
	}
}
