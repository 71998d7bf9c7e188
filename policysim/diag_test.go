package policysim

import (
	"math"
	"slices"
	"testing"
	"time"
)

// TestDiagChangesNothing: a run with Diagnose gives the same latencies and
// events as one without, and its classes cover every counted request.
// prequal draws from the coordinator's random source at every decision,
// so a draw by the diagnosis shows in its run.
func TestDiagChangesNothing(t *testing.T) {
	cfg := small(t)
	cfg.Requests = 6000
	for _, p := range []string{"adaptive", "c3", "prequal"} {
		plain := run(t, cfg, p)
		dc := cfg
		dc.Diagnose = true
		diag := run(t, dc, p)
		if !slices.Equal(plain.Latencies, diag.Latencies) || plain.Events != diag.Events {
			t.Fatalf("%s: Diagnose changed the run: %d and %d events", p, plain.Events, diag.Events)
		}
		if plain.Diag != nil {
			t.Errorf("%s: Diag set without Diagnose", p)
		}
		d := diag.Diag
		if d == nil || d.Decisions < cfg.Requests*9/10 {
			t.Fatalf("%s: %+v: fewer decisions than requests", p, d)
		}
		var slow, cap float64
		for _, c := range d.Classes {
			switch c.Class {
			case "slow=0", "slow=1", "slow=2", "slow=3":
				slow += c.Share
			case "trapped", "tight", "free":
				cap += c.Share
			}
		}
		if slow < 0.999 || slow > 1.001 || cap < 0.999 || cap > 1.001 {
			t.Errorf("%s: class shares sum to %.4f (slow=k) and %.4f (capacity), not 1", p, slow, cap)
		}
		if p == "adaptive" && d.Home+d.Away < 0.999 {
			t.Errorf("adaptive: home %.3f + away %.3f of decisions, not every one", d.Home, d.Away)
		}
		if d.Picked < d.Shortest || math.Abs(d.Excess-(d.Picked-d.Shortest)) > 1e-9 {
			t.Errorf("%s: picked %.3f, shortest %.3f, excess %.3f", p, d.Picked, d.Shortest, d.Excess)
		}
	}
}

// TestDiagClassify: at utilization 0.70 of C3's setting a replica set is
// trapped when it lies in a run of at least 7 consecutive slow servers
// (the load of the run's k−2 sets, each 1.4 slow servers' capacity,
// reaches the k servers' capacity), tight in a run of 5 or 6 (84 %,
// 93 %), free otherwise.
func TestDiagClassify(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Utilization = 0.70
	s := &sim{cfg: cfg}
	for range cfg.Servers {
		s.servers = append(s.servers, &server{slow: 1, fast: true})
	}
	g := newDiag(s)
	slowRun := func(from, n int) {
		for _, sv := range s.servers {
			sv.fast = true
		}
		for k := range n {
			s.servers[(from+k)%cfg.Servers].fast = false
		}
	}
	for _, c := range []struct {
		from, n int
		set     int32
		want    uint8
	}{
		{10, 7, 12, 3 | 1<<4}, // inside a run of 7
		{10, 7, 10, 3 | 1<<4}, // its first set
		{10, 7, 15, 2},        // a set leaving the run: one fast replica
		{10, 6, 11, 3 | 2<<4}, // a run of 6
		{10, 5, 11, 3 | 2<<4}, // a run of 5 (84 %)
		{10, 4, 11, 3},        // a run of 4 (70 %)
		{48, 8, 0, 3 | 1<<4},  // a run across the ring's end
		{0, 50, 7, 3 | 1<<4},  // every server slow
		{10, 2, 10, 2},
	} {
		slowRun(c.from, c.n)
		if got := g.classify(&request{set: c.set}); got != c.want {
			t.Errorf("run of %d slow from %d, set %d: class %#x, want %#x", c.n, c.from, c.set, got, c.want)
		}
	}
}

// TestDiagTail: the tail holds the requests at or above the quantile,
// its shares sum to 1, and the parts of their latency add up to it: the
// wait before the answering attempt, its queue wait and service time,
// and the two one-way latencies.
func TestDiagTail(t *testing.T) {
	cfg := small(t)
	cfg.Requests, cfg.Diagnose = 6000, true
	for _, p := range []string{"adaptive", "c3"} {
		r := run(t, cfg, p)
		if len(r.Diag.Tail) != 2 {
			t.Fatalf("%s: %d tails, want p99 and p99.9", p, len(r.Diag.Tail))
		}
		for _, tl := range r.Diag.Tail {
			from := r.Quantile(tl.Quantile)
			var n int
			var sum time.Duration
			for _, l := range r.Latencies {
				if l >= from {
					n++
					sum += l
				}
			}
			if tl.Requests != n || tl.FromMs != ms(from) {
				t.Errorf("%s q%.3f: %d requests from %.3f ms, want %d from %.3f", p, tl.Quantile, tl.Requests, tl.FromMs, n, ms(from))
			}
			if s := tl.First + tl.Retry + tl.Hedge; math.Abs(s-1) > 1e-9 {
				t.Errorf("%s q%.3f: first %.3f + retry %.3f + hedge %.3f = %.3f, not 1", p, tl.Quantile, tl.First, tl.Retry, tl.Hedge, s)
			}
			mean := float64(sum) / float64(n) / 1e6
			parts := tl.BeforeMs + tl.QueueMs + tl.ServiceMs + 2*cfg.OneWay.Seconds()*1e3
			if math.Abs(mean-parts) > 1e-6*mean {
				t.Errorf("%s q%.3f: mean latency %.6f ms, parts add to %.6f", p, tl.Quantile, mean, parts)
			}
			if tl.Picked < tl.Excess || tl.Trapped+tl.Tight > 1 {
				t.Errorf("%s q%.3f: %+v", p, tl.Quantile, tl)
			}
		}
	}
}
