package selection

import (
	"errors"
	"math"
	"testing"
	"time"
)

// c3Reference is C3's score as its reference implementations compute it,
// written independently of c3Score: cassandra-c3's ScoreTracker.getScore,
// responseTimeEMA + (1 + queueSizeEMA + n·pending)³ · serviceTimeEMA, where
// responseTimeEMA averages latency − serviceTime (absim's
// computeExpectedDelay: nw + θ³ · serviceTime, nw = responseTime −
// serviceTime, θ = 1 + pending·NUMBER_OF_CLIENTS + queueSizeAfter).
func c3Reference(latency, serviceTime, pending, clients, queue float64) float64 {
	responseTimeEMA := latency - serviceTime
	return responseTimeEMA + math.Pow(1+queue+clients*pending, 3)*serviceTime
}

func TestC3Score(t *testing.T) {
	cases := []struct {
		r, s, os, n, q float64
		want           float64
	}{
		{10, 2, 1, 3, 4, 8 + 8*8*8*2},  // q̂ = 8
		{10, 10, 0, 1, 0, 10},          // idle: Ψ = service time
		{5, 1, 0, 5, 0, 4 + 1},         // nothing outstanding: n does not matter
		{20, 4, 2, 1, 1, 16 + 4*4*4*4}, // q̂ = 4
		{1, 0.25, 1, 2, 3, 0.75 + 6*6*6*0.25},
	}
	for _, c := range cases {
		got := c3Score(c.r, c.s, c.os, c.n, c.q)
		if got != c.want {
			t.Errorf("c3Score(%v): %v, want %v", c, got, c.want)
		}
		if ref := c3Reference(c.r, c.s, c.os, c.n, c.q); math.Abs(ref-got) > 1e-9*math.Abs(ref) {
			t.Errorf("c3Score(%v) %v differs from the reference formula's %v", c, got, ref)
		}
	}
	// Randomised agreement with the reference formula.
	r := rng(3)
	for k := 0; k < 2000; k++ {
		rt := r.Float64() * 1e8
		s := rt * r.Float64()
		os, n, q := float64(r.IntN(20)), float64(1+r.IntN(5)), float64(r.IntN(50))
		if got, ref := c3Score(rt, s, os, n, q), c3Reference(rt, s, os, n, q); math.Abs(ref-got) > 1e-9*math.Abs(ref) {
			t.Fatalf("%v %v %v %v %v: %v vs %v", rt, s, os, n, q, got, ref)
		}
	}
}

// c3Inputs: the derivation of service time from what scan servers report.
func TestC3Inputs(t *testing.T) {
	ms := float64(time.Millisecond)
	cases := []struct {
		name           string
		lat            time.Duration
		p50            time.Duration
		queue, workers int
		inFlight       int
		r, s, os, q    float64
	}{
		{"idle: service time = response time", 8 * time.Millisecond, 0, 0, 4, 0, 8 * ms, 8 * ms, 0, 0},
		{"3 queued on 1 worker: a quarter", 10 * time.Millisecond, 0, 3, 1, 2, 10 * ms, 2.5 * ms, 2, 3},
		{"4 queued on 2 workers: a third", 12 * time.Millisecond, 0, 4, 2, 0, 12 * ms, 4 * ms, 0, 4},
		{"0 workers counts as 1", 10 * time.Millisecond, 0, 1, 0, 0, 10 * ms, 5 * ms, 0, 1},
		{"no sample: the fleet median", 0, 6 * time.Millisecond, 0, 1, 1, 6 * ms, 6 * ms, 1, 0},
		{"no sample, no median: 1ms", 0, 0, 1, 1, 0, 1 * ms, 0.5 * ms, 0, 1},
	}
	for _, c := range cases {
		s := srv("a:1/0", "a", func(l *ServerLoad) {
			l.StartLatency, l.StartLatencyAt, l.QueueLen, l.Workers, l.InFlight = c.lat, t0, c.queue, c.workers, c.inFlight
		})
		v := view(s)
		v.StartLatencyP50 = c.p50
		r, svc, os, q := c3Inputs(v, s, t0)
		if r != c.r || svc != c.s || os != c.os || q != c.q {
			t.Errorf("%s: r %v s %v os %v q %v, want %v %v %v %v", c.name, r, svc, os, q, c.r, c.s, c.os, c.q)
		}
	}
}

type c3Srv struct {
	lat      time.Duration
	queue    int
	inFlight int
	workers  int
}

// c3View: one server per host h00, h01, ...
func c3View(ss ...c3Srv) *LoadView {
	var out []*ServerLoad
	for i, s := range ss {
		host := string(rune('a'+i)) + "h"
		out = append(out, srv(host+":1/0", host, func(l *ServerLoad) {
			l.StartLatency, l.StartLatencyAt, l.QueueLen, l.InFlight, l.Workers = s.lat, t0, s.queue, s.inFlight, max(1, s.workers)
		}))
	}
	return view(out...)
}

// The ranking over a tablet's replicas: each case is three servers (the
// write set of 3 is all of them) and the server C3 must choose.
func TestC3Ranking(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name    string
		clients int
		ss      []c3Srv
		want    string
	}{
		{"lowest response time when idle", 1, []c3Srv{{lat: 9 * ms}, {lat: 3 * ms}, {lat: 5 * ms}}, "bh:1/0"},
		// a: Ψ = 5·27 = 135 ms; b: 20 ms; c: 30 ms.
		{"own outstanding scans count cubed", 1, []c3Srv{{lat: 5 * ms, inFlight: 2}, {lat: 20 * ms}, {lat: 30 * ms}}, "bh:1/0"},
		// a: r 2, q 4 → s 0.4, Ψ = 1.6 + 125·0.4 = 51.6; b: 10; c: 12.
		{"a queue outweighs latency", 1, []c3Srv{{lat: 2 * ms, queue: 4}, {lat: 10 * ms}, {lat: 12 * ms}}, "bh:1/0"},
		// a: q̂ = 2 → 8 ms with n = 1; b: 10 ms.
		{"n = 1: one in flight is cheap", 1, []c3Srv{{lat: ms, inFlight: 1}, {lat: 10 * ms}, {lat: 11 * ms}}, "ah:1/0"},
		// n = 2: q̂ = 3 → 27 ms.
		{"n = 2 compensates for other coordinators", 2, []c3Srv{{lat: ms, inFlight: 1}, {lat: 10 * ms}, {lat: 11 * ms}}, "bh:1/0"},
		{"ties go to the earlier replica", 1, []c3Srv{{lat: 4 * ms}, {lat: 4 * ms}, {lat: 4 * ms}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := profileFor(PolicyC3)
			p.Options.C3Clients = tc.clients
			pol := mustPolicy(t, p)
			v := c3View(tc.ss...)
			for k := 0; k < 20; k++ {
				tab := tablet(k)
				d, err := pol.Select(&Input{Tablet: tab, Profile: p, View: v, Now: t0, Rand: rng(uint64(k)), Explain: true})
				if err != nil {
					t.Fatal(err)
				}
				want := tc.want
				if want == "" {
					want = string(writeSetOfC3(t, v, tab)[0])
				}
				if string(d.Server) != want {
					t.Fatalf("tablet %d: chose %s, want %s (%v %v)", k, d.Server, want, d.Candidates, d.Scores)
				}
				if d.Candidates[0] != d.Server || len(d.Scores) != 3 || d.Scores[0] > d.Scores[1] || d.Scores[1] > d.Scores[2] {
					t.Fatalf("explain: %v %v", d.Candidates, d.Scores)
				}
			}
		})
	}
}

// writeSetOfC3: the tablet's replicas in rendezvous order (bookkeeper's
// write set, computed by the bookkeeper policy with pending reordering off).
func writeSetOfC3(t *testing.T, v *LoadView, tab Tablet) []ServerID {
	p := profileFor(PolicyBookKeeper)
	p.Options.ReorderThresholdPendingRequests = 0
	d, err := mustPolicy(t, p).Select(&Input{Tablet: tab, Profile: p, View: v, Now: t0, Rand: rng(1), Explain: true})
	if err != nil {
		t.Fatal(err)
	}
	return d.Candidates
}

// Only the tablet's replicas are ranked: an idle server outside the write
// set is never chosen, and writeSetSize widens the set.
func TestC3WriteSet(t *testing.T) {
	ss := make([]c3Srv, 8)
	for i := range ss {
		ss[i] = c3Srv{lat: 5 * time.Millisecond, inFlight: 3}
	}
	v := c3View(ss...)
	for _, size := range []int{1, 3, 5} {
		p := profileFor(PolicyC3)
		p.Options.WriteSetSize = size
		pol := mustPolicy(t, p)
		for k := 0; k < 30; k++ {
			tab := tablet(k)
			bp := profileFor(PolicyBookKeeper)
			bp.Options.WriteSetSize, bp.Options.ReorderThresholdPendingRequests = size, 0
			bd, _ := mustPolicy(t, bp).Select(&Input{Tablet: tab, Profile: bp, View: v, Now: t0, Rand: rng(1), Explain: true})
			d, err := pol.Select(&Input{Tablet: tab, Profile: p, View: v, Now: t0, Rand: rng(uint64(k)), Explain: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Candidates) != size {
				t.Fatalf("size %d: %d candidates", size, len(d.Candidates))
			}
			in := map[ServerID]bool{}
			for _, id := range bd.Candidates {
				in[id] = true
			}
			for _, id := range d.Candidates {
				if !in[id] {
					t.Fatalf("size %d tablet %d: %s is not a replica (%v)", size, k, id, bd.Candidates)
				}
			}
		}
	}
}

// History: a replica that failed in this scan is skipped while another is
// untried; hedges are declined.
func TestC3History(t *testing.T) {
	ms := time.Millisecond
	v := c3View(c3Srv{lat: ms}, c3Srv{lat: 5 * ms}, c3Srv{lat: 9 * ms})
	p := profileFor(PolicyC3)
	pol := mustPolicy(t, p)
	h := []Attempt{att("ah:1/0", "ah", Busy)}
	d, err := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Now: t0, Rand: rng(1), Attempts: h})
	if err != nil || d.Server != "bh:1/0" || d.PlanIndex != 1 {
		t.Fatalf("after busy: %+v %v", d, err)
	}
	h = append(h, att("bh:1/0", "bh", Error))
	d, err = pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Now: t0, Rand: rng(1), Attempts: h})
	if err != nil || d.Server != "ch:1/0" || d.Delay != 100*ms {
		t.Fatalf("after busy and error: %+v %v", d, err)
	}
	_, err = pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Now: t0, Rand: rng(1), Hedge: true,
		Attempts: []Attempt{att("ah:1/0", "ah", Slow)}})
	if !errors.Is(err, ErrNoHedge) {
		t.Fatalf("hedge: %v", err)
	}
}
