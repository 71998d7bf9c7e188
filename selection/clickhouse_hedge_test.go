package selection

import (
	"testing"
	"time"
)

// loadTestStyleProfile is a clickhouse-random profile as the load test
// writes it (loadtest.ProfilesJSON): Accumulo's 33ms busy timeouts in the
// plans, multiplier 8, cap 5m, and nothing ClickHouse-specific set, so
// every ClickHouse option has its default.
func loadTestStyleProfile(t *testing.T, extra string) *Profile {
	t.Helper()
	ps, err := ParseProfiles([]byte(`[{"name":"default","isDefault":true,"scanTypeActivations":[],"policy":"clickhouse-random",
	  "maxBusyTimeout":"5m","busyTimeoutMultiplier":8` + extra + `,
	  "attemptPlans":[{"servers":"1","busyTimeout":"33ms"},{"servers":"2","busyTimeout":"33ms"},{"servers":"100%","busyTimeout":"33ms"}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	return ps.Default()
}

// With ClickHouse's defaults (use_hedged_requests 1,
// hedged_connection_timeout_ms 50, receive_data_timeout_ms 2000,
// connect_timeout_with_failover_ms 1000) a clickhouse-* attempt that is
// not accepted is hedged after 50ms, before its busy timeout, even in a
// profile whose plans carry Accumulo's 33ms busy timeouts; and the hedge
// goes to another server. With connectTimeoutWithFailover 0 (the plans'
// 33ms) the busy timeout comes first, so such a profile never hedges.
func TestClickHouseDefaultsHedgeSlowFirstServer(t *testing.T) {
	p := loadTestStyleProfile(t, "")
	hv := hostsView(4, 2)
	pol := mustPolicy(t, p)
	st := &TabletState{}
	tab := tablet(5)
	d, err := pol.Select(&Input{Tablet: tab, Profile: p, View: hv, Now: t0, Rand: rng(3), State: st})
	if err != nil {
		t.Fatal(err)
	}
	if d.HedgeDelay != 50*time.Millisecond || d.DataTimeout != 2*time.Second || d.BusyTimeout != time.Second {
		t.Fatalf("decision %+v: want HedgeDelay 50ms, DataTimeout 2s, BusyTimeout 1s", d)
	}
	if d.HedgeDelay >= d.BusyTimeout {
		t.Fatalf("hedge delay %v not before busy timeout %v", d.HedgeDelay, d.BusyTimeout)
	}
	// The first server has not accepted after 50ms: the coordinator marks
	// it Slow and asks for a hedge.
	h, err := pol.Select(&Input{Tablet: tab, Profile: p, View: hv, Now: t0.Add(50 * time.Millisecond), Rand: rng(4), State: st,
		Attempts: []Attempt{{Server: d.Server, Host: d.Host, Result: Slow}}, Hedge: true})
	if err != nil || h.Server == d.Server || h.Delay != 0 {
		t.Fatalf("hedge: %+v %v (first %s)", h, err, d.Server)
	}
	old := loadTestStyleProfile(t, `,"connectTimeoutWithFailover":"0"`)
	d, _ = mustPolicy(t, old).Select(&Input{Tablet: tab, Profile: old, View: hv, Now: t0, Rand: rng(3), State: &TabletState{}})
	if d.BusyTimeout != 33*time.Millisecond || d.HedgeDelay < d.BusyTimeout {
		t.Fatalf("plans' timeouts: %+v", d)
	}
}

// The same end to end in the discrete-event model (sim_test.go): one host
// stalls 150ms every second (the load test's slow-server fault is a
// 150ms/1s pause). The default clickhouse-random profile hedges around the
// stalled host; with the plans' 33ms busy timeouts it does not hedge at
// all (every stalled attempt is retried after 33ms instead).
func TestClickHouseDefaultsHedgeInSimulation(t *testing.T) {
	cfg := simCfg{hosts: 4, perHost: 2, tablets: 100, cachePerHost: 40, rate: 1000, dur: time.Second,
		hit: time.Millisecond, miss: 4 * time.Millisecond, fault: "pause", pause: 150 * time.Millisecond, period: 300 * time.Millisecond, seed: 1}
	def := simulate(cfg, loadTestStyleProfile(t, ""))
	old := simulate(cfg, loadTestStyleProfile(t, `,"connectTimeoutWithFailover":"0"`))
	t.Logf("defaults: %d scans, %d hedges, p99 %v; plans' 33ms busy timeouts: %d scans, %d hedges, p99 %v",
		def.scans, def.hedges, def.p99, old.scans, old.hedges, old.p99)
	if def.hedges == 0 {
		t.Errorf("ClickHouse defaults: no hedge under a stalled host")
	}
	if old.hedges != 0 {
		t.Errorf("33ms busy timeouts: %d hedges, want 0 (retried before hedgedConnectionTimeout)", old.hedges)
	}
}
