package selection

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestBusyTimeoutA5(t *testing.T) {
	p := profileFor(PolicyAccumulo)
	want := []time.Duration{33 * time.Millisecond, 33 * time.Millisecond, 33 * time.Millisecond,
		264 * time.Millisecond, 2112 * time.Millisecond, 16896 * time.Millisecond, 135168 * time.Millisecond,
		300 * time.Second, 300 * time.Second, 300 * time.Second}
	for a, w := range want {
		if got := busyTimeoutA5(p, p.AttemptPlans, a); got != w {
			t.Errorf("attempts=%d: %v, want %v", a, got, w)
		}
	}
	if got := busyTimeoutA5(p, p.AttemptPlans, 1000000); got != 300*time.Second {
		t.Errorf("huge attempts: %v", got)
	}
	// Multiplier absent (0): wait forever after the plans.
	p.BusyTimeoutMultiplier = 0
	if got := busyTimeoutA5(p, p.AttemptPlans, 3); got != 0 {
		t.Errorf("multiplier 0: %v", got)
	}
	// Multiplier 1: stays; no cap given: uncapped and no overflow.
	p.BusyTimeoutMultiplier = 1
	if got := busyTimeoutA5(p, p.AttemptPlans, 50); got != 33*time.Millisecond {
		t.Errorf("multiplier 1: %v", got)
	}
	p.BusyTimeoutMultiplier, p.MaxBusyTimeout = 10, 0
	if got := busyTimeoutA5(p, p.AttemptPlans, 100); got <= 0 {
		t.Errorf("uncapped overflowed: %v", got)
	}
}

func TestErrorDelayA6(t *testing.T) {
	want := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
		800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond,
		12800 * time.Millisecond, 25600 * time.Millisecond, 30 * time.Second, 30 * time.Second}
	for e, w := range want {
		if got := errorDelay(e); got != w {
			t.Errorf("errors=%d: %v want %v", e, got, w)
		}
	}
	if errorDelay(1000) != 30*time.Second {
		t.Error("cap")
	}
}

// accumulo: plan index, subset, exclusion, pick, timeouts, delay.
func TestAccumuloRules(t *testing.T) {
	v := hostsView(20, 2)
	p := profileFor(PolicyAccumulo)
	pol := mustPolicy(t, p)
	tab := tablet(7)
	st := &TabletState{}
	group := v.group("default").alive
	subsets := make([][]*ServerLoad, 3)
	for i, plan := range p.AttemptPlans {
		subsets[i] = RendezvousOrder(tab, group, plan.Salt)[:plan.Servers.Count(len(group))]
	}
	in := func(a []Attempt) *Input {
		return &Input{Tablet: tab, Profile: p, Attempts: a, View: v, Now: t0, Rand: rng(1), State: st}
	}
	in0 := func(a []Attempt) Decision {
		d, err := pol.Select(in(a))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	inSubset := func(id ServerID, sub []*ServerLoad) bool {
		for _, s := range sub {
			if s.ID == id {
				return true
			}
		}
		return false
	}
	// Rule 2+3: attempts → plan index → subset of that plan.
	var history []Attempt
	results := []AttemptResult{Busy, Error, Busy, Timeout, Busy}
	for k := 0; k <= len(results); k++ {
		d := in0(history)
		wantPlan := min(k, 2)
		if d.PlanIndex != wantPlan {
			t.Fatalf("attempts=%d plan %d want %d", k, d.PlanIndex, wantPlan)
		}
		if !inSubset(d.Server, subsets[wantPlan]) {
			t.Fatalf("attempts=%d: %s not in plan %d subset", k, d.Server, wantPlan)
		}
		if d.BusyTimeout != busyTimeoutA5(p, p.AttemptPlans, k) {
			t.Errorf("attempts=%d busy %v", k, d.BusyTimeout)
		}
		errs := 0
		for _, a := range history {
			if a.Result.IsError() {
				errs++
			}
		}
		if d.Delay != errorDelay(errs) {
			t.Errorf("attempts=%d delay %v want %v", k, d.Delay, errorDelay(errs))
		}
		if k < len(results) {
			history = append(history, att(d.Server, d.Host, results[k]))
		}
	}
	// Rule 4: servers already tried are removed from the subset.
	sub := subsets[0]
	h := []Attempt{att(sub[0].ID, sub[0].Host, Busy), att(sub[1].ID, sub[1].Host, Busy)}
	for seed := uint64(0); seed < 50; seed++ {
		// plan 2 = 100% — force plan 0 by hand: a profile whose plans all use subset 0.
		p1 := profileFor(PolicyAccumulo)
		p1.AttemptPlans = []AttemptPlan{{Servers: ServerCount{N: 3}, BusyTimeout: time.Second, Salt: "one"}}
		d, err := accumuloPolicy{p1}.Select(&Input{Tablet: tab, Profile: p1, Attempts: h, View: v, Rand: rng(seed), State: st})
		if err != nil || d.Server != sub[2].ID {
			t.Fatalf("seed %d: got %v %v, want the only untried %s", seed, d.Server, err, sub[2].ID)
		}
		// All three tried: the whole subset again.
		h3 := append(h[:2:2], att(sub[2].ID, sub[2].Host, Busy))
		d, err = accumuloPolicy{p1}.Select(&Input{Tablet: tab, Profile: p1, Attempts: h3, View: v, Rand: rng(seed), State: st})
		if err != nil || !inSubset(d.Server, sub) {
			t.Fatalf("seed %d: exhausted subset gave %v %v", seed, d.Server, err)
		}
	}
	// Uniform pick within the subset.
	counts := map[ServerID]int{}
	r := rng(9)
	for k := 0; k < 3000; k++ {
		d, _ := pol.Select(&Input{Tablet: tab, Profile: p, View: v, Rand: r, State: st})
		counts[d.Server]++
	}
	if len(counts) != 3 {
		t.Fatalf("picks outside subset: %v", counts)
	}
	for id, n := range counts {
		if n < 900 || n > 1100 {
			t.Errorf("%s picked %d/3000", id, n)
		}
	}
	// Explain lists the subset in hash order.
	ein := in(nil)
	ein.Explain = true
	d, _ := pol.Select(ein)
	if len(d.Candidates) != 3 || d.Candidates[0] != sub[0].ID || d.Candidates[2] != sub[2].ID {
		t.Errorf("candidates %v", d.Candidates)
	}
	if d2, _ := pol.Select(in(nil)); d2.Candidates != nil {
		t.Error("candidates filled without Explain")
	}
	// No hedging.
	hin := in(nil)
	hin.Hedge = true
	if _, err := pol.Select(hin); !errors.Is(err, ErrNoHedge) {
		t.Errorf("hedge: %v", err)
	}
}

func TestAccumuloHostPlanHosts(t *testing.T) {
	// Plan hosts are the first N distinct hosts of the salted server order.
	v := hostsView(10, 3)
	p := profileFor(PolicyAccumuloHost)
	p.AttemptPlans = []AttemptPlan{{Servers: ServerCount{N: 4}, BusyTimeout: time.Second, Salt: "s"}}
	tab := tablet(3)
	order := RendezvousOrder(tab, v.group("").alive, "s")
	var want []string
	for _, s := range order {
		dup := false
		for _, h := range want {
			dup = dup || h == s.Host
		}
		if !dup && len(want) < 4 {
			want = append(want, s.Host)
		}
	}
	seen := map[string]bool{}
	for seed := uint64(0); seed < 400; seed++ {
		d, err := mustPolicy(t, p).Select(&Input{Tablet: tab, Profile: p, View: v, Rand: rng(seed), Explain: seed == 0})
		if err != nil {
			t.Fatal(err)
		}
		seen[d.Host] = true
		if seed == 0 {
			if len(d.Candidates) != 12 || v.Server(d.Candidates[0]).Host != want[0] || v.Server(d.Candidates[11]).Host != want[3] {
				t.Errorf("candidates %v, hosts %v", d.Candidates, want)
			}
		}
	}
	if len(seen) != 4 {
		t.Errorf("hosts used %v, want %v", seen, want)
	}
	for _, h := range want {
		if !seen[h] {
			t.Errorf("host %s never chosen", h)
		}
	}
	// "50%" of 10 hosts = 5 hosts.
	p.AttemptPlans[0].Servers = ServerCount{Percent: 50}
	seen = map[string]bool{}
	for seed := uint64(0); seed < 400; seed++ {
		d, _ := mustPolicy(t, p).Select(&Input{Tablet: tab, Profile: p, View: v, Rand: rng(seed)})
		seen[d.Host] = true
	}
	if len(seen) != 5 {
		t.Errorf("50%% of 10 hosts used %d hosts", len(seen))
	}
}

func TestAccumuloHostExhaustion(t *testing.T) {
	// One plan host with 3 servers: the host stays until all 3 failed.
	v := hostsView(6, 3)
	p := profileFor(PolicyAccumuloHost)
	p.AttemptPlans = []AttemptPlan{
		{Servers: ServerCount{N: 1}, BusyTimeout: 10 * time.Millisecond},
		{Servers: ServerCount{N: 2}, BusyTimeout: 20 * time.Millisecond},
	}
	p.BusyTimeoutMultiplier = 8
	pol := mustPolicy(t, p)
	tab := tablet(11)
	st := &TabletState{}
	var h []Attempt
	var first string
	usedServers := map[ServerID]bool{}
	for k := 0; k < 3; k++ {
		d, err := pol.Select(&Input{Tablet: tab, Profile: p, Attempts: h, View: v, Rand: rng(uint64(k)), State: st})
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			first = d.Host
		}
		if d.Host != first || d.PlanIndex != 0 || d.BusyTimeout != 10*time.Millisecond {
			t.Fatalf("attempt %d: %+v (host %s plan 0 expected)", k, d, first)
		}
		if usedServers[d.Server] {
			t.Fatalf("attempt %d retried %s", k, d.Server)
		}
		usedServers[d.Server] = true
		h = append(h, att(d.Server, d.Host, []AttemptResult{Busy, Error, Timeout}[k]))
	}
	// Host exhausted: plan 1, the other host of plan 1.
	var second string
	for k := 0; k < 3; k++ {
		d, err := pol.Select(&Input{Tablet: tab, Profile: p, Attempts: h, View: v, Rand: rng(uint64(k)), State: st})
		if err != nil {
			t.Fatal(err)
		}
		if d.PlanIndex != 1 || d.Host == first || d.BusyTimeout != 20*time.Millisecond {
			t.Fatalf("after exhaustion: %+v", d)
		}
		if second == "" {
			second = d.Host
		}
		if d.Host != second || usedServers[d.Server] {
			t.Fatalf("attempt %d on %s", k, d.Server)
		}
		usedServers[d.Server] = true
		h = append(h, att(d.Server, d.Host, Busy))
	}
	// Everything exhausted: last plan's hosts, history ignored, timeout of
	// the last plan (no multiplier, no cap), delay per the error delay rule (1 error).
	for seed := uint64(0); seed < 20; seed++ {
		d, err := pol.Select(&Input{Tablet: tab, Profile: p, Attempts: h, View: v, Rand: rng(seed), State: st})
		if err != nil {
			t.Fatal(err)
		}
		if d.PlanIndex != 1 || (d.Host != first && d.Host != second) || d.BusyTimeout != 20*time.Millisecond || d.Delay != 100*time.Millisecond {
			t.Fatalf("wrapped: %+v", d)
		}
	}
}

// docs/policies.md (accumulo-host) seed example: plans [{1, 10s}, {3, 30s}]; host32 has :1000
// and :1001; host32 chosen, :1001 picked → busy → host32 again, :1000 →
// busy → plan 2: three hosts (host32, host40, host09), a non-exhausted one
// (host09) picked, a server on it → success.
func TestAccumuloHostSeedExample(t *testing.T) {
	names := []string{"host32", "host40", "host09", "host11", "host77", "host05"}
	var ss []*ServerLoad
	for _, h := range names {
		ss = append(ss, srv(h+":1000", h), srv(h+":1001", h))
	}
	v := view(ss...)
	ps, err := ParseProfiles([]byte(`[{"isDefault":true,"policy":"accumulo-host",
	  "attemptPlans":[{"servers":"1","busyTimeout":"10s"},{"servers":"3","busyTimeout":"30s"}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	p := ps.Default()
	pol := ps.Policy(p)
	// Find a tablet whose plan-1 host is host32 and plan-2 hosts are
	// {host32, host40, host09}.
	var tab Tablet
	found := false
	for i := 0; i < 5000 && !found; i++ {
		tab = tablet(i)
		order := RendezvousOrder(tab, v.group("").alive, "")
		var hosts []string
		for _, s := range order {
			dup := false
			for _, h := range hosts {
				dup = dup || h == s.Host
			}
			if !dup {
				hosts = append(hosts, s.Host)
			}
		}
		found = hosts[0] == "host32" && ((hosts[1] == "host40" && hosts[2] == "host09") || (hosts[1] == "host09" && hosts[2] == "host40"))
	}
	if !found {
		t.Fatal("no tablet maps to host32, host40, host09")
	}
	exact := 0
	for seed := uint64(1); seed <= 300; seed++ {
		r := rng(seed)
		st := &TabletState{}
		sel := func(h []Attempt) Decision {
			d, err := pol.Select(&Input{Tablet: tab, Profile: p, Attempts: h, View: v, Rand: r, State: st})
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		d1 := sel(nil)
		if d1.Host != "host32" || d1.PlanIndex != 0 || d1.BusyTimeout != 10*time.Second {
			t.Fatalf("seed %d first: %+v", seed, d1)
		}
		h := []Attempt{att(d1.Server, d1.Host, Busy)}
		d2 := sel(h)
		if d2.Host != "host32" || d2.Server == d1.Server || d2.PlanIndex != 0 || d2.BusyTimeout != 10*time.Second {
			t.Fatalf("seed %d second: %+v", seed, d2)
		}
		h = append(h, att(d2.Server, d2.Host, Busy))
		d3 := sel(h)
		if (d3.Host != "host40" && d3.Host != "host09") || d3.PlanIndex != 1 || d3.BusyTimeout != 30*time.Second {
			t.Fatalf("seed %d third: %+v", seed, d3)
		}
		if d1.Server == "host32:1001" && d3.Host == "host09" {
			exact++
		}
	}
	if exact == 0 {
		t.Error("no seed reproduced the exact example path (:1001, :1000, host09)")
	}
}

// docs/policies.md, accumulo-host: 100 scans of one tablet that maps to one host with 5
// servers spread evenly across those 5 servers.
func TestAccumuloHostEvenSpread(t *testing.T) {
	v := hostsView(8, 5)
	p := profileFor(PolicyAccumuloHost)
	p.AttemptPlans = []AttemptPlan{{Servers: ServerCount{N: 1}, BusyTimeout: 33 * time.Millisecond}}
	pol := mustPolicy(t, p)
	for _, n := range []int{100, 10000} {
		r := rng(42)
		counts := map[ServerID]int{}
		hosts := map[string]bool{}
		for k := 0; k < n; k++ {
			// 100 independent clients: each its own scan (no history).
			d, err := pol.Select(&Input{Tablet: tablet(5), Profile: p, View: v, Rand: r, State: &TabletState{}})
			if err != nil {
				t.Fatal(err)
			}
			counts[d.Server]++
			hosts[d.Host] = true
		}
		if len(hosts) != 1 || len(counts) != 5 {
			t.Fatalf("n=%d: hosts %v servers %v", n, hosts, counts)
		}
		for id, c := range counts {
			lo, hi := n/5-n/10, n/5+n/10 // ±50% at 100, ±2.5% of n at 10000
			if n == 10000 {
				lo, hi = n/5-n/40, n/5+n/40
			}
			if c < lo || c > hi {
				t.Errorf("n=%d: %s got %d, want %d..%d", n, id, c, lo, hi)
			}
		}
	}
	// With the default profile (3/13/100%) the first plan's 3 hosts each
	// get about a third.
	d := DefaultProfiles()
	counts := map[string]int{}
	r := rng(7)
	for k := 0; k < 3000; k++ {
		dec, _ := d.Policy(d.Default()).Select(&Input{Tablet: tablet(5), Profile: d.Default(), View: v, Rand: r})
		counts[dec.Host]++
	}
	if len(counts) != 3 {
		t.Fatalf("default profile hosts %v", counts)
	}
	for h, c := range counts {
		if c < 850 || c > 1150 {
			t.Errorf("default profile: host %s got %d/3000", h, c)
		}
	}
}

func TestAccumuloHostNoHedgeNoServer(t *testing.T) {
	pol := DefaultProfiles().Policy(DefaultProfiles().Default())
	p := DefaultProfiles().Default()
	if _, err := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: view(), Rand: rng(1)}); !errors.Is(err, ErrNoServer) {
		t.Errorf("empty view: %v", err)
	}
	v := view(srv("a:1/0", "a", withGroup("other")), srv("b:1/0", "b", dead()))
	if _, err := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Rand: rng(1)}); !errors.Is(err, ErrNoServer) {
		t.Errorf("no live server in group: %v", err)
	}
	v = hostsView(3, 2)
	if _, err := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Rand: rng(1), Hedge: true,
		Attempts: []Attempt{att("h000:1000/0", "h000", Pending)}}); !errors.Is(err, ErrNoHedge) {
		t.Errorf("hedge: %v", err)
	}
}

func ExampleHomeHost() {
	v := NewLoadView([]*ServerLoad{
		{ID: "a:1/0", Host: "a", Group: "default", Alive: true},
		{ID: "b:1/0", Host: "b", Group: "default", Alive: true},
		{ID: "b:1/1", Host: "b", Group: "default", Alive: true},
		{ID: "c:1/0", Host: "c", Group: "default", Alive: true},
	}, nil, time.Time{})
	tab := Tablet{Table: "t", EndRow: []byte("m")}
	fmt.Println(HomeHost(tab, v, "default"), HostOrder(tab, v, "default"))
	// Output: b [b c a]
}
