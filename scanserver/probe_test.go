package scanserver

import (
	"testing"
	"time"
)

func TestLatencyEstimator(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var e latencyEstimator
	if got := e.estimate(t0, 3); got != 0 {
		t.Fatalf("no sample: %v, want 0", got)
	}
	ms := time.Millisecond
	for i := 0; i < 8; i++ {
		e.add(t0, 0, time.Duration(10+i)*ms) // 10..17 ms at RIF 0
		e.add(t0, 5, time.Duration(100+i)*ms)
	}
	for _, c := range []struct {
		rif  int
		want time.Duration
	}{
		{0, 13500 * time.Microsecond}, // median of 10..17
		{1, 13500 * time.Microsecond}, // RIF 0 is nearest
		{4, 103500 * time.Microsecond},
		{5, 103500 * time.Microsecond},
		{50, 103500 * time.Microsecond},
	} {
		if got := e.estimate(t0, c.rif); got != c.want {
			t.Errorf("estimate(%d) = %v, want %v", c.rif, got, c.want)
		}
	}
	e.add(t0, 2, 50*ms)
	e.add(t0, 2, 60*ms)
	e.add(t0, 2, 70*ms)
	// Nearest 8 to RIF 2: the three at 2, then five at distance 2 (RIF 0,
	// newest first: 17, 16, 15, 14, 13 ms) — RIF 5 is 3 away.
	if got, want := e.estimate(t0, 2), 16500*time.Microsecond; got != want {
		t.Errorf("estimate(2) = %v, want %v (median of 13..17, 50, 60, 70 ms)", got, want)
	}
	// Old samples leave: after probeSamples newer ones only those count.
	for i := 0; i < probeSamples; i++ {
		e.add(t0, 9, time.Second)
	}
	if got := e.estimate(t0, 0); got != time.Second {
		t.Errorf("after %d new samples estimate(0) = %v, want 1s", probeSamples, got)
	}
	// Samples older than probeSampleAge do not count: an idle server
	// forgets its slow scans and reports no estimate.
	e.add(t0.Add(probeSampleAge), 0, 5*ms)
	if got := e.estimate(t0.Add(probeSampleAge), 0); got != time.Second {
		t.Errorf("all samples young: %v, want 1s (8 nearest: the 1s ones)", got)
	}
	if got := e.estimate(t0.Add(probeSampleAge+time.Millisecond), 0); got != 5*ms {
		t.Errorf("only the newest sample young: %v, want 5ms", got)
	}
	if got := e.estimate(t0.Add(3*probeSampleAge), 0); got != 0 {
		t.Errorf("no young sample: %v, want 0", got)
	}
}
