package loadtest

import (
	"testing"

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
