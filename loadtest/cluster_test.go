package loadtest

import (
	"testing"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/messages"
)

// TestCacheTrackerDelta: the window's cache hits and misses are the sum
// over host processes of (first heartbeat after the end mark − first after
// the start mark); a process killed in the window counts up to its last
// heartbeat, a process started in the window counts from zero, one
// started after the window not at all, and a process's servers repeat
// the same host counters without double counting.
func TestCacheTrackerDelta(t *testing.T) {
	c := newCacheTracker()
	hb := func(host, inc string, hits, misses uint64) {
		for _, srv := range []string{"0", "1"} { // both servers report the host's cache
			c.observe(&messages.Heartbeat{Host: host, Server: srv, Incarnation: inc, CacheHits: hits, CacheMisses: misses})
		}
	}
	hb("h1", "a", 100, 50) // before the window
	hb("h2", "a", 10, 10)
	m0 := c.mark()
	hb("h1", "a", 110, 50) // first after m0: the baseline
	hb("h2", "a", 20, 10)
	hb("h2", "a", 30, 12) // then h2 is killed
	hb("h3", "b", 5, 5)   // h3 restarted in the window
	hb("h1", "a", 150, 60)
	m1 := c.mark()
	hb("h1", "a", 160, 60) // first after m1
	hb("h3", "b", 25, 7)
	hb("h4", "c", 1000, 1000) // started after the window
	hits, misses := c.delta(m0, m1)
	// h1: 160-110, 60-50; h2: 30-20, 12-10 (last before m1); h3: 25, 7.
	if wantH, wantM := uint64(50+10+25), uint64(10+2+7); hits != wantH || misses != wantM {
		t.Fatalf("delta = %d hits, %d misses; want %d, %d", hits, misses, wantH, wantM)
	}
	if len(c.marks) != 0 {
		t.Errorf("%d marks left after delta", len(c.marks))
	}
}

// TestCounterDeltaOverCoordinators: a window's counters are summed over
// the coordinators: growth since the start for one that ran throughout,
// everything for one (re)started in the window, nothing for one killed in
// it; per-server dispatches likewise.
func TestCounterDeltaOverCoordinators(t *testing.T) {
	srv := func(dispatched uint64) []client.ServerStatus {
		return []client.ServerStatus{{ID: "host1/0", Host: "host1", Incarnation: "a", Alive: true, Dispatched: dispatched,
			InFlight: 2, QueueLen: uint32(dispatched % 10)}}
	}
	s0 := statusSet{
		"coordinator1@10": {Dispatches: 100, Servers: srv(60)},
		"coordinator2@11": {Dispatches: 50, Servers: srv(30)}, // killed in the window
	}
	s1 := statusSet{
		"coordinator1@10": {Dispatches: 130, Servers: srv(80)},
		"coordinator2@12": {Dispatches: 7, Servers: srv(5)}, // restarted: a new pid
	}
	if got := counterDelta(s0, s1, func(s *client.Status) uint64 { return s.Dispatches }); got != 30+7 {
		t.Errorf("dispatches %d, want 37", got)
	}
	if got := serverDispatches(s0, s1)["host1/0"]; got != 20+5 {
		t.Errorf("server dispatches %d, want 25", got)
	}
	// In flight: each coordinator's own, summed; queue: the largest report.
	if h := serverHealth(s1)["host1/0"]; h.InFlight != 4 || h.QueueLen != 5 {
		t.Errorf("health %+v, want 4 in flight, queue 5", h)
	}
}
