package selection

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// Tests of the prequal policy. The pool tests port prequal-rs
// (github.com/prequal-rs/prequal, crates/prequal-core: src/pool.rs,
// src/history.rs, src/frac.rs unit tests and tests/balancer.rs) with
// microseconds as offsets from t0; the rest check the paper's rules
// (docs/policies.md, prequal).

func us(n int) time.Time { return t0.Add(time.Duration(n) * time.Microsecond) }

// rsEntry is prequal-rs pool.rs's entry(replica, recv_us, rif, latency_us)
// with uses_left 2.
func rsEntry(replica, recvUS, rif, latUS int) probeEntry {
	return probeEntry{server: ServerID(fmt.Sprintf("r%d:1/0", replica)), at: us(recvUS), rif: rif,
		latency: time.Duration(latUS) * time.Microsecond, usesLeft: 2}
}

func rsPool(entries ...probeEntry) *probePool {
	p := newProbePool(Options{ProbePoolSize: 16, ProbeMaxAge: time.Hour})
	for _, e := range entries {
		p.entries = slices.DeleteFunc(p.entries, func(x probeEntry) bool { return x.server == e.server })
		p.entries = append(p.entries, e)
		if len(p.entries) > p.capacity {
			p.removeOldest()
		}
	}
	return p
}

func poolServers(p *probePool) []string {
	var out []string
	for _, e := range p.entries {
		out = append(out, string(e.server))
	}
	slices.Sort(out)
	return out
}

func all(*probeEntry) bool { return true }

// pool.rs prefers_cold_low_latency_over_hot_low_latency.
func TestPrequalPoolPrefersColdLowLatency(t *testing.T) {
	p := rsPool(rsEntry(0, 0, 10, 1), rsEntry(1, 0, 2, 50), rsEntry(2, 0, 3, 20))
	if k := p.best(t0, 5, true, all); p.entries[k].server != "r2:1/0" {
		t.Fatalf("chose %s, want the cold r2 (r0 is faster but hot)", p.entries[k].server)
	}
	not2 := func(e *probeEntry) bool { return e.server != "r2:1/0" }
	if k := p.best(t0, 5, true, not2); p.entries[k].server != "r1:1/0" {
		t.Fatalf("without r2 chose %s, want r1", p.entries[k].server)
	}
}

// pool.rs all_hot_picks_min_rif.
func TestPrequalPoolAllHotPicksMinRIF(t *testing.T) {
	p := rsPool(rsEntry(0, 0, 10, 1), rsEntry(1, 0, 8, 90))
	if k := p.best(t0, 5, true, all); p.entries[k].server != "r1:1/0" {
		t.Fatalf("chose %s, want r1 (lowest RIF when all are hot)", p.entries[k].server)
	}
}

// pool.rs insert_dedupes_and_caps, through AddProbe.
func TestPrequalPoolDedupesAndCaps(t *testing.T) {
	p := newProbePool(Options{ProbePoolSize: 2})
	for i, r := range []int{0, 0, 1, 2} {
		p.add(ProbeReply{Server: ServerID(fmt.Sprintf("r%d:1/0", r)), RIF: 1, Latency: time.Microsecond, At: us(i + 1)}, nil)
	}
	if got, want := poolServers(p), []string{"r1:1/0", "r2:1/0"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("pool %v, want %v", got, want)
	}
}

// pool.rs consume_compensates_and_exhausts.
func TestPrequalPoolConsume(t *testing.T) {
	p := rsPool(rsEntry(4, 0, 1, 1))
	p.consume(0)
	if len(p.entries) != 1 || p.entries[0].rif != 2 {
		t.Fatalf("after one use: %+v, want RIF 2", p.entries)
	}
	p.consume(0)
	if len(p.entries) != 0 {
		t.Fatalf("after its budget: %+v, want gone", p.entries)
	}
}

// pool.rs expire_and_evictions.
func TestPrequalPoolExpireAndEvictions(t *testing.T) {
	p := rsPool(rsEntry(0, 0, 9, 1), rsEntry(1, 500, 1, 99), rsEntry(2, 900, 1, 5))
	p.maxAge = 1000 * time.Microsecond
	p.expire(us(1200))
	if got, want := poolServers(p), []string{"r1:1/0", "r2:1/0"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after expiry %v, want %v", got, want)
	}
	p.removeWorst(5, true)
	if got, want := poolServers(p), []string{"r2:1/0"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after removing the worst %v, want %v (none hot: the slowest goes)", got, want)
	}
}

// history.rs quantile_and_eviction and duplicates_evict_one_copy, with
// scanplane's window of prequalRIFHistory.
func TestPrequalRIFHistory(t *testing.T) {
	var h rifHistory
	if _, ok := h.threshold(0.5); ok {
		t.Fatal("empty history has a threshold")
	}
	h.push(999)
	for r := 1; r <= prequalRIFHistory; r++ {
		h.push(r)
	}
	for _, c := range []struct {
		q    float64
		want int
	}{{0, 1}, {0.5, 32}, {1, 64}, {0.84, 53}} {
		if got, _ := h.threshold(c.q); got != c.want {
			t.Errorf("threshold(%v) = %d, want %d (999 was evicted)", c.q, got, c.want)
		}
	}
	var d rifHistory
	d.push(2)
	d.push(2)
	d.push(7)
	for i := 3; i < prequalRIFHistory; i++ {
		d.push(5)
	}
	d.push(2) // evicts one 2
	if n := countOf(d.sorted, 2); n != 2 {
		t.Fatalf("2 appears %d times, want 2: %v", n, d.sorted)
	}
	if !slices.IsSorted(d.sorted) || len(d.sorted) != prequalRIFHistory {
		t.Fatalf("sorted window broken: %v", d.sorted)
	}
}

func countOf(a []int, v int) int {
	n := 0
	for _, x := range a {
		if x == v {
			n++
		}
	}
	return n
}

// frac.rs spreads_fractional_rate.
func TestPrequalFracTake(t *testing.T) {
	var acc float64
	var got []int
	for i := 0; i < 4; i++ {
		got = append(got, take(&acc, 0.5))
	}
	if !reflect.DeepEqual(got, []int{0, 1, 0, 1}) || take(&acc, 3) != 3 {
		t.Fatalf("take: %v", got)
	}
}

func prequalProfile(mod func(*Options)) *Profile {
	p := profileFor(PolicyPrequal)
	if mod != nil {
		mod(&p.Options)
	}
	return p
}

// rsView: n servers "rI:1/0" on hosts "rI".
func rsView(n int) *LoadView {
	var ss []*ServerLoad
	for i := 0; i < n; i++ {
		ss = append(ss, srv(fmt.Sprintf("r%d:1/0", i), fmt.Sprintf("r%d", i)))
	}
	return view(ss...)
}

func replicaOf(id ServerID) int {
	var r int
	fmt.Sscanf(string(id), "r%d:", &r)
	return r
}

// balancer.rs probe_targets_are_distinct_and_rate_limited.
func TestPrequalProbeTargets(t *testing.T) {
	p := prequalProfile(func(o *Options) { o.ProbesPerQuery = 2.5 })
	pol := mustPolicy(t, p).(prequalPolicy)
	v := rsView(10)
	r := rng(7)
	var counts []int
	for i := 0; i < 4; i++ {
		ts := pol.ProbeTargets(&Input{Profile: p, View: v, Rand: r, Now: t0})
		counts = append(counts, len(ts))
		u := slices.Clone(ts)
		slices.Sort(u)
		if len(slices.Compact(u)) != len(ts) {
			t.Fatalf("targets not distinct: %v", ts)
		}
		for _, id := range ts {
			if v.Server(id) == nil {
				t.Fatalf("target %s not in the view", id)
			}
		}
	}
	if !reflect.DeepEqual(counts, []int{2, 3, 2, 3}) {
		t.Fatalf("targets per query %v, want [2 3 2 3]", counts)
	}
	tiny := mustPolicy(t, profileFor(PolicyPrequal)).(prequalPolicy)
	if n := len(tiny.ProbeTargets(&Input{Profile: profileFor(PolicyPrequal), View: rsView(2), Rand: r})); n != 2 {
		t.Fatalf("2 servers, r_probe 3: %d targets, want 2", n)
	}
	// Dead servers and other groups are never probed.
	mixed := view(srv("a:1/0", "a"), srv("b:1/0", "b", dead()), srv("c:1/0", "c", withGroup("batch")))
	for i := 0; i < 20; i++ {
		if ts := tiny.ProbeTargets(&Input{Profile: profileFor(PolicyPrequal), View: mixed, Rand: r}); !reflect.DeepEqual(ts, []ServerID{"a:1/0"}) {
			t.Fatalf("targets %v, want only the live default-group server", ts)
		}
	}
}

// balancer.rs routes_away_from_loaded_replicas: probes answered with RIF
// [40 1 35 50] (latency RIF × 100 µs), no removals: the lightly loaded
// replica gets most queries.
func TestPrequalRoutesAwayFromLoaded(t *testing.T) {
	p := prequalProfile(func(o *Options) { o.ProbeRemovesPerQuery = 0 })
	pol := mustPolicy(t, p).(prequalPolicy)
	v := rsView(4)
	r := rng(7)
	rif := []int{40, 1, 35, 50}
	hits := make([]int, 4)
	for now := 0; now < 200; now++ {
		in := &Input{Tablet: tablet(now), Profile: p, View: v, Now: us(now), Rand: r}
		for _, id := range pol.ProbeTargets(in) {
			x := rif[replicaOf(id)]
			pol.AddProbe(ProbeReply{Server: id, RIF: x, Latency: time.Duration(x) * 100 * time.Microsecond, At: us(now)}, r)
		}
		d, err := pol.Select(in)
		if err != nil {
			t.Fatal(err)
		}
		hits[replicaOf(d.Server)]++
	}
	if hits[1] <= 150 {
		t.Fatalf("hits %v: replica 1 (RIF 1) should get more than 150 of 200", hits)
	}
}

// balancer.rs stale_probes_expire.
func TestPrequalStaleProbesExpire(t *testing.T) {
	p := prequalProfile(func(o *Options) { o.ProbeMaxAge = 10 * time.Microsecond })
	pol := mustPolicy(t, p).(prequalPolicy)
	v := rsView(4)
	for i := 0; i < 4; i++ {
		pol.AddProbe(ProbeReply{Server: ServerID(fmt.Sprintf("r%d:1/0", i)), At: us(0)}, nil)
	}
	if _, err := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Now: us(100), Rand: rng(1)}); err != nil {
		t.Fatal(err)
	}
	if n := len(pol.pool.entries); n != 0 {
		t.Fatalf("pool holds %d answers older than the max age", n)
	}
}

// The reference's worked example of the hot-cold rule and of the RIF
// increment after use: answers A (RIF 1, 30 ms), B (RIF 2, 10 ms), C (RIF 9,
// 1 ms). The 0.84 quantile of {1, 2, 9} is sorted[floor(2 × 0.84)] = 2, so
// C is hot: B, the fastest cold answer, wins. B's RIF becomes 3 (hot now),
// so the next query takes A (RIF 1 → 2, still cold: 2 is not above 2),
// and the one after A again (→ 3). Then all are hot: the lowest RIF, A and
// B at 3, and between them the lower latency, B.
func TestPrequalHotColdWorkedExample(t *testing.T) {
	p := prequalProfile(func(o *Options) { o.ProbeRemovesPerQuery = 0 })
	pol := mustPolicy(t, p).(prequalPolicy)
	v := view(srv("a:1/0", "a"), srv("b:1/0", "b"), srv("c:1/0", "c"))
	pol.pool.servers = 3 // n ≤ m: every answer may be reused up to 16 times
	for _, a := range []struct {
		id  ServerID
		rif int
		lat time.Duration
	}{{"a:1/0", 1, 30 * time.Millisecond}, {"b:1/0", 2, 10 * time.Millisecond}, {"c:1/0", 9, time.Millisecond}} {
		pol.AddProbe(ProbeReply{Server: a.id, RIF: a.rif, Latency: a.lat, At: t0}, nil)
	}
	var got []ServerID
	for i := 0; i < 4; i++ {
		d, err := pol.Select(&Input{Tablet: tablet(i), Profile: p, View: v, Now: t0, Rand: rng(uint64(i))})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d.Server)
	}
	want := []ServerID{"b:1/0", "a:1/0", "a:1/0", "b:1/0"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("choices %v, want %v", got, want)
	}
	rifs := map[ServerID]int{}
	for _, e := range pol.pool.entries {
		rifs[e.server] = e.rif
	}
	if !reflect.DeepEqual(rifs, map[ServerID]int{"a:1/0": 3, "b:1/0": 4, "c:1/0": 9}) {
		t.Fatalf("RIFs after use %v", rifs)
	}
}

// b_reuse = 1 + δ/((1 − m/n)·r_probe − r_remove): m 16, n 100, r_probe 3,
// r_remove 1 gives 1 + 1/1.52 ≈ 1.658, randomly rounded; n ≤ m (or a
// non-positive denominator) allows prequalMaxReuse.
func TestPrequalReuseBudget(t *testing.T) {
	p := newProbePool(DefaultOptions(PolicyPrequal))
	p.servers = 100
	if b := p.reuseBudget(nil); b != 1 {
		t.Fatalf("rounded down: %d, want 1", b)
	}
	r := rng(3)
	sum := 0
	const n = 20000
	for i := 0; i < n; i++ {
		sum += p.reuseBudget(r)
	}
	want := 1 + 1/((1-16.0/100)*3-1)
	if mean := float64(sum) / n; math.Abs(mean-want) > 0.02 {
		t.Fatalf("mean budget %.3f, want %.3f", mean, want)
	}
	for _, servers := range []int{0, 6, 16, 20} { // 20: (1 − 0.8)·3 − 1 < 0
		p.servers = servers
		if b := p.reuseBudget(r); b != prequalMaxReuse {
			t.Errorf("%d servers: budget %d, want %d", servers, b, prequalMaxReuse)
		}
	}
}

// Each query removes r_remove answers, the oldest and the worst in turn.
func TestPrequalRemovalAlternates(t *testing.T) {
	p := prequalProfile(nil)
	pol := mustPolicy(t, p).(prequalPolicy)
	v := rsView(8)
	// r7 is far the slowest; r0 the oldest. Queries go to... a server tried
	// by the scan is not eligible: every pooled one is "tried", so the pick
	// is random and the pool changes only by removal.
	for i := 0; i < 8; i++ {
		pol.AddProbe(ProbeReply{Server: ServerID(fmt.Sprintf("r%d:1/0", i)), RIF: 1, Latency: time.Duration(1+i*i) * time.Millisecond, At: us(i)}, nil)
	}
	var tried []Attempt
	for i := 0; i < 8; i++ {
		tried = append(tried, att(ServerID(fmt.Sprintf("r%d:1/0", i)), fmt.Sprintf("r%d", i), Busy))
	}
	var gone []string
	for q := 0; q < 4; q++ {
		before := poolServers(pol.pool)
		if _, err := pol.Select(&Input{Tablet: tablet(q), Profile: p, View: v, Now: us(10), Rand: rng(1), Attempts: tried}); err != nil {
			t.Fatal(err)
		}
		after := poolServers(pol.pool)
		for _, s := range before {
			if !slices.Contains(after, s) {
				gone = append(gone, s)
			}
		}
	}
	if want := []string{"r0:1/0", "r7:1/0", "r1:1/0", "r6:1/0"}; !reflect.DeepEqual(gone, want) {
		t.Fatalf("removed %v, want %v (oldest, worst, oldest, worst)", gone, want)
	}
}

// A scan's tried servers, dead servers, other groups and servers gone from
// the view are never chosen from the pool; with no usable answer the pick
// is random over the untried servers.
func TestPrequalEligibility(t *testing.T) {
	p := prequalProfile(func(o *Options) { o.ProbeRemovesPerQuery = 0 })
	pol := mustPolicy(t, p).(prequalPolicy)
	v := view(srv("a:1/0", "a"), srv("b:1/0", "b"), srv("d:1/0", "d", dead()), srv("g:1/0", "g", withGroup("batch")))
	for _, id := range []ServerID{"b:1/0", "d:1/0", "g:1/0", "gone:1/0"} {
		pol.AddProbe(ProbeReply{Server: id, RIF: 0, Latency: time.Microsecond, At: t0}, nil)
	}
	pol.AddProbe(ProbeReply{Server: "a:1/0", RIF: 0, Latency: time.Second, At: t0}, nil)
	d, _ := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Now: t0, Rand: rng(1)})
	if d.Server != "b:1/0" {
		t.Fatalf("chose %s, want b (the fastest live answer)", d.Server)
	}
	tried := []Attempt{att("b:1/0", "b", Busy)}
	d, _ = pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Now: t0, Rand: rng(1), Attempts: tried})
	if d.Server != "a:1/0" {
		t.Fatalf("after b was busy chose %s, want a", d.Server)
	}
	// Empty pool: random over the untried.
	empty := mustPolicy(t, p).(prequalPolicy)
	seen := map[ServerID]int{}
	for i := 0; i < 200; i++ {
		d, err := empty.Select(&Input{Tablet: tablet(i), Profile: p, View: v, Now: t0, Rand: rng(uint64(i))})
		if err != nil {
			t.Fatal(err)
		}
		seen[d.Server]++
	}
	if len(seen) != 2 || seen["a:1/0"] < 70 || seen["b:1/0"] < 70 {
		t.Fatalf("empty pool picks %v, want a and b about evenly", seen)
	}
}

// An explained decision names the answers in HCL order and leaves the pool
// as it was; hedges are declined.
func TestPrequalExplainAndHedge(t *testing.T) {
	p := prequalProfile(nil)
	pol := mustPolicy(t, p).(prequalPolicy)
	v := view(srv("a:1/0", "a"), srv("b:1/0", "b"), srv("c:1/0", "c"))
	pol.AddProbe(ProbeReply{Server: "a:1/0", RIF: 1, Latency: 30 * time.Millisecond, At: t0}, nil)
	pol.AddProbe(ProbeReply{Server: "b:1/0", RIF: 2, Latency: 10 * time.Millisecond, At: t0}, nil)
	pol.AddProbe(ProbeReply{Server: "c:1/0", RIF: 9, Latency: time.Millisecond, At: t0}, nil)
	before := slices.Clone(pol.pool.entries)
	d, err := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Now: t0, Rand: rng(1), Explain: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := []ServerID{"b:1/0", "a:1/0", "c:1/0"}; !reflect.DeepEqual(d.Candidates, want) || d.Server != "b:1/0" {
		t.Fatalf("explain: %v → %s, want %v → b", d.Candidates, d.Server, want)
	}
	if want := []float64{10, 30, 1e9 + 9}; !reflect.DeepEqual(d.Scores, want) {
		t.Fatalf("scores %v, want %v", d.Scores, want)
	}
	if !reflect.DeepEqual(pol.pool.entries, before) {
		t.Fatalf("explain changed the pool: %+v, was %+v", pol.pool.entries, before)
	}
	_, err = pol.Select(&Input{Tablet: tablet(1), Profile: p, View: v, Now: t0, Rand: rng(1), Hedge: true,
		Attempts: []Attempt{att("a:1/0", "a", Slow)}})
	if err != ErrNoHedge {
		t.Fatalf("hedge: %v, want ErrNoHedge", err)
	}
}

// Bad answers are ignored; options parse and reject bad values naming the
// field.
func TestPrequalBadInputAndOptions(t *testing.T) {
	pol := mustPolicy(t, prequalProfile(nil)).(prequalPolicy)
	for _, r := range []ProbeReply{{Server: "a:1/0", RIF: -1, At: t0}, {Server: "a:1/0"}, {RIF: 1, At: t0}} {
		pol.AddProbe(r, nil)
	}
	if len(pol.pool.entries) != 0 || len(pol.pool.hist.sorted) != 0 {
		t.Fatalf("bad answers pooled: %+v", pol.pool.entries)
	}
	ps, err := ParseProfiles([]byte(`[{"isDefault":true,"policy":"prequal","probesPerQuery":2.5,"probePoolSize":8,"probeMaxAge":"500ms","probeRemovesPerQuery":0.5,"rifQuantile":0.6}]`))
	if err != nil {
		t.Fatal(err)
	}
	o := ps.Default().Options
	if o.ProbesPerQuery != 2.5 || o.ProbePoolSize != 8 || o.ProbeMaxAge != 500*time.Millisecond || o.ProbeRemovesPerQuery != 0.5 || o.RIFQuantile != 0.6 {
		t.Fatalf("options %+v", o)
	}
	for _, bad := range []struct{ json, field string }{
		{`"rifQuantile":1.5`, "rifQuantile"},
		{`"probePoolSize":0`, "probePoolSize"},
		{`"probeMaxAge":"0s"`, "probeMaxAge"},
		{`"probesPerQuery":-1`, "probesPerQuery"},
	} {
		_, err := ParseProfiles([]byte(`[{"isDefault":true,"policy":"prequal",` + bad.json + `}]`))
		if err == nil || !strings.Contains(err.Error(), bad.field) {
			t.Errorf("%s: error %v does not name %s", bad.json, err, bad.field)
		}
	}
	if _, err := ParseProfiles([]byte(`[{"isDefault":true,"policy":"random","rifQuantile":0.5}]`)); err == nil {
		t.Error("rifQuantile accepted for random")
	}
}

// The conformance invariants hold with a pool fed by answers from any
// server (live, dead, foreign, unknown), at random RIFs and ages.
func TestPrequalConformanceWithProbes(t *testing.T) {
	for _, q := range []float64{0.84, 0.6} {
		p := prequalProfile(func(o *Options) { o.RIFQuantile = q })
		pc := policyCase{fmt.Sprintf("prequal+probes(q=%v)", q), p}
		pol := mustPolicy(t, p).(prequalPolicy)
		r := rng(21)
		for iter := 0; iter < 300; iter++ {
			n := []int{0, 1, 2, 3, 7, 25, 120}[iter%7]
			at := t0.Add(time.Duration(iter) * 100 * time.Millisecond)
			v := randomView(r, n, at)
			for k := 0; k < 4; k++ {
				hedge := r.IntN(3) == 0
				in := &Input{Tablet: tablet(r.IntN(50)), Profile: p, Attempts: randomHistory(r, v, hedge), Hedge: hedge,
					View: v, Now: at, Rand: rng(uint64(iter*10 + k)), State: &TabletState{}, Explain: r.IntN(4) == 0}
				for _, id := range pol.ProbeTargets(in) {
					pol.AddProbe(ProbeReply{Server: id, RIF: r.IntN(20), Latency: time.Duration(r.IntN(50)) * time.Millisecond,
						At: at.Add(-time.Duration(r.IntN(1500)) * time.Millisecond)}, r)
				}
				if len(v.Servers) > 0 {
					s := v.Servers[r.IntN(len(v.Servers))] // maybe dead or foreign
					pol.AddProbe(ProbeReply{Server: s.ID, RIF: 0, At: at}, r)
				}
				d, err := pol.Select(in)
				checkDecision(t, pc, in, d, err)
				if len(pol.pool.entries) > pol.pool.capacity {
					t.Fatalf("pool holds %d > %d", len(pol.pool.entries), pol.pool.capacity)
				}
			}
		}
	}
}
