package selection

import (
	"fmt"
	"testing"
	"time"
)

// TestAdaptiveHostSlowOnce: the per-call memo of hostSlow answers every
// ask, in any order of hosts (a host's servers need not be adjacent in
// ID order), as the rule computed from the view's servers directly: a
// host of at least two servers is slow when each one's estimate, decayed
// toward the servers' median with adSlowForget, exceeds adSlowFree × the
// median.
func TestAdaptiveHostSlowOnce(t *testing.T) {
	slow, fast := 0, 0
	for seed := uint64(0); seed < 40; seed++ {
		r := rng(seed)
		var ss []*ServerLoad
		for h := 0; h < 12; h++ {
			host := fmt.Sprintf("h%02d", h)
			base := 1000 + r.IntN(400)
			if r.IntN(3) == 0 {
				base *= 2 + r.IntN(4) // a slow machine
			}
			for k := 0; k < 1+r.IntN(5); k++ {
				s := srv(fmt.Sprintf("s%03d-%s", r.IntN(1000), host), host) // hosts interleave in ID order
				if r.IntN(8) > 0 {
					s.StartLatency = time.Duration(base+r.IntN(base)) * time.Microsecond
					s.StartLatencyAt = t0.Add(-time.Duration(r.IntN(8000)) * time.Millisecond)
				}
				ss = append(ss, s)
			}
		}
		v := view(ss...)
		p := adProfile()
		var c call
		if err := c.begin(&Input{Tablet: tablet(1), Profile: p, View: v, Now: t0, Rand: r}, p); err != nil {
			t.Fatal(err)
		}
		m := c.g.latMedian
		if m <= 0 {
			t.Fatalf("seed %d: no median", seed)
		}
		// The rule, from the servers of each host by name.
		byHost := map[string][]*ServerLoad{}
		for _, s := range v.Servers {
			byHost[s.Host] = append(byHost[s.Host], s)
		}
		want := map[string]bool{}
		for host, list := range byHost {
			want[host] = len(list) >= 2
			for _, s := range list {
				if float64(decayedStartLatency(s, m, t0, adSlowForget)) <= adSlowFree*float64(m) {
					want[host] = false
				}
			}
			if want[host] {
				slow++
			} else {
				fast++
			}
		}
		a := adCtx{slowHost: -1}
		for k := 0; k < 300; k++ {
			i := int32(r.IntN(len(c.g.alive)))
			if k%3 == 0 && k > 0 {
				i = (i + 1) % int32(len(c.g.alive)) // runs of neighbours too
			}
			h := c.g.hostOf[i]
			if got := c.hostSlowOnce(h, &a); got != want[c.g.hosts[h].name] {
				t.Fatalf("seed %d, ask %d: host %s slow %v, want %v", seed, k, c.g.hosts[h].name, got, want[c.g.hosts[h].name])
			}
		}
	}
	if slow == 0 || fast == 0 {
		t.Fatalf("slow hosts %d, others %d: the views miss a case", slow, fast)
	}
}
