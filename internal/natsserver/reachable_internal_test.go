package natsserver

import (
	"testing"
	"time"
)

// TestReachable: a routed peer counts unless its last beacon is more than
// silentAfter old; a routed peer never heard from counts by its route; a
// peer without a route never counts, and is forgotten beaconForget after
// its last beacon.
func TestReachable(t *testing.T) {
	now := time.Unix(1000, 0)
	routed := map[string]bool{"fresh": true, "stale": true, "unheard": true}
	heard := map[string]time.Time{
		"fresh":   now.Add(-silentAfter),
		"stale":   now.Add(-silentAfter - time.Millisecond),
		"gone":    now.Add(-silentAfter),
		"longago": now.Add(-beaconForget - time.Millisecond),
	}
	reached, silent := reachable(now, routed, heard)
	if reached != 2 || silent != 1 {
		t.Fatalf("reached %d, silent %d; want 2 (fresh, unheard), 1 (stale)", reached, silent)
	}
	if _, ok := heard["longago"]; ok {
		t.Error("a peer without route or beacon for beaconForget is still remembered")
	}
	if _, ok := heard["gone"]; !ok {
		t.Error("a peer without a route but heard recently was forgotten")
	}
}
