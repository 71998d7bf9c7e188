package remoting

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestRefusedCollector: every reason is exported from the start, and a
// refusal counts under its reason's label; no Guard reads as zeros.
func TestRefusedCollector(t *testing.T) {
	g := NewGuard(nil, nil)
	g.refuse("peer", ReasonRole)
	g.Refuse("peer", ReasonAttempt)
	g.Refuse("peer", ReasonAttempt)
	for _, tc := range []struct {
		g    *Guard
		want map[string]float64
	}{{g, map[string]float64{"role": 1, "attempt": 2}}, {nil, nil}} {
		reg := prometheus.NewRegistry()
		reg.MustRegister(RefusedCollector(func() *Guard { return tc.g }))
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		if len(mfs) != 1 || mfs[0].GetName() != RefusedMetric || len(mfs[0].GetMetric()) != int(numReasons) {
			t.Fatalf("gathered %v; want %s with %d reasons", mfs, RefusedMetric, numReasons)
		}
		for _, m := range mfs[0].GetMetric() {
			reason := m.GetLabel()[0].GetValue()
			if v := m.GetCounter().GetValue(); v != tc.want[reason] {
				t.Errorf("reason %q: %v, want %v", reason, v, tc.want[reason])
			}
		}
	}
}
