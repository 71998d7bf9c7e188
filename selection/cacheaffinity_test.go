package selection

import (
	"strings"
	"testing"
)

// TestCacheAffinityDefaults: "cacheAffinity": false gives adaptive
// homeBand 0, inFlightWeight 16 and latencyWeight 2 unless the profile
// sets them, wherever in the profile it sets them; true, or leaving it
// out, keeps the defaults; other policies refuse it.
func TestCacheAffinityDefaults(t *testing.T) {
	type want struct{ band, ifw, lw float64 }
	cases := []struct {
		name, opts string
		want       want
	}{
		{"unset", ``, want{1, 0, 0}},
		{"true", `"cacheAffinity": true,`, want{1, 0, 0}},
		{"false", `"cacheAffinity": false,`, want{0, 16, 2}},
		{"false, band before", `"homeBand": 0.5, "cacheAffinity": false,`, want{0.5, 16, 2}},
		{"false, weights after", `"cacheAffinity": false, "inFlightWeight": 4, "latencyWeight": 0,`, want{0, 4, 0}},
		{"true with band", `"cacheAffinity": true, "homeBand": 3,`, want{3, 0, 0}},
	}
	for _, c := range cases {
		doc := `[{"isDefault": true, "policy": "adaptive", ` + c.opts + ` "attemptPlans": [{"servers": "1", "busyTimeout": "33ms"}]}]`
		ps, err := ParseProfiles([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		o := ps.Default().Options
		if got := (want{o.HomeBand, o.InFlightWeight, o.LatencyWeight}); got != c.want {
			t.Errorf("%s: homeBand, inFlightWeight, latencyWeight = %v, want %v", c.name, got, c.want)
		}
	}
	_, err := ParseProfiles([]byte(`[{"isDefault": true, "policy": "c3", "cacheAffinity": false}]`))
	if err == nil || !strings.Contains(err.Error(), "cacheAffinity") {
		t.Errorf("c3 with cacheAffinity: err %v, want one naming the option", err)
	}
	_, err = ParseProfiles([]byte(`[{"isDefault": true, "policy": "adaptive", "cacheAffinity": "no"}]`))
	if err == nil || !strings.Contains(err.Error(), "cacheAffinity") {
		t.Errorf("cacheAffinity \"no\": err %v, want one naming the option", err)
	}
}
