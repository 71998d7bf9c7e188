package sim

import "testing"

// TestHostRestartRace restarts a scanserver process at once on its
// address while every coordinator's endpoint to it is still failing: the
// new incarnation's first heartbeats arrive, the coordinators' connects
// to it come back dead letters, and the old incarnation's
// endpoint-terminated events arrive after, in every order the seeds draw.
// Every scan still gets exactly its rows or a named error, and once
// settled every coordinator sees every server of the restarted host alive
// and has reached it (checkViews).
func TestHostRestartRace(t *testing.T) {
	var total Stats
	seeds := uint64(60)
	if testing.Short() || raceEnabled {
		seeds = 15
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		cfg := ConfigFor(seed)
		cfg.Coordinators, cfg.ScansPerClient = 1+int(seed%3), 2
		cfg.Net = NetFaults{MinDelay: cfg.Net.MinDelay, MaxDelay: cfg.Net.MaxDelay, LateMax: cfg.Net.LateMax}
		cfg.Faults = ProcFaults{HostRestartRaces: 1 + int(seed%2), Window: cfg.ScanStartMax, DetectMax: cfg.Faults.DetectMax,
			LeaseTTL: cfg.Faults.LeaseTTL, RestartMin: cfg.Faults.RestartMin, RestartMax: cfg.Faults.RestartMax}
		res, err := Run(cfg, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range res.Problems {
			t.Errorf("seed %d: %s (replay with its trace: adapt this test to run it traced)", seed, p)
		}
		total.add(res.Stats)
	}
	if total.Kinds["restart race"] == 0 || total.Kinds["dead letter of a failing endpoint"] == 0 {
		t.Fatalf("no restart met a failing endpoint: %s", total)
	}
	t.Logf("%s", total)
}
