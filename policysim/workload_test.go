package policysim

import (
	"slices"
	"testing"
)

// TestSameWorkloadAcrossPolicies: every policy of a seed meets the same
// arrivals and the same slow servers, so their request classes (which
// replicas were slow on arrival) are the same.
func TestSameWorkloadAcrossPolicies(t *testing.T) {
	cfg := small(t)
	cfg.Requests, cfg.Diagnose = 6000, true
	var first *Result
	for _, p := range []string{"adaptive", "random", "c3"} {
		r := run(t, cfg, p)
		if first == nil {
			first = r
			continue
		}
		if r.Arrivals != first.Arrivals || !sameShares(r.Diag.Classes, first.Diag.Classes) {
			t.Errorf("%s: %d arrivals, classes %+v; %s: %d arrivals, classes %+v", p, r.Arrivals, r.Diag.Classes,
				first.Policy, first.Arrivals, first.Diag.Classes)
		}
	}
}

func sameShares(a, b []DiagClass) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Class != b[i].Class || a[i].Share != b[i].Share {
			return false
		}
	}
	return true
}

// TestServiceSeed: another ServiceSeed keeps the workload (arrivals and
// the slow servers, so the request classes) and changes the service
// times; ServiceSeed equal to Seed is the run without it.
func TestServiceSeed(t *testing.T) {
	cfg := small(t)
	cfg.Requests, cfg.Diagnose = 6000, true
	base := run(t, cfg, "c3")
	same := cfg
	same.ServiceSeed = cfg.Seed
	if r := run(t, same, "c3"); !slices.Equal(r.Latencies, base.Latencies) {
		t.Errorf("ServiceSeed = Seed changed the run")
	}
	other := cfg
	other.ServiceSeed = cfg.Seed + 1
	r := run(t, other, "c3")
	if r.Arrivals != base.Arrivals || !sameShares(r.Diag.Classes, base.Diag.Classes) {
		t.Errorf("ServiceSeed changed the workload: %d arrivals, classes %+v; want %d, %+v", r.Arrivals, r.Diag.Classes,
			base.Arrivals, base.Diag.Classes)
	}
	if slices.Equal(r.Latencies, base.Latencies) {
		t.Errorf("ServiceSeed %d gave the latencies of seed %d", other.ServiceSeed, cfg.Seed)
	}
}
