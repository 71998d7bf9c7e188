package selection

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// The conformance suite runs against every policy (and hedging variants).

type policyCase struct {
	name string
	p    *Profile
}

func conformanceCases() []policyCase {
	var out []policyCase
	for _, n := range PolicyNames() {
		out = append(out, policyCase{n, profileFor(n)})
	}
	for _, n := range []string{"clickhouse-random", "clickhouse-in_order", "clickhouse-round_robin"} {
		p := profileFor(n)
		p.Options.Hedge = true
		out = append(out, policyCase{n + "+hedge", p})
	}
	p := profileFor(PolicyRibbonZone)
	p.Options.SubsetSize = 0
	p.Options.ActiveConnectionsLimit = 3
	out = append(out, policyCase{"ribbon-zone+nosubset", p})
	p = profileFor(PolicyBookKeeper)
	p.Options.WriteSetSize = 0
	out = append(out, policyCase{"bookkeeper+allreplicas", p})
	p = profileFor(PolicyPeakEWMA)
	p.Options.DefaultRTT = 5 * time.Millisecond
	p.Options.DecayTime = time.Second
	out = append(out, policyCase{"peak-ewma+defaultRTT", p})
	p = profileFor(PolicyC3)
	p.Options.WriteSetSize = 0
	p.Options.C3Clients = 3
	out = append(out, policyCase{"c3+allreplicas+3clients", p})
	p = profileFor(PolicyPrequal)
	p.Options.RIFQuantile = 0.6
	p.Options.ProbePoolSize = 4
	p.Options.ProbesPerQuery = 0.5
	out = append(out, policyCase{"prequal+q0.6+pool4", p})
	return out
}

// randomView: n servers of group "default" on hosts of 1–4 servers in 3
// zones, plus foreign-group and dead servers, with random load and health.
func randomView(r *rand.Rand, n int, at time.Time) *LoadView {
	var ss []*ServerLoad
	host := 0
	for len(ss) < n {
		per := 1 + r.IntN(4)
		for i := 0; i < per && len(ss) < n; i++ {
			h := fmt.Sprintf("host%04d", host)
			s := &ServerLoad{ID: ServerID(fmt.Sprintf("%s:9000/%d", h, i)), Host: h, Zone: fmt.Sprintf("z%d", host%3),
				Group: DefaultGroup, Alive: r.IntN(10) > 0, InFlight: r.IntN(4), QueueLen: r.IntN(3), Active: r.IntN(2),
				Workers: r.IntN(4), LastHeartbeat: at.Add(-time.Duration(r.IntN(3000)) * time.Millisecond),
				StartLatency: time.Duration(r.IntN(50)) * time.Millisecond}
			if r.IntN(5) == 0 {
				s.ConsecutiveFailures, s.LastFailure = r.IntN(8), at.Add(-time.Duration(r.IntN(40))*time.Second)
				s.RecentFailures = []time.Time{s.LastFailure}
			}
			if r.IntN(4) == 0 {
				s.Errors = []DecayedCount{{Count: uint32(r.IntN(5)), Origin: at}}
				s.Slowdowns = []DecayedCount{{Count: uint32(r.IntN(3)), Origin: at}}
				s.Busy = []DecayedCount{{Count: uint32(r.IntN(3)), Origin: at}, {Count: uint32(r.IntN(3)), Origin: at}}
			}
			ss = append(ss, s)
		}
		host++
	}
	// Foreign group and dead servers that must never be chosen.
	for i := 0; i < 1+n/10; i++ {
		h := fmt.Sprintf("other%03d", i)
		ss = append(ss, &ServerLoad{ID: ServerID(h + ":1/0"), Host: h, Group: "batch", Alive: true},
			&ServerLoad{ID: ServerID(h + ":2/0"), Host: h, Group: DefaultGroup, Alive: false})
	}
	v := NewLoadView(ss, []DecayParams{DefaultDecay}, at)
	v.StartLatencyP95 = time.Duration(r.IntN(40)) * time.Millisecond
	v.RecentDispatches = uint64(r.IntN(1000))
	v.RecentHedges = uint64(r.IntN(60))
	return v
}

func liveInGroup(v *LoadView, group string) int {
	n := 0
	for _, s := range v.Servers {
		if s.Alive && groupName(s.Group) == groupName(group) {
			n++
		}
	}
	return n
}

var allResults = []AttemptResult{Pending, Started, Busy, Error, Timeout, Slow, Cancelled, Stalled}

// randomHistory: up to 6 attempts on servers of v (and some unknown ones).
func randomHistory(r *rand.Rand, v *LoadView, hedge bool) []Attempt {
	var h []Attempt
	k := r.IntN(7)
	for i := 0; i < k; i++ {
		var id ServerID
		var host string
		if len(v.Servers) > 0 && r.IntN(8) > 0 {
			s := v.Servers[r.IntN(len(v.Servers))]
			id, host = s.ID, s.Host
		} else {
			id, host = ServerID(fmt.Sprintf("gone%d:1/0", i)), fmt.Sprintf("gone%d", i)
		}
		res := allResults[r.IntN(len(allResults))]
		if hedge && i == k-1 {
			res = Slow
		}
		h = append(h, Attempt{Server: id, Host: host, Result: res, Start: v.At, Hedge: i > 0 && r.IntN(2) == 0})
	}
	return h
}

// checkDecision asserts the invariants of one call.
func checkDecision(t *testing.T, pc policyCase, in *Input, d Decision, err error) {
	t.Helper()
	live := liveInGroup(in.View, pc.p.Group)
	if err != nil {
		switch {
		case errors.Is(err, ErrNoServer):
			if live > 0 && !in.Hedge {
				t.Fatalf("%s: ErrNoServer with %d live servers", pc.name, live)
			}
		case errors.Is(err, ErrNoHedge):
			if !in.Hedge {
				t.Fatalf("%s: ErrNoHedge without a hedge request", pc.name)
			}
		default:
			t.Fatalf("%s: unexpected error %v", pc.name, err)
		}
		return
	}
	s := in.View.Server(d.Server)
	if s == nil {
		t.Fatalf("%s: chose %q, not in the view", pc.name, d.Server)
	}
	if !s.Alive {
		t.Fatalf("%s: chose dead server %s while %d live", pc.name, d.Server, live)
	}
	if groupName(s.Group) != groupName(pc.p.Group) {
		t.Fatalf("%s: chose %s of group %q, profile group %q", pc.name, d.Server, s.Group, pc.p.Group)
	}
	if d.Host != s.Host {
		t.Fatalf("%s: host %q != server's %q", pc.name, d.Host, s.Host)
	}
	if in.Hedge {
		for _, a := range in.Attempts {
			if a.Server == d.Server && inFlight(a.Result) {
				t.Fatalf("%s: hedge returned in-flight server %s (%v)", pc.name, d.Server, a.Result)
			}
		}
		if d.Delay != 0 {
			t.Fatalf("%s: hedge with delay %v", pc.name, d.Delay)
		}
	}
	if d.BusyTimeout < 0 || d.Delay < 0 || d.HedgeDelay < 0 || d.DataTimeout < 0 || d.Delay > 30*time.Second {
		t.Fatalf("%s: bad durations %+v", pc.name, d)
	}
	plans := pc.p.AttemptPlans
	if len(plans) == 0 {
		plans = defaultPlans
	}
	if d.PlanIndex < 0 || d.PlanIndex >= len(plans) {
		t.Fatalf("%s: plan index %d", pc.name, d.PlanIndex)
	}
	if !in.Explain && d.Candidates != nil {
		t.Fatalf("%s: candidates without Explain", pc.name)
	}
	if in.Explain && len(d.Candidates) == 0 {
		t.Fatalf("%s: no candidates with Explain", pc.name)
	}
}

func TestConformanceInvariants(t *testing.T) {
	for _, pc := range conformanceCases() {
		t.Run(pc.name, func(t *testing.T) {
			pol := mustPolicy(t, pc.p)
			r := rng(77)
			for iter := 0; iter < 300; iter++ {
				n := []int{0, 1, 2, 3, 7, 25, 120}[iter%7]
				at := t0.Add(time.Duration(iter) * time.Second)
				v := randomView(r, n, at)
				st := &TabletState{}
				for k := 0; k < 4; k++ {
					hedge := r.IntN(3) == 0
					in := &Input{Tablet: tablet(r.IntN(50)), Profile: pc.p, Attempts: randomHistory(r, v, hedge), Hedge: hedge,
						View: v, Now: at, Rand: rng(uint64(iter*10 + k)), State: st, LocalHost: "host0001", Explain: r.IntN(4) == 0}
					d, err := pol.Select(in)
					checkDecision(t, pc, in, d, err)
				}
			}
		})
	}
}

func TestConformanceGroups(t *testing.T) {
	for _, pc := range conformanceCases() {
		t.Run(pc.name, func(t *testing.T) {
			p := *pc.p
			p.Group = "batch"
			pol := mustPolicy(t, &p)
			r := rng(3)
			for iter := 0; iter < 100; iter++ {
				v := randomView(r, 30, t0)
				d, err := pol.Select(&Input{Tablet: tablet(iter), Profile: &p, View: v, Now: t0, Rand: rng(uint64(iter))})
				checkDecision(t, policyCase{pc.name, &p}, &Input{View: v}, d, err)
				if err != nil || v.Server(d.Server).Group != "batch" {
					t.Fatalf("group batch: %v %v", d.Server, err)
				}
			}
			// Group with no server at all.
			p.Group = "nobody"
			if _, err := mustPolicy(t, &p).Select(&Input{Tablet: tablet(1), Profile: &p, View: randomView(r, 30, t0), Rand: rng(1)}); !errors.Is(err, ErrNoServer) {
				t.Fatalf("empty group: %v", err)
			}
		})
	}
}

func TestConformanceSizes(t *testing.T) {
	for _, pc := range conformanceCases() {
		t.Run(pc.name, func(t *testing.T) {
			pol := mustPolicy(t, pc.p)
			// 0 servers (and nil view): ErrNoServer.
			for _, v := range []*LoadView{nil, view(), view(srv("a:1/0", "a", dead()))} {
				if _, err := pol.Select(&Input{Tablet: tablet(1), Profile: pc.p, View: v, Rand: rng(1)}); !errors.Is(err, ErrNoServer) {
					t.Fatalf("no servers: %v", err)
				}
			}
			// 1 server: always it, whatever the history (hedges may decline).
			one := view(srv("only:1/0", "only"), srv("dead:1/0", "dead", dead()))
			h := []Attempt{att("only:1/0", "only", Busy), att("only:1/0", "only", Error), att("dead:1/0", "dead", Busy)}
			for k := 0; k <= len(h); k++ {
				d, err := pol.Select(&Input{Tablet: tablet(1), Profile: pc.p, View: one, Rand: rng(1), Attempts: h[:k], Now: t0})
				if err != nil || d.Server != "only:1/0" {
					t.Fatalf("one server, %d attempts: %v %v", k, d.Server, err)
				}
			}
			in := &Input{Tablet: tablet(1), Profile: pc.p, View: one, Rand: rng(1), Hedge: true, Now: t0,
				Attempts: []Attempt{att("only:1/0", "only", Slow)}}
			if _, err := pol.Select(in); !errors.Is(err, ErrNoHedge) {
				t.Fatalf("one server hedge: %v", err)
			}
			// 1000 servers.
			r := rng(5)
			v := randomView(r, 1000, t0)
			st := &TabletState{}
			for k := 0; k < 50; k++ {
				in := &Input{Tablet: tablet(k), Profile: pc.p, View: v, Now: t0, Rand: rng(uint64(k)), State: st,
					Attempts: randomHistory(r, v, k%2 == 0), Hedge: k%2 == 0}
				d, err := pol.Select(in)
				checkDecision(t, pc, in, d, err)
			}
		})
	}
}

func TestConformanceDeterministic(t *testing.T) {
	for _, pc := range conformanceCases() {
		t.Run(pc.name, func(t *testing.T) {
			run := func() []string {
				var out []string
				r := rng(99)
				st := &TabletState{}
				pol := mustPolicy(t, pc.p)
				for k := 0; k < 200; k++ {
					v := randomView(r, 5+k%40, t0.Add(time.Duration(k)*time.Second))
					hedge := k%3 == 0
					in := &Input{Tablet: tablet(k % 5), Profile: pc.p, View: v, Now: v.At, Rand: rng(uint64(k)), State: st,
						Attempts: randomHistory(r, v, hedge), Hedge: hedge, Explain: k%4 == 0}
					d, err := pol.Select(in)
					out = append(out, fmt.Sprintf("%+v %v", d, err))
				}
				return out
			}
			a, b := run(), run()
			if !reflect.DeepEqual(a, b) {
				for i := range a {
					if a[i] != b[i] {
						t.Fatalf("call %d differs:\n%s\n%s", i, a[i], b[i])
					}
				}
			}
		})
	}
}

// Servers join and leave between attempts of one scan: every decision is
// valid for the view it was made with, history of departed servers is
// harmless, and a scan keeps going until it gets a server.
func TestConformanceChurn(t *testing.T) {
	for _, pc := range conformanceCases() {
		t.Run(pc.name, func(t *testing.T) {
			pol := mustPolicy(t, pc.p)
			r := rng(8)
			for scan := 0; scan < 40; scan++ {
				members := map[int]bool{}
				for i := 0; i < 12; i++ {
					members[r.IntN(30)] = true
				}
				st := &TabletState{}
				var h []Attempt
				for step := 0; step < 10; step++ {
					// Churn: some leave, some join.
					for i := 0; i < 3; i++ {
						delete(members, r.IntN(30))
						members[r.IntN(30)] = true
					}
					var ss []*ServerLoad
					for i := range members {
						hn := fmt.Sprintf("h%02d", i/2)
						ss = append(ss, srv(fmt.Sprintf("%s:1/%d", hn, i%2), hn, withZone(fmt.Sprintf("z%d", i%3))))
					}
					v := view(ss...)
					hedge := step%4 == 3
					in := &Input{Tablet: tablet(scan), Profile: pc.p, View: v, Now: t0.Add(time.Duration(step) * time.Second),
						Rand: rng(uint64(scan*100 + step)), State: st, Attempts: h, Hedge: hedge}
					if hedge && len(h) > 0 {
						h[len(h)-1].Result = Slow
					}
					d, err := pol.Select(in)
					checkDecision(t, pc, in, d, err)
					if err == nil {
						res := Busy
						if step%3 == 1 {
							res = Error
						}
						h = append(h, Attempt{Server: d.Server, Host: d.Host, Result: res, Hedge: hedge})
					}
				}
			}
		})
	}
}

// Caches in TabletState never change a decision: a state warmed on other
// tablets and views decides like a fresh one (policies whose state holds
// counters or subsets are excluded).
func TestConformanceStateCaches(t *testing.T) {
	for _, pc := range conformanceCases() {
		switch pc.p.Policy {
		case PolicyRoundRobin, PolicyRibbonZone, "clickhouse-round_robin":
			continue
		}
		t.Run(pc.name, func(t *testing.T) {
			pol := mustPolicy(t, pc.p)
			r := rng(4)
			warm := &TabletState{}
			views := []*LoadView{randomView(r, 40, t0), randomView(r, 40, t0), randomView(r, 7, t0)}
			for k := 0; k < 300; k++ {
				v := views[r.IntN(len(views))]
				tab := tablet(r.IntN(6))
				h := randomHistory(r, v, false)
				seed := uint64(k)
				a, errA := pol.Select(&Input{Tablet: tab, Profile: pc.p, View: v, Now: t0, Rand: rng(seed), State: warm, Attempts: h})
				b, errB := pol.Select(&Input{Tablet: tab, Profile: pc.p, View: v, Now: t0, Rand: rng(seed), State: &TabletState{}, Attempts: h})
				if !reflect.DeepEqual(a, b) || (errA == nil) != (errB == nil) {
					t.Fatalf("call %d: warm %+v %v, fresh %+v %v", k, a, errA, b, errB)
				}
			}
		})
	}
}

// A view built as a struct literal (not NewLoadView) still works.
func TestConformanceLiteralView(t *testing.T) {
	for _, pc := range conformanceCases() {
		v := &LoadView{Servers: []*ServerLoad{srv("b:1/0", "b"), srv("a:1/0", "a")}, At: t0}
		d, err := mustPolicy(t, pc.p).Select(&Input{Tablet: tablet(1), Profile: pc.p, View: v, Rand: rng(1), Now: t0})
		if err != nil || (d.Server != "a:1/0" && d.Server != "b:1/0") {
			t.Errorf("%s: literal view: %v %v", pc.name, d.Server, err)
		}
	}
}

// Hand-built profiles with zero-valued options (and no plans) still obey
// every invariant.
func TestConformanceZeroOptions(t *testing.T) {
	for _, name := range PolicyNames() {
		p := &Profile{Name: name, Policy: name}
		pc := policyCase{name + "+zero", p}
		pol := mustPolicy(t, p)
		r := rng(12)
		for iter := 0; iter < 150; iter++ {
			v := randomView(r, []int{0, 1, 4, 40}[iter%4], t0)
			hedge := iter%3 == 0
			in := &Input{Tablet: tablet(iter % 9), Profile: p, View: v, Now: t0, Rand: rng(uint64(iter)),
				Attempts: randomHistory(r, v, hedge), Hedge: hedge, Explain: iter%5 == 0}
			d, err := pol.Select(in)
			checkDecision(t, pc, in, d, err)
		}
	}
}
