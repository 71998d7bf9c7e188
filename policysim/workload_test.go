package policysim

import "testing"

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
