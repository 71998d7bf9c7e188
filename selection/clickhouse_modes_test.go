package selection

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// Ports of ClickHouse's src/Common/tests/gtest_get_priority_for_load_balancing.cpp
// (LongestCommonPrefixLength, LongestCommonSuffixLength).
func TestClickHouseCommonPrefixSuffix(t *testing.T) {
	prefix := []struct {
		a, b string
		want int
	}{
		{"sfe301", "sde301", 1}, {"sfe301", "sfe10101", 3}, {"sde101", "sde1010", 6}, {"sde101", "sde102", 5},
		{"abc", "abcdef", 3}, {"abc", "xyz", 0}, {"", "anything", 0},
		{"ABC", "abc", 0}, // case-sensitive, like nearest_hostname
	}
	for _, c := range prefix {
		if got := commonPrefixLen(c.a, c.b); got != c.want {
			t.Errorf("prefix(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
	suffix := []struct {
		a, b string
		want int
	}{
		{"et46gtghn.qc.localdomain", "tr676ddgh.td.localdomain", 12}, {"et46gtghn.qc.localdomain", "ab999.qc.localdomain", 15},
		{"def", "abcdef", 3}, {"abc", "xyz", 0}, {"anything", "", 0}, {"x.LOCAL", "y.local", 0},
	}
	for _, c := range suffix {
		if got := commonSuffixLen(c.a, c.b); got != c.want {
			t.Errorf("suffix(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// Ports of LongestCommonPrefixPicksClosest and LongestCommonSuffixPicksClosest:
// the replica with the longest common prefix (suffix) with the initiator's
// host name is chosen, whatever the random draw.
func TestClickHouseCommonPrefixSuffixPicksClosest(t *testing.T) {
	cases := []struct {
		mode, local string
		hosts       []string
		want        string
	}{
		{"hostname_longest_common_prefix", "sfe301", []string{"sde301", "sfe10101", "sde505"}, "sfe10101"},
		{"hostname_longest_common_prefix", "sde101", []string{"sde1010", "sde102", "sde103", "sde1020", "sde1030"}, "sde1010"},
		{"hostname_longest_common_suffix", "et46gtghn.qc.localdomain", []string{"tr676ddgh.td.localdomain", "ab999.qc.localdomain"}, "ab999.qc.localdomain"},
	}
	for _, c := range cases {
		var ss []*ServerLoad
		for _, h := range c.hosts {
			ss = append(ss, srv(h+":9000/0", h))
		}
		v := view(ss...)
		for seed := uint64(0); seed < 30; seed++ {
			d, err := chSelect(t, chProfile(c.mode), Input{Tablet: tablet(int(seed)), View: v, LocalHost: c.local, Rand: rng(seed)})
			if err != nil || d.Host != c.want {
				t.Fatalf("%s from %s: %v %v, want %s", c.mode, c.local, d.Host, err, c.want)
			}
		}
	}
}

// Port of ClickHouse's tests/integration/test_distributed_load_balancing/test.py:
// three replicas n1, n2, n3 of one shard, queries from n1 with
// prefer_localhost_replica = 0; each test makes `queries` = 30 queries (3
// for round robin) and checks the set of replicas that answered. ClickHouse's
// configuration order (n1 first) is scanplane's per-tablet rendezvous order,
// so in_order and first_or_random pick that order's first replica.
func TestClickHouseLoadBalancingIntegration(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	mk := func(mods ...func(*ServerLoad)) *LoadView {
		var ss []*ServerLoad
		for _, n := range nodes {
			ss = append(ss, srv(n+":9000/0", n, mods...))
		}
		return view(ss...)
	}
	v := mk()
	tab := tablet(7)
	first := RendezvousOrder(tab, v.group("").alive, "")[0].Host
	set := func(names ...string) string { return strings.Join(names, ",") }
	cases := []struct {
		name, mode string
		queries    int
		v          *LoadView
		mod        func(*Options)
		want       string
	}{
		{"default", "random", 30, v, nil, set("n1", "n2", "n3")},
		{"nearest_hostname", "nearest_hostname", 30, v, nil, set("n1")},
		{"hostname_levenshtein_distance", "hostname_levenshtein_distance", 30, v, nil, set("n1")},
		{"hostname_longest_common_prefix", "hostname_longest_common_prefix", 30, v, nil, set("n1")},
		{"hostname_longest_common_suffix", "hostname_longest_common_suffix", 30, v, nil, set("n1")},
		{"in_order", "in_order", 30, v, nil, set(first)},
		{"first_or_random", "first_or_random", 30, v, nil, set(first)},
		{"round_robin", "round_robin", 3, v, nil, set("n1", "n2", "n3")},
		// When all replicas are idle, least_request degenerates to random.
		{"least_request_idle", "least_request", 30, v, nil, set("n1", "n2", "n3")},
		// n1 has a query in flight; with choice_count ≥ replicas every
		// probe avoids it.
		{"least_request_avoids_busy_replica", "least_request", 30,
			mk(func(s *ServerLoad) {
				if s.Host == "n1" {
					s.InFlight = 1
				}
			}), func(o *Options) { o.LeastRequestChoiceCount = 100 }, set("n2", "n3")},
		// dist_priority: n1 and n3 have <priority>0</priority>, n2 the
		// default (1): round robin never reaches n2.
		{"priority_round_robin", "round_robin", 3, v,
			func(o *Options) { o.ReplicaPriority = map[string]int{"n1": 0, "n3": 0} }, set("n1", "n3")},
		// dist_priority_negative: n1, n3 at -1, n2 at 0.
		{"priority_negative_round_robin", "round_robin", 3, v,
			func(o *Options) { o.ReplicaPriority = map[string]int{"n1": -1, "n2": 0, "n3": -1} }, set("n1", "n3")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := chProfile(c.mode, func(o *Options) { o.Hedge = false })
			if c.mod != nil {
				c.mod(&p.Options)
			}
			pol := mustPolicy(t, p)
			st := &TabletState{}
			r := rng(5)
			seen := map[string]bool{}
			for q := 0; q < c.queries; q++ {
				d, err := pol.Select(&Input{Tablet: tab, Profile: p, View: c.v, Now: t0, Rand: r, State: st, LocalHost: "n1"})
				if err != nil {
					t.Fatal(err)
				}
				seen[d.Host] = true
			}
			var got []string
			for _, n := range nodes {
				if seen[n] {
					got = append(got, n)
				}
			}
			if set(got...) != c.want {
				t.Errorf("replicas %v, want %s", got, c.want)
			}
		})
	}
}

// least_request is Envoy's power of two choices as ClickHouse implements
// it: with choice count 2 over four replicas with 0, 1, 2 and 3 queries in
// flight, a replica wins when it is in the sample of two with a more loaded
// one: 3/6, 2/6, 1/6 and 0 of the time. Bias 0 scores every replica 1, so
// the first of the shuffled sample wins: uniform whatever the load.
func TestClickHouseLeastRequest(t *testing.T) {
	var ss []*ServerLoad
	for i := 0; i < 4; i++ {
		h := fmt.Sprintf("h%d", i)
		load := i
		ss = append(ss, srv(h+":1/0", h, func(s *ServerLoad) { s.InFlight = load }))
	}
	v := view(ss...)
	count := func(mod func(*Options)) [4]int {
		p := chProfile("least_request", func(o *Options) { o.Hedge = false })
		if mod != nil {
			mod(&p.Options)
		}
		pol := mustPolicy(t, p)
		r := rng(17)
		var n [4]int
		for k := 0; k < 6000; k++ {
			d, err := pol.Select(&Input{Tablet: tablet(k), Profile: p, View: v, Now: t0, Rand: r})
			if err != nil {
				t.Fatal(err)
			}
			n[d.Host[1]-'0']++
		}
		return n
	}
	near := func(got, want int) bool { return math.Abs(float64(got-want)) <= 150 }
	if n := count(nil); !near(n[0], 3000) || !near(n[1], 2000) || !near(n[2], 1000) || n[3] != 0 {
		t.Errorf("choice 2: %v, want about [3000 2000 1000 0]", n)
	}
	// Examining all: the least loaded always.
	if n := count(func(o *Options) { o.LeastRequestChoiceCount = 4 }); n[0] != 6000 {
		t.Errorf("choice 4: %v", n)
	}
	// A choice count below 2 counts as 2.
	if n := count(func(o *Options) { o.LeastRequestChoiceCount = 1 }); n[3] != 0 || !near(n[0], 3000) {
		t.Errorf("choice 1: %v", n)
	}
	if n := count(func(o *Options) { o.LeastRequestActiveRequestBias = 0 }); !near(n[0], 1500) || !near(n[3], 1500) {
		t.Errorf("bias 0: %v, want about 1500 each", n)
	}
	// Errors still come first: the least loaded with an error loses.
	ev := chTallyView(ss, []uint32{0, 0, 0, 0}, []uint32{0, 0, 0, 0}, t0)
	ev1 := chTallyView(ss, []uint32{1, 0, 0, 0}, []uint32{0, 0, 0, 0}, t0)
	for _, s := range ev1.Servers {
		s.InFlight = int(s.Host[1] - '0')
	}
	p := chProfile("least_request", func(o *Options) { o.Hedge = false; o.LeastRequestChoiceCount = 4 })
	pol := mustPolicy(t, p)
	pol.Select(&Input{Tablet: tablet(1), Profile: p, View: ev, Now: t0, Rand: rng(1)})
	if d, _ := pol.Select(&Input{Tablet: tablet(1), Profile: p, View: ev1, Now: t0, Rand: rng(1)}); d.Host == "h0" {
		t.Errorf("errors before least_request: %v", d.Host)
	}
}

// The replica priority sits between the error (and slowdown) counts and
// the mode's priority, as config_priority in ClickHouse's PoolState::compare.
func TestClickHouseReplicaPriority(t *testing.T) {
	hv := hostsView(4, 1)
	tab := tablet(3)
	order := RendezvousOrder(tab, hv.group("").alive, "")
	noHedge := func(o *Options) { o.Hedge = false }
	// Before the mode's priority: in_order takes the preferred replica.
	p := chProfile("in_order", noHedge, func(o *Options) { o.ReplicaPriority = map[string]int{order[2].Host: 0} })
	if d, _ := chSelect(t, p, Input{Tablet: tab, View: hv}); d.Server != order[2].ID {
		t.Errorf("priority before mode: %v want %v", d.Server, order[2].ID)
	}
	// A server ID beats its host name; unlisted servers are at 1.
	p = chProfile("in_order", noHedge, func(o *Options) {
		o.ReplicaPriority = map[string]int{order[2].Host: 0, string(order[2].ID): 5, order[3].Host: 2}
	})
	if d, _ := chSelect(t, p, Input{Tablet: tab, View: hv}); d.Server != order[0].ID {
		t.Errorf("ID over host: %v want %v", d.Server, order[0].ID)
	}
	// After errors: the preferred replica with one error loses.
	clean := chTallyView(order, []uint32{0, 0, 0, 0}, []uint32{0, 0, 0, 0}, t0)
	errd := chTallyView(order, []uint32{0, 0, 1, 0}, []uint32{0, 0, 0, 0}, t0)
	p = chProfile("in_order", noHedge, func(o *Options) { o.ReplicaPriority = map[string]int{order[2].Host: 0} })
	pol := mustPolicy(t, p)
	pol.Select(&Input{Tablet: tab, Profile: p, View: clean, Now: t0, Rand: rng(1)})
	if d, _ := pol.Select(&Input{Tablet: tab, Profile: p, View: errd, Now: t0, Rand: rng(1)}); d.Server != order[0].ID {
		t.Errorf("errors before priority: %v want %v", d.Server, order[0].ID)
	}
}

func TestClickHouseNewOptionsJSON(t *testing.T) {
	ps, err := ParseProfiles([]byte(`[{"isDefault":true,"policy":"clickhouse-least_request","replicaPriority":{"n1":0,"n2:9000/0":"-3"},
	  "leastRequestChoiceCount":3,"leastRequestActiveRequestBias":2.5}]`))
	if err != nil {
		t.Fatal(err)
	}
	o := ps.List[0].Options
	if o.ReplicaPriority["n1"] != 0 || o.ReplicaPriority["n2:9000/0"] != -3 || len(o.ReplicaPriority) != 2 ||
		o.LeastRequestChoiceCount != 3 || o.LeastRequestActiveRequestBias != 2.5 {
		t.Errorf("options %+v", o)
	}
	if s := ps.Summary()[0]; !strings.Contains(s, "replicaPriority={n1:0,n2:9000/0:-3}") {
		t.Errorf("summary %q", s)
	}
	for _, c := range []struct{ policy, opt, val, want string }{
		{"clickhouse-random", "replicaPriority", `[1]`, "want an object"},
		{"clickhouse-random", "replicaPriority", `{"a":"x"}`, `"a"`},
		{"clickhouse-random", "replicaPriority", `{"":1}`, "empty"},
		{"clickhouse-random", "replicaPriority", `{"a":1.5}`, "integer"},
		{"clickhouse-random", "leastRequestChoiceCount", "3", "not an option"},
		{"clickhouse-least_request", "leastRequestChoiceCount", "-1", "out of range"},
		{"clickhouse-least_request", "leastRequestActiveRequestBias", "-1", "out of range"},
		{"bookkeeper", "replicaPriority", `{"a":1}`, "not an option"},
	} {
		_, err := ParseProfiles([]byte(fmt.Sprintf(`[{"isDefault":true,"policy":%q,%q:%s}]`, c.policy, c.opt, c.val)))
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.opt) {
			t.Errorf("%s %s=%s: %v (want %q)", c.policy, c.opt, c.val, err, c.want)
		}
	}
}
