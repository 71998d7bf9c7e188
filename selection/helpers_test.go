package selection

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func rng(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed)) }

// srv builds a live server of the default group.
func srv(id, host string, mods ...func(*ServerLoad)) *ServerLoad {
	s := &ServerLoad{ID: ServerID(id), Host: host, Group: DefaultGroup, Alive: true, Workers: 1, LastHeartbeat: t0}
	for _, m := range mods {
		m(s)
	}
	return s
}

func withZone(z string) func(*ServerLoad)  { return func(s *ServerLoad) { s.Zone = z } }
func withGroup(g string) func(*ServerLoad) { return func(s *ServerLoad) { s.Group = g } }
func dead() func(*ServerLoad)              { return func(s *ServerLoad) { s.Alive = false } }
func withFailures(n int, last time.Time) func(*ServerLoad) {
	return func(s *ServerLoad) { s.ConsecutiveFailures, s.LastFailure = n, last }
}

// testDecays: ClickHouse's default decay and adaptive's.
var testDecays = []DecayParams{DefaultDecay, profileFor(PolicyAdaptive).Decay()}

func view(servers ...*ServerLoad) *LoadView {
	return NewLoadView(servers, testDecays, t0)
}

// hostsView: nHosts hosts "hNN" with perHost servers "hNN:1000/i" each.
func hostsView(nHosts, perHost int, mods ...func(*ServerLoad)) *LoadView {
	var ss []*ServerLoad
	for h := 0; h < nHosts; h++ {
		for i := 0; i < perHost; i++ {
			host := fmt.Sprintf("h%03d", h)
			ss = append(ss, srv(fmt.Sprintf("%s:1000/%d", host, i), host, mods...))
		}
	}
	return view(ss...)
}

func tablet(i int) Tablet {
	return Tablet{Table: "t1", PrevEndRow: []byte(fmt.Sprintf("row%06d", i)), EndRow: []byte(fmt.Sprintf("row%06d", i+1))}
}

// profileFor returns a profile of policy with Accumulo's default plans and
// options.
func profileFor(policy string) *Profile {
	return &Profile{Name: policy, IsDefault: true, Group: DefaultGroup, Policy: policy,
		MaxBusyTimeout: 5 * time.Minute, BusyTimeoutMultiplier: 8,
		AttemptPlans: append([]AttemptPlan(nil), defaultPlans...), Options: DefaultOptions(policy)}
}

func mustPolicy(t testing.TB, p *Profile) Policy {
	t.Helper()
	pol, err := NewPolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

func att(id ServerID, host string, r AttemptResult) Attempt {
	return Attempt{Server: id, Host: host, Result: r, Start: t0}
}
