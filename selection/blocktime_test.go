package selection

import (
	"testing"
	"time"
)

func TestBlockTimesSpill(t *testing.T) {
	var b BlockTimes
	if _, ok := b.Spill(); ok {
		t.Fatal("no samples: a spill cost")
	}
	for range blockTimeMinSamples {
		b.Record(PlacementHome, time.Millisecond)
		b.Record(PlacementUnknown, time.Hour) // ignored
		b.Record(PlacementAway, -time.Second) // ignored
	}
	if _, ok := b.Spill(); ok {
		t.Fatal("no away samples: a spill cost")
	}
	for range blockTimeMinSamples {
		b.Record(PlacementAway, 3*time.Millisecond)
	}
	if s, ok := b.Spill(); !ok || s < 1.99 || s > 2.01 {
		t.Fatalf("away 3× home: spill %v %v, want 2", s, ok)
	}
	// Away becomes as fast as home: the cost falls toward 0, never below.
	for range 400 {
		b.Record(PlacementAway, time.Millisecond/2)
	}
	if s, ok := b.Spill(); !ok || s != 0 {
		t.Fatalf("away faster than home: spill %v %v, want 0", s, ok)
	}
}

// TestAdaptiveLearnedSpill: where scans away from home take no longer
// per block than at home (no cache to lose), a scan leaves a home host
// whose queue is 3 per worker longer, which spillCost (4) alone keeps;
// where they take 5× as long, the configured cost still bounds it; and
// every decision says whether it went home.
func TestAdaptiveLearnedSpill(t *testing.T) {
	base := hostsView(6, 2)
	tab := tablet(3)
	order := HostOrder(tab, base, "")
	home := order[0]
	h := adHarness{t, adProfile(), tab}
	loaded := func(bt BlockTimes) *LoadView {
		v := modView(base, func(s *ServerLoad) {
			if s.Host == home {
				s.QueueLen = 3
			}
		})
		v.BlockTimes = bt
		return v
	}
	var same, slow BlockTimes
	for range blockTimeMinSamples {
		same.Record(PlacementHome, time.Millisecond)
		same.Record(PlacementAway, time.Millisecond)
		slow.Record(PlacementHome, time.Millisecond)
		slow.Record(PlacementAway, 5*time.Millisecond)
	}
	for seed := uint64(0); seed < 30; seed++ {
		if d := h.must(loaded(BlockTimes{}), nil, false, seed); d.Host != home || d.Placement != PlacementHome {
			t.Fatalf("no samples: %s (%v), want home %s", d.Host, d.Placement, home)
		}
		if d := h.must(loaded(slow), nil, false, seed); d.Host != home || d.Placement != PlacementHome {
			t.Fatalf("away 5× slower: %s (%v), want home %s", d.Host, d.Placement, home)
		}
		if d := h.must(loaded(same), nil, false, seed); d.Host == home || d.Placement != PlacementAway {
			t.Fatalf("away as fast as home: %s (%v), want away from %s", d.Host, d.Placement, home)
		}
	}
}
