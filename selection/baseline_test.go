package selection

import (
	"errors"
	"testing"
)

func TestRandomBaseline(t *testing.T) {
	v := hostsView(5, 2)
	p := profileFor(PolicyRandom)
	pol := mustPolicy(t, p)
	r := rng(2)
	counts := map[ServerID]int{}
	for k := 0; k < 10000; k++ {
		d, err := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Rand: r})
		if err != nil {
			t.Fatal(err)
		}
		counts[d.Server]++
	}
	if len(counts) != 10 {
		t.Fatalf("not all servers used: %v", counts)
	}
	for id, c := range counts {
		if c < 850 || c > 1150 {
			t.Errorf("%s: %d/10000", id, c)
		}
	}
	// Servers tried in this scan are avoided while others remain.
	var h []Attempt
	seen := map[ServerID]bool{}
	for k := 0; k < 10; k++ {
		d, err := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Rand: r, Attempts: h})
		if err != nil {
			t.Fatal(err)
		}
		if seen[d.Server] {
			t.Fatalf("retried %s with untried servers left", d.Server)
		}
		seen[d.Server] = true
		h = append(h, att(d.Server, d.Host, Busy))
	}
	if _, err := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Rand: r, Attempts: h}); err != nil {
		t.Errorf("all tried: %v", err)
	}
	if _, err := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Rand: r, Hedge: true, Attempts: h[:1]}); !errors.Is(err, ErrNoHedge) {
		t.Errorf("hedge: %v", err)
	}
}

func TestRoundRobinBaseline(t *testing.T) {
	v := hostsView(4, 2)
	p := profileFor(PolicyRoundRobin)
	pol := mustPolicy(t, p)
	all := v.group("").alive
	st := &TabletState{}
	var seq []ServerID
	for k := 0; k < 16; k++ {
		d, err := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Rand: rng(1), State: st})
		if err != nil {
			t.Fatal(err)
		}
		seq = append(seq, d.Server)
	}
	// A rotation over all 8 servers in ID order.
	start := 0
	for i, s := range all {
		if s.ID == seq[0] {
			start = i
		}
	}
	for k, id := range seq {
		if want := all[(start+k)%8].ID; id != want {
			t.Fatalf("call %d: %s want %s (%v)", k, id, want, seq)
		}
	}
	// Tablets start at different servers.
	starts := map[ServerID]bool{}
	for k := 0; k < 40; k++ {
		d, _ := pol.Select(&Input{Tablet: tablet(k), Profile: p, View: v, Rand: rng(1), State: &TabletState{}})
		starts[d.Server] = true
	}
	if len(starts) < 5 {
		t.Errorf("tablets all start at few servers: %v", starts)
	}
	// Tried servers are skipped.
	st = &TabletState{}
	d0, _ := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Rand: rng(1), State: &TabletState{}})
	next := all[(start+1)%8]
	d, _ := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Rand: rng(1), State: st,
		Attempts: []Attempt{att(d0.Server, d0.Host, Busy), att(next.ID, next.Host, Error)}})
	if d.Server != all[(start+2)%8].ID {
		t.Errorf("skip tried: %s", d.Server)
	}
}
