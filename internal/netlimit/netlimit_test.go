package netlimit

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil"
)

// A connection wrapped by OnClose gives its slot back once, however often
// it is closed.
func TestSlotsCapAndRelease(t *testing.T) {
	s := NewSlots(2)
	a, b := net.Pipe()
	defer b.Close()
	if _, ok := s.Take(); !ok {
		t.Fatal("first slot refused")
	}
	held := OnClose(a, s.Release)
	if _, ok := s.Take(); !ok {
		t.Fatal("second slot refused")
	}
	if open, ok := s.Take(); ok || open != 2 {
		t.Fatalf("third Take = %d, %v; want 2 open, refused", open, ok)
	}
	held.Close()
	held.Close() // a second Close gives nothing back
	if s.Open() != 1 {
		t.Fatalf("open %d after closing one of two, want 1", s.Open())
	}
	s.Release()
	if s.Open() != 0 {
		t.Fatalf("open %d after Release, want 0", s.Open())
	}
}

func TestThrottleLetsBurstThroughAndReportsTheRest(t *testing.T) {
	var reported atomic.Int64
	th := NewThrottle(3, 50*time.Millisecond, func(n int, _ time.Duration) { reported.Add(int64(n)) })
	passed := 0
	for range 10 {
		if th.Allow() {
			passed++
		}
	}
	if passed != 3 {
		t.Fatalf("%d of 10 lines let through, want 3", passed)
	}
	testutil.Eventually(t, 5*time.Second, "the 7 held-back lines reported", func() bool { return reported.Load() == 7 })
	if !testutil.Poll(5*time.Second, th.Allow) {
		t.Fatal("no line let through in the next interval")
	}
	th.Allow()
	th.Stop()
	if th.Allow() {
		t.Fatal("a line let through after Stop")
	}
}
