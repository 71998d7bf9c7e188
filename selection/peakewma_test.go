package selection

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

const msNs = 1e6 // tower's NANOS_PER_MILLI

// Ported from tower's load/peak_ewma.rs tests default_decay and
// compound_decay (tower-rs/tower, tower/src/load/peak_ewma.rs): a metric
// started at a default RTT (tower's RttEstimate::new), decay 1 s, time in
// ns; each step advances the clock, then starts a request, completes one
// (rtt = now − its start) or only reads the load, and checks the load
// (cost × (pending + 1)) exactly or against bounds, as tower does.
func TestPeakEWMATower(t *testing.T) {
	type step struct {
		advance time.Duration
		op      string // "load", "start", "end0", "end1"
		eq      float64
		gt, lt  float64
	}
	cases := []struct {
		name       string
		defaultRTT float64
		steps      []step
	}{
		{"default_decay", 10 * msNs, []step{
			{0, "load", 10 * msNs, 0, 0},
			{100 * time.Millisecond, "load", 0, 9 * msNs, 10 * msNs},
			{100 * time.Millisecond, "load", 0, 8 * msNs, 9 * msNs},
		}},
		{"compound_decay", 20 * msNs, []step{
			{0, "load", 20 * msNs, 0, 0},
			{100 * time.Millisecond, "start", 0, 20 * msNs, math.Inf(1)},
			{100 * time.Millisecond, "start", 0, 40 * msNs, math.Inf(1)},
			{100 * time.Millisecond, "end0", 400_000_000, 0, 0},
			{100 * time.Millisecond, "end1", 200_000_000, 0, 0},
			{time.Second, "load", 0, 0, 100_000_000},
			{10 * time.Second, "load", 0, 0, 100_000},
		}},
	}
	const decay = 1000 * msNs
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var now int64
			m := newPeakEWMA(now, tc.defaultRTT)
			var sent []int64
			pending := 0
			for k, s := range tc.steps {
				now += int64(s.advance)
				switch s.op {
				case "start":
					sent = append(sent, now)
					pending++
				case "end0", "end1":
					i := int(s.op[3] - '0')
					m.observe(now, float64(now-sent[i]), decay)
					pending--
				}
				got := m.load(now, pending, decay)
				if s.eq != 0 && got != s.eq {
					t.Fatalf("step %d (%s): load %v, want exactly %v", k, s.op, got, s.eq)
				}
				if s.eq == 0 && !(got > s.gt && got < s.lt) {
					t.Fatalf("step %d (%s): load %v, want in (%v, %v)", k, s.op, got, s.gt, s.lt)
				}
			}
		})
	}
}

// The estimator's rules, one by one (Finagle's PeakEwma Metric and Ema).
func TestPeakEWMARules(t *testing.T) {
	const tau = 10e9
	cases := []struct {
		name    string
		run     func(m *peakEWMA) float64
		want    float64
		initial float64 // defaultRTT
	}{
		{"no history, nothing pending: 0", func(m *peakEWMA) float64 { return m.load(5e9, 0, tau) }, 0, 0},
		{"no history, pending: Penalty + pending", func(m *peakEWMA) float64 { return m.load(5e9, 3, tau) }, peakPenalty + 3, 0},
		{"default RTT × (pending+1)", func(m *peakEWMA) float64 { return m.load(0, 2, tau) }, 3 * 7e6, 7e6},
		{"first sample taken as is", func(m *peakEWMA) float64 { m.observe(1e9, 5e6, tau); return m.load(1e9, 0, tau) }, 5e6, 0},
		{"a peak replaces at once", func(m *peakEWMA) float64 {
			m.observe(1e9, 5e6, tau)
			m.observe(2e9, 80e6, tau)
			return m.load(2e9, 0, tau)
		}, 80e6, 0},
		{"a lower sample blends by 1-exp(-dt/tau)", func(m *peakEWMA) float64 {
			m.observe(0, 80e6, tau)
			m.observe(10e9, 20e6, tau)
			return m.load(10e9, 0, tau)
		}, 20e6*(1-math.Exp(-1)) + 80e6*math.Exp(-1), 0},
		{"reads decay toward 0", func(m *peakEWMA) float64 {
			m.observe(0, 80e6, tau)
			return m.load(20e9, 0, tau)
		}, 80e6 * math.Exp(-2), 0},
		{"a lower sample at the same instant does not move it", func(m *peakEWMA) float64 {
			m.observe(3e9, 80e6, tau)
			m.observe(3e9, 1e6, tau)
			return m.load(3e9, 0, tau)
		}, 80e6, 0},
		{"time never goes back (monotone stamp)", func(m *peakEWMA) float64 {
			m.observe(3e9, 80e6, tau)
			m.observe(1e9, 1e6, tau) // applied at 3e9: dt = 0
			return m.load(3e9, 1, tau)
		}, 160e6, 0},
		{"default RTT decays from creation", func(m *peakEWMA) float64 { return m.load(10e9, 0, tau) }, 7e6 * math.Exp(-1), 7e6},
	}
	for _, tc := range cases {
		m := newPeakEWMA(0, tc.initial)
		got := tc.run(&m)
		if math.Abs(got-tc.want) > 1e-6*math.Max(1, math.Abs(tc.want)) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// finagleRun is Finagle's P2CPeakEwmaTest.run: a clock advancing 1 ns per
// step, R requests, each picked by P2C over peak-EWMA loads (decayTime
// 150 ns), held for its node's latency and then closed (Metric.end).
// It returns how many requests each node got.
func finagleRun(lat []int, reqs int) []int {
	const tau = 150
	n := len(lat)
	ms := make([]peakEWMA, n)
	for i := range ms {
		ms[i] = newPeakEWMA(0, 0)
	}
	pend := make([]int, n)
	count := make([]int, n)
	type job struct {
		node int
		ts   int64
	}
	sched := map[int64][]job{}
	r := rng(12345)
	var clock int64
	for step := 0; ; step++ {
		if step >= reqs && len(sched) == 0 {
			break
		}
		if step < reqs {
			a := r.IntN(n)
			b := r.IntN(n - 1)
			if b >= a {
				b++
			}
			pick := b
			if ms[a].load(clock, pend[a], tau) <= ms[b].load(clock, pend[b], tau) {
				pick = a
			}
			pend[pick]++
			count[pick]++
			due := clock + int64(lat[pick])
			sched[due] = append(sched[due], job{pick, clock})
		}
		for _, j := range sched[int64(step)] {
			pend[j.node]--
			ms[j.node].observe(clock, float64(clock-j.ts), tau)
		}
		delete(sched, int64(step))
		clock++
	}
	return count
}

// Ported from Finagle's P2CPeakEwmaTest (finagle-core/src/test/scala/com/
// twitter/finagle/loadbalancer/p2c/P2CPeakEwmaTest.scala, P2CSuite: N =
// 100 nodes, R = 100000 requests, ε = 0.0005 × R on a node's mean load,
// meanLoad = (requests + 1) / 2).
func TestPeakEWMAFinagleP2C(t *testing.T) {
	const N, R = 100, 100000
	const eps = 0.0005 * R
	meanLoad := func(c int) float64 { return float64(c+1) / 2 }
	assertEven := func(t *testing.T, counts []int) {
		t.Helper()
		ml := meanLoad(counts[0])
		for i, c := range counts {
			if math.Abs(meanLoad(c)-ml) >= eps {
				t.Fatalf("node %d: mean load %v, node 0 %v, ε %v", i, meanLoad(c), ml, eps)
			}
		}
	}
	cases := []struct {
		name  string
		extra int // latency of node N (0 = none)
		check func(t *testing.T, counts []int)
	}{
		{"Balances evenly across identical nodes", 0, func(t *testing.T, c []int) { assertEven(t, c) }},
		{"Probe a node without latency history at most once", 2 * R, func(t *testing.T, c []int) {
			assertEven(t, c[:N])
			if c[N] != 1 {
				t.Fatalf("slow node got %d requests, want 1", c[N])
			}
		}},
		{"Balances proportionally across nodes with varying latencies", 10, func(t *testing.T, c []int) {
			assertEven(t, c[:N])
			if d := meanLoad(c[0]) - 2*meanLoad(c[N]); d >= eps {
				t.Fatalf("node 0 mean load %v − 2 × slow node's %v = %v ≥ ε", meanLoad(c[0]), meanLoad(c[N]), d)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lat := make([]int, N, N+1)
			base := 5
			if tc.extra == 2*R {
				base = 1
			}
			for i := range lat {
				lat[i] = base
			}
			if tc.extra > 0 {
				lat = append(lat, tc.extra)
			}
			tc.check(t, finagleRun(lat, R))
		})
	}
}

// latView: servers with a latency sample (ms; 0 = none) and in-flight
// counts, one per host.
type latSrv struct {
	id       string
	lat      time.Duration
	at       time.Time
	inFlight int
	fail     time.Time
	inc      string
}

func latView(now time.Time, ss ...latSrv) *LoadView {
	var out []*ServerLoad
	for _, s := range ss {
		host := strings.Split(s.id, ":")[0]
		out = append(out, srv(s.id, host, func(l *ServerLoad) {
			l.StartLatency, l.StartLatencyAt, l.InFlight, l.LastFailure, l.Incarnation = s.lat, s.at, s.inFlight, s.fail, s.inc
		}))
	}
	v := NewLoadView(out, testDecays, now)
	return v
}

// The policy over views: each step is a view at a time; the policy sees
// two servers, so P2C always compares both; want is the chosen server and
// the loads (ms) it computed, in Explain's order [a, b] sorted here by ID.
func TestPeakEWMAPolicySteps(t *testing.T) {
	ms := time.Millisecond
	sec := time.Second
	type step struct {
		at    time.Duration // since t0
		a, b  latSrv
		want  string
		loadA float64 // ms
		loadB float64
	}
	fail0 := t0.Add(2 * sec)
	cases := []struct {
		name       string
		defaultRTT time.Duration
		steps      []step
	}{
		{"the faster server wins", 0, []step{
			{0, latSrv{id: "a:1/0", lat: 100 * ms, at: t0}, latSrv{id: "b:1/0", lat: 10 * ms, at: t0}, "b:1/0", 100, 10},
		}},
		{"pending multiplies the cost", 0, []step{
			{0, latSrv{id: "a:1/0", lat: 10 * ms, at: t0, inFlight: 4}, latSrv{id: "b:1/0", lat: 20 * ms, at: t0, inFlight: 1}, "b:1/0", 50, 40},
		}},
		{"no history: free while idle, penalised once in flight", 0, []step{
			{0, latSrv{id: "a:1/0"}, latSrv{id: "b:1/0", lat: 50 * ms, at: t0, inFlight: 3}, "a:1/0", 0, 200},
			{0, latSrv{id: "a:1/0", inFlight: 1}, latSrv{id: "b:1/0", lat: 50 * ms, at: t0, inFlight: 3}, "b:1/0", peakPenalty/1e6 + 1e-6, 200},
		}},
		{"defaultRTT stands in for a missing sample", 30 * ms, []step{
			{0, latSrv{id: "a:1/0", inFlight: 1}, latSrv{id: "b:1/0", lat: 50 * ms, at: t0}, "b:1/0", 60, 50},
		}},
		{"a peak is taken at once, a lower sample blends with exp(-dt/τ)", 0, []step{
			{0, latSrv{id: "a:1/0", lat: 5 * ms, at: t0}, latSrv{id: "b:1/0", lat: 10 * ms, at: t0}, "a:1/0", 5, 10},
			{sec, latSrv{id: "a:1/0", lat: 90 * ms, at: t0.Add(sec)}, latSrv{id: "b:1/0", lat: 10 * ms, at: t0}, "b:1/0", 90, 10 * math.Exp(-0.1)},
			{11 * sec, latSrv{id: "a:1/0", lat: 20 * ms, at: t0.Add(11 * sec)}, latSrv{id: "b:1/0", lat: 10 * ms, at: t0},
				"b:1/0", 90*math.Exp(-1) + 20*(1-math.Exp(-1)), 10 * math.Exp(-1.1)},
		}},
		{"a failure counts as a round trip of the first busy timeout (33ms)", 0, []step{
			{0, latSrv{id: "a:1/0", lat: 1 * ms, at: t0}, latSrv{id: "b:1/0", lat: 5 * ms, at: t0}, "a:1/0", 1, 5},
			{2 * sec, latSrv{id: "a:1/0", lat: 1 * ms, at: t0, fail: fail0}, latSrv{id: "b:1/0", lat: 5 * ms, at: t0}, "b:1/0", 33, 5 * math.Exp(-0.2)},
		}},
		{"a new incarnation starts afresh", 0, []step{
			{0, latSrv{id: "a:1/0", lat: 90 * ms, at: t0, inc: "1"}, latSrv{id: "b:1/0", lat: 10 * ms, at: t0}, "b:1/0", 90, 10},
			{0, latSrv{id: "a:1/0", inc: "2"}, latSrv{id: "b:1/0", lat: 10 * ms, at: t0}, "a:1/0", 0, 10},
		}},
		{"history in the first view decays from its own time", 0, []step{
			{10 * sec, latSrv{id: "a:1/0", lat: 50 * ms, at: t0}, latSrv{id: "b:1/0", lat: 15 * ms, at: t0.Add(10 * sec)}, "b:1/0", 50 * math.Exp(-1), 15},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := profileFor(PolicyPeakEWMA)
			p.Options.DefaultRTT = tc.defaultRTT
			pol := mustPolicy(t, p)
			for k, s := range tc.steps {
				now := t0.Add(s.at)
				v := latView(now, s.a, s.b)
				d, err := pol.Select(&Input{Tablet: tablet(k), Profile: p, View: v, Now: now, Rand: rng(uint64(k)), Explain: true})
				if err != nil {
					t.Fatal(err)
				}
				if string(d.Server) != s.want {
					t.Errorf("step %d: chose %s, want %s (candidates %v loads %v)", k, d.Server, s.want, d.Candidates, d.Scores)
				}
				loads := map[ServerID]float64{}
				for j, id := range d.Candidates {
					loads[id] = d.Scores[j]
				}
				for id, want := range map[ServerID]float64{ServerID(s.a.id): s.loadA, ServerID(s.b.id): s.loadB} {
					if got, ok := loads[id]; !ok || math.Abs(got-want) > 1e-6*math.Max(1, want) {
						t.Errorf("step %d: load of %s %v, want %v", k, id, got, want)
					}
				}
			}
		})
	}
}

// Power of two choices: with distinct loads the most loaded of three is
// never chosen and the least loaded wins 2/3 of the draws.
func TestPeakEWMATwoChoices(t *testing.T) {
	p := profileFor(PolicyPeakEWMA)
	pol := mustPolicy(t, p)
	v := latView(t0, latSrv{id: "a:1/0", lat: time.Millisecond, at: t0}, latSrv{id: "b:1/0", lat: 2 * time.Millisecond, at: t0},
		latSrv{id: "c:1/0", lat: 3 * time.Millisecond, at: t0})
	got := map[ServerID]int{}
	const draws = 6000
	for k := 0; k < draws; k++ {
		d, err := pol.Select(&Input{Tablet: tablet(k), Profile: p, View: v, Now: t0, Rand: rng(uint64(k))})
		if err != nil {
			t.Fatal(err)
		}
		got[d.Server]++
	}
	if got["c:1/0"] != 0 {
		t.Errorf("the worst server was chosen %d times", got["c:1/0"])
	}
	if f := float64(got["a:1/0"]) / draws; math.Abs(f-2.0/3) > 0.03 {
		t.Errorf("best server share %.3f, want 2/3", f)
	}
}

// History of the scan: a tried server is avoided while another remains;
// hedges are declined.
func TestPeakEWMAHistory(t *testing.T) {
	p := profileFor(PolicyPeakEWMA)
	pol := mustPolicy(t, p)
	v := latView(t0, latSrv{id: "a:1/0", lat: time.Millisecond, at: t0}, latSrv{id: "b:1/0", lat: 50 * time.Millisecond, at: t0})
	for k := 0; k < 50; k++ {
		d, err := pol.Select(&Input{Tablet: tablet(k), Profile: p, View: v, Now: t0, Rand: rng(uint64(k)),
			Attempts: []Attempt{att("a:1/0", "a", Busy)}})
		if err != nil || d.Server != "b:1/0" || d.PlanIndex != 1 || d.BusyTimeout != 33*time.Millisecond {
			t.Fatalf("after busy on a: %+v %v", d, err)
		}
	}
	_, err := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Now: t0, Rand: rng(1), Hedge: true,
		Attempts: []Attempt{att("a:1/0", "a", Slow)}})
	if !errors.Is(err, ErrNoHedge) {
		t.Fatalf("hedge: %v", err)
	}
}

// Options: defaults, JSON, and errors naming the field.
func TestPeakEWMAAndC3Options(t *testing.T) {
	if o := DefaultOptions(PolicyPeakEWMA); o.DecayTime != 10*time.Second || o.DefaultRTT != 0 {
		t.Errorf("peak-ewma defaults %v %v", o.DecayTime, o.DefaultRTT)
	}
	if o := DefaultOptions(PolicyC3); o.C3Clients != 1 || o.WriteSetSize != 3 {
		t.Errorf("c3 defaults %v %v", o.C3Clients, o.WriteSetSize)
	}
	ok := []string{
		`[{"isDefault":true,"policy":"peak-ewma","decayTime":"2s","defaultRTT":"30ms"}]`,
		`[{"isDefault":true,"policy":"c3","c3Clients":3,"writeSetSize":5}]`,
	}
	for _, doc := range ok {
		ps, err := ParseProfiles([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		o := ps.Default().Options
		if ps.Default().Policy == PolicyPeakEWMA && (o.DecayTime != 2*time.Second || o.DefaultRTT != 30*time.Millisecond) {
			t.Errorf("%s: %+v", doc, o)
		}
		if ps.Default().Policy == PolicyC3 && (o.C3Clients != 3 || o.WriteSetSize != 5) {
			t.Errorf("%s: %+v", doc, o)
		}
	}
	bad := []struct{ doc, field string }{
		{`[{"isDefault":true,"policy":"peak-ewma","decayTime":"0s"}]`, "decayTime"},
		{`[{"isDefault":true,"policy":"peak-ewma","defaultRTT":"-1s"}]`, "defaultRTT"},
		{`[{"isDefault":true,"policy":"c3","c3Clients":0}]`, "c3Clients"},
		{`[{"isDefault":true,"policy":"c3","decayTime":"1s"}]`, "decayTime"},
		{`[{"isDefault":true,"policy":"peak-ewma","c3Clients":2}]`, "c3Clients"},
		{`[{"isDefault":true,"policy":"peak-ewma","writeSetSize":2}]`, "writeSetSize"},
	}
	for _, b := range bad {
		_, err := ParseProfiles([]byte(b.doc))
		if err == nil || !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), `"`+b.field+`"`) {
			t.Errorf("%s: %v (want an error naming %q)", b.doc, err, b.field)
		}
	}
}

// The estimator table does not grow without bound as servers come and go.
func TestPeakEWMATablePruned(t *testing.T) {
	p := profileFor(PolicyPeakEWMA)
	pol := newPeakEWMAPolicy(p)
	for k := 0; k < 400; k++ {
		var ss []latSrv
		for j := 0; j < 4; j++ {
			ss = append(ss, latSrv{id: "h" + string(rune('a'+j)) + ":1/" + string(rune('0'+k%10)) + string(rune('a'+k/10%26)) + string(rune('a'+k/260)),
				lat: time.Millisecond, at: t0})
		}
		v := latView(t0, ss...)
		if _, err := pol.Select(&Input{Tablet: tablet(k), Profile: p, View: v, Now: t0, Rand: rng(uint64(k))}); err != nil {
			t.Fatal(err)
		}
	}
	pol.t.mu.Lock()
	n := len(pol.t.m)
	pol.t.mu.Unlock()
	if n > 2*4+64+2 {
		t.Fatalf("table holds %d servers", n)
	}
}

// The estimator table is shared by every tablet of a profile: concurrent
// Selects are safe (run with -race) and every decision stays valid.
func TestPeakEWMAConcurrent(t *testing.T) {
	p := profileFor(PolicyPeakEWMA)
	pol := mustPolicy(t, p)
	done := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func(g int) {
			r := rng(uint64(g))
			for k := 0; k < 200; k++ {
				at := t0.Add(time.Duration(k) * time.Millisecond)
				v := randomView(r, 20, at)
				if _, err := pol.Select(&Input{Tablet: tablet(k), Profile: p, View: v, Now: at, Rand: rng(uint64(k)), State: &TabletState{}}); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}(g)
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// An older view (a concurrent caller's) does not bring its old sample
// back: only samples taken after the last one ingested count.
func TestPeakEWMAStaleView(t *testing.T) {
	p := profileFor(PolicyPeakEWMA)
	pol := mustPolicy(t, p)
	ms := time.Millisecond
	at1, at2 := t0.Add(time.Second), t0.Add(2*time.Second)
	old := latView(at1, latSrv{id: "a:1/0", lat: 90 * ms, at: at1}, latSrv{id: "b:1/0", lat: 20 * ms, at: t0})
	cur := latView(at2, latSrv{id: "a:1/0", lat: 10 * ms, at: at2}, latSrv{id: "b:1/0", lat: 20 * ms, at: t0})
	sel := func(v *LoadView, now time.Time) Decision {
		d, err := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Now: now, Rand: rng(1), Explain: true})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	sel(old, at1)
	sel(cur, at2)
	d := sel(old, at2) // stale view, read at the current time
	for j, id := range d.Candidates {
		// a: 90 peak at 1 s, then 10 at 2 s blended with w = exp(−0.1).
		want := 90*math.Exp(-0.1) + 10*(1-math.Exp(-0.1))
		if id == "a:1/0" && math.Abs(d.Scores[j]-want) > 1e-6 {
			t.Fatalf("a's load %v after a stale view, want %v", d.Scores[j], want)
		}
	}
}
