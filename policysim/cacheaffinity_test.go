package policysim

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestNoCacheAffinityIsTheTunedOptions: adaptive with "cacheAffinity":
// false runs exactly as adaptive with homeBand 0, inFlightWeight 16 and
// latencyWeight 2 (every count and latency the same), and not as the
// defaults.
func TestNoCacheAffinityIsTheTunedOptions(t *testing.T) {
	cfg := small(t)
	cfg.Requests, cfg.Warmup, cfg.Utilization = 3000, 100*time.Millisecond, 0.7
	digestOf := func(policy string) string {
		d := digest(run(t, cfg, policy))
		return strings.Replace(d, " "+policy+" ", " ", 1)
	}
	off := digestOf(AdaptiveNoCache)
	if tuned := digestOf("adaptive:homeBand=0+inFlightWeight=16+latencyWeight=2"); off != tuned {
		t.Errorf("cacheAffinity=false:\n%s\nthe three options:\n%s", off, tuned)
	}
	if def := digestOf("adaptive"); off == def {
		t.Errorf("cacheAffinity=false runs as the defaults:\n%s", def)
	}
	if !slices.Contains(DefaultPolicies, AdaptiveNoCache) {
		t.Errorf("DefaultPolicies %v lack %s", DefaultPolicies, AdaptiveNoCache)
	}
}
