package selection

import (
	"errors"
	"testing"
	"time"
)

func chProfile(mode string, mods ...func(*Options)) *Profile {
	p := profileFor("clickhouse-" + mode)
	for _, m := range mods {
		m(&p.Options)
	}
	return p
}

func chSelect(t *testing.T, p *Profile, in Input) (Decision, error) {
	t.Helper()
	in.Profile = p
	if in.Rand == nil {
		in.Rand = rng(1)
	}
	if in.Now.IsZero() {
		in.Now = t0
	}
	return mustPolicy(t, p).Select(&in)
}

func TestHostnameDistances(t *testing.T) {
	cases := []struct {
		a, b        string
		diff, leven int
	}{
		{"abc01", "abc02", 1, 1},
		{"abc01", "xyz01", 3, 3},
		{"abc01", "abc0", 0, 1},
		{"ABC01", "abc01", 3, 0},
		{"host-a", "Host-AB", 2, 1},
		{"", "abc", 0, 3},
		{"kitten", "sitting", 2, 3},
	}
	for _, c := range cases {
		if got := hostnameDifference(c.a, c.b); got != c.diff {
			t.Errorf("difference(%q,%q) = %d want %d", c.a, c.b, got, c.diff)
		}
		if got := levenshteinFold(c.a, c.b); got != c.leven {
			t.Errorf("levenshtein(%q,%q) = %d want %d", c.a, c.b, got, c.leven)
		}
	}
}

func TestClickHouseModePriority(t *testing.T) {
	v := view(srv("abc02:1/0", "abc02"), srv("xyz01:1/0", "xyz01"), srv("abc0:1/0", "abc0"), srv("ABC01:1/0", "ABC01"))
	for seed := uint64(0); seed < 20; seed++ {
		d, err := chSelect(t, chProfile("nearest_hostname"), Input{Tablet: tablet(1), View: v, LocalHost: "abc01", Rand: rng(seed)})
		if err != nil || d.Server != "abc0:1/0" {
			t.Fatalf("nearest_hostname: %v %v", d.Server, err)
		}
		d, err = chSelect(t, chProfile("hostname_levenshtein_distance"), Input{Tablet: tablet(1), View: v, LocalHost: "abc01", Rand: rng(seed)})
		if err != nil || d.Server != "ABC01:1/0" {
			t.Fatalf("levenshtein: %v %v", d.Server, err)
		}
	}
	// Explain shows the sort order.
	d, _ := chSelect(t, chProfile("nearest_hostname"), Input{Tablet: tablet(1), View: v, LocalHost: "abc01", Explain: true})
	if len(d.Candidates) != 4 || d.Candidates[0] != "abc0:1/0" || d.Candidates[1] != "abc02:1/0" {
		t.Errorf("candidates %v", d.Candidates)
	}

	hv := hostsView(6, 1)
	tab := tablet(4)
	order := RendezvousOrder(tab, hv.group("").alive, "")
	// in_order: configuration order = rendezvous order.
	st := &TabletState{}
	var h []Attempt
	for k := 0; k < 6; k++ {
		d, err := chSelect(t, chProfile("in_order"), Input{Tablet: tab, View: hv, Attempts: h, State: st})
		if err != nil || d.Server != order[k].ID {
			t.Fatalf("in_order step %d: %v want %v", k, d.Server, order[k].ID)
		}
		h = append(h, att(d.Server, d.Host, Busy))
	}
	// Cancelled attempts do not count as tried.
	two := hostsView(2, 1)
	o2 := RendezvousOrder(tab, two.group("").alive, "")
	d, _ = chSelect(t, chProfile("in_order"), Input{Tablet: tab, View: two,
		Attempts: []Attempt{att(o2[0].ID, o2[0].Host, Busy), att(o2[1].ID, o2[1].Host, Cancelled)}})
	if d.Server != o2[1].ID {
		t.Errorf("cancelled counted as tried: %v", d.Server)
	}
	// first_or_random: index firstOffset % N first, the rest random.
	for seed := uint64(0); seed < 10; seed++ {
		d, _ := chSelect(t, chProfile("first_or_random", func(o *Options) { o.FirstOffset = 7 }), Input{Tablet: tab, View: hv, Rand: rng(seed)})
		if d.Server != order[1].ID {
			t.Fatalf("first_or_random: %v want %v", d.Server, order[1].ID)
		}
	}
	seen := map[ServerID]bool{}
	for seed := uint64(0); seed < 200; seed++ {
		d, _ := chSelect(t, chProfile("first_or_random"), Input{Tablet: tab, View: hv, Rand: rng(seed),
			Attempts: []Attempt{att(order[0].ID, order[0].Host, Busy)}})
		seen[d.Server] = true
	}
	if len(seen) != 5 || seen[order[0].ID] {
		t.Errorf("first_or_random second choice not random over the others: %v", seen)
	}
	// round_robin: the per-tablet counter rotates priority 0: with
	// last_used = 0, 1, 2, ... priority 0 goes to positions 1, 2, ..., 0.
	st = &TabletState{}
	for k := 0; k < 12; k++ {
		d, _ := chSelect(t, chProfile("round_robin"), Input{Tablet: tab, View: hv, State: st})
		if want := order[(k+1)%6].ID; d.Server != want {
			t.Fatalf("round_robin call %d: %v want %v", k, d.Server, want)
		}
	}
	// random: uniform.
	counts := map[ServerID]int{}
	r := rng(3)
	for k := 0; k < 6000; k++ {
		d, _ := chSelect(t, chProfile("random"), Input{Tablet: tab, View: hv, Rand: r})
		counts[d.Server]++
	}
	for id, n := range counts {
		if n < 850 || n > 1150 {
			t.Errorf("random: %s %d/6000", id, n)
		}
	}
}

func TestClickHouseErrors(t *testing.T) {
	hv := hostsView(4, 1)
	tab := tablet(9)
	order := RendezvousOrder(tab, hv.group("").alive, "")
	// The pool baselines the tallies it first sees; errors counted after
	// that (later views with grown tallies) count.
	clean := chTallyView(order, []uint32{0, 0, 0, 0}, []uint32{0, 0, 0, 0}, t0)
	with := func(p *Profile) Policy {
		pol := mustPolicy(t, p)
		if _, err := pol.Select(&Input{Tablet: tab, View: clean, Profile: p, Now: t0, Rand: rng(1)}); err != nil {
			t.Fatal(err)
		}
		return pol
	}
	sel := func(pol Policy, p *Profile, v *LoadView) ServerID {
		t.Helper()
		d, err := pol.Select(&Input{Tablet: tab, View: v, Profile: p, Now: t0.Add(time.Second), Rand: rng(1)})
		if err != nil {
			t.Fatal(err)
		}
		return d.Server
	}
	noHedge := func(o *Options) { o.Hedge = false }
	// Errors dominate mode priority: in_order skips position 0 (1 error).
	// ClickHouse's test_distributed_replica_max_ignored_errors: n1 with one
	// error is skipped (n2 answers), with max_ignored_errors=1 it is n1.
	v := chTallyView(order, []uint32{1, 0, 0, 0}, []uint32{0, 0, 0, 0}, t0)
	p := chProfile("in_order", noHedge)
	if got := sel(with(p), p, v); got != order[1].ID {
		t.Errorf("errors first: %v", got)
	}
	p = chProfile("in_order", noHedge, func(o *Options) { o.MaxIgnoredErrors = 1 })
	if got := sel(with(p), p, v); got != order[0].ID {
		t.Errorf("ignored errors: %v", got)
	}
	v = chTallyView(order, []uint32{3, 2, 2, 5}, []uint32{0, 0, 0, 0}, t0)
	p = chProfile("in_order", noHedge, func(o *Options) { o.MaxIgnoredErrors = 2 })
	if got := sel(with(p), p, v); got != order[1].ID {
		t.Errorf("max(0, errors-ignored): %v", got)
	}
	// Errors before the pool first saw a replica do not count.
	p = chProfile("in_order", noHedge)
	if d, _ := mustPolicy(t, p).Select(&Input{Tablet: tab, View: v, Profile: p, Now: t0, Rand: rng(1)}); d.Server != order[0].ID {
		t.Errorf("baseline: %v", d.Server)
	}
	// Slowdowns join the tuple only when hedging is on.
	v = chTallyView(order, []uint32{0, 0, 0, 0}, []uint32{2, 0, 0, 0}, t0)
	p = chProfile("in_order", noHedge)
	if got := sel(with(p), p, v); got != order[0].ID {
		t.Errorf("slowdowns without hedge: %v", got)
	}
	p = chProfile("in_order", func(o *Options) { o.Hedge = true })
	if got := sel(with(p), p, v); got != order[1].ID {
		t.Errorf("slowdowns with hedge: %v", got)
	}
	// Errors before slowdowns.
	v = chTallyView(order, []uint32{0, 1, 0, 0}, []uint32{5, 0, 5, 5}, t0)
	if got := sel(with(p), p, v); got != order[0].ID {
		t.Errorf("errors before slowdowns: %v", got)
	}
	// A view without the tallies (another profile's decays) counts 0.
	if d, _ := mustPolicy(t, p).Select(&Input{Tablet: tab, View: hv, Profile: p, Now: t0, Rand: rng(1)}); d.Server != order[0].ID {
		t.Errorf("no tallies: %v", d.Server)
	}
}

// chTallyView is a view of servers (in this order) whose clickhouseTally
// error and slowdown counters hold errs and slows, counted since origin.
func chTallyView(servers []*ServerLoad, errs, slows []uint32, origin time.Time) *LoadView {
	decays := []DecayParams{DefaultDecay, clickhouseTally}
	var ss []*ServerLoad
	for k, s := range servers {
		c := *s
		c.Errors = make([]DecayedCount, len(decays))
		c.Slowdowns = make([]DecayedCount, len(decays))
		if errs[k] > 0 {
			c.Errors[1] = DecayedCount{Count: errs[k], Origin: origin}
		}
		if slows[k] > 0 {
			c.Slowdowns[1] = DecayedCount{Count: slows[k], Origin: origin}
		}
		ss = append(ss, &c)
	}
	return NewLoadView(ss, decays, t0)
}

func TestClickHouseHedging(t *testing.T) {
	hv := hostsView(3, 1)
	tab := tablet(2)
	order := RendezvousOrder(tab, hv.group("").alive, "")
	// Off: no delays, hedges declined.
	off := chProfile("in_order", func(o *Options) { o.Hedge = false })
	d, err := chSelect(t, off, Input{Tablet: tab, View: hv})
	if err != nil || d.HedgeDelay != 0 || d.DataTimeout != 0 {
		t.Fatalf("off: %+v %v", d, err)
	}
	pend := []Attempt{att(order[0].ID, order[0].Host, Pending)}
	if _, err := chSelect(t, off, Input{Tablet: tab, View: hv, Attempts: pend, Hedge: true}); !errors.Is(err, ErrNoHedge) {
		t.Fatalf("hedge while off: %v", err)
	}
	// On by default (use_hedged_requests = 1), with ClickHouse's timeouts.
	on := chProfile("in_order")
	d, err = chSelect(t, on, Input{Tablet: tab, View: hv})
	if err != nil || d.HedgeDelay != 50*time.Millisecond || d.DataTimeout != 2*time.Second || d.BusyTimeout != time.Second {
		t.Fatalf("on: %+v %v", d, err)
	}
	// A hedge goes to the next replica in order, never a pending/slow one.
	d, err = chSelect(t, on, Input{Tablet: tab, View: hv, Attempts: pend, Hedge: true})
	if err != nil || d.Server != order[1].ID || d.Delay != 0 {
		t.Fatalf("hedge: %+v %v", d, err)
	}
	two := append(pend[:1:1], att(order[1].ID, order[1].Host, Slow))
	d, err = chSelect(t, on, Input{Tablet: tab, View: hv, Attempts: two, Hedge: true})
	if err != nil || d.Server != order[2].ID {
		t.Fatalf("second hedge: %+v %v", d, err)
	}
	three := append(two, att(order[2].ID, order[2].Host, Started))
	if _, err := chSelect(t, on, Input{Tablet: tab, View: hv, Attempts: three, Hedge: true}); !errors.Is(err, ErrNoHedge) {
		t.Fatalf("no replica left: %v", err)
	}
	// A failed replica may be hedged to when it is the only one not in flight.
	mixed := []Attempt{att(order[0].ID, order[0].Host, Busy), att(order[1].ID, order[1].Host, Pending), att(order[2].ID, order[2].Host, Slow)}
	d, err = chSelect(t, on, Input{Tablet: tab, View: hv, Attempts: mixed, Hedge: true})
	if err != nil || d.Server != order[0].ID {
		t.Fatalf("hedge to failed: %+v %v", d, err)
	}
	// Hedge timeouts are configurable.
	custom := chProfile("random", func(o *Options) {
		o.Hedge, o.HedgedConnectionTimeout, o.ReceiveDataTimeout = true, 20*time.Millisecond, time.Second
	})
	if d, _ := chSelect(t, custom, Input{Tablet: tab, View: hv}); d.HedgeDelay != 20*time.Millisecond || d.DataTimeout != time.Second {
		t.Errorf("custom timeouts %+v", d)
	}
}

// docs/policies.md (clickhouse) scenario: one replica hung. Without hedging about
// 1/replicas of first attempts go to it; with hedging every scan gets a
// hedge on another replica.
func TestClickHouseHungReplicaScenario(t *testing.T) {
	hv := hostsView(4, 1)
	hung := hv.Servers[2].ID
	on := chProfile("random", func(o *Options) { o.Hedge = true })
	r := rng(11)
	toHung := 0
	for k := 0; k < 4000; k++ {
		tab := tablet(k)
		d, err := chSelect(t, on, Input{Tablet: tab, View: hv, Rand: r})
		if err != nil {
			t.Fatal(err)
		}
		if d.Server != hung {
			continue
		}
		toHung++
		// The hung replica gives nothing within hedgedConnectionTimeout.
		h := []Attempt{att(d.Server, d.Host, Slow)}
		d2, err := chSelect(t, on, Input{Tablet: tab, View: hv, Rand: r, Attempts: h, Hedge: true})
		if err != nil || d2.Server == hung {
			t.Fatalf("hedge from hung replica: %v %v", d2.Server, err)
		}
	}
	if toHung < 850 || toHung > 1150 {
		t.Errorf("about 1/4 of scans should reach the hung replica first, got %d/4000", toHung)
	}
}
