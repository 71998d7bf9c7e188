package coordinator

import (
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/selection"
)

// Protocol simulation finding 1: a coordinator that stood still (SIGSTOP,
// GC, VM freeze) for longer than HeartbeatMisses × interval ran its sweep
// before reading the heartbeats waiting for it, marked every server dead
// and had their running attempts ended as errors. The host actor, driven
// by hand with a fake clock in the order the woken coordinator sees
// things: the late sweep first, then the heartbeats that waited.
func TestHostSweepAfterCoordinatorPause(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	board := NewLoadBoard(func() time.Time { return now }, []selection.DecayParams{selection.DefaultDecay})
	h := newHostActor("h1", board, &sync.Map{}, 3, time.Hour, func() time.Time { return now }, nil)
	h.live.SweepInterval = 250 * time.Millisecond // as the registry sets it
	pid := actor.NewPID("127.0.0.1:1", "scan")
	sweepUntil := func(end time.Time) {
		for now.Before(end) {
			now = now.Add(250 * time.Millisecond)
			h.sweep(now)
		}
	}
	alive := func(id selection.ServerID) bool { s := h.servers[id]; return s != nil && s.load.Alive }

	// Three servers beat every second; "quiet" dies just before the pause.
	for _, id := range []string{"healthy", "quiet", "control"} {
		h.onHeartbeat(now, hb("h1", id, pid, time.Second))
	}
	sweepUntil(t0.Add(500 * time.Millisecond))
	// The coordinator stops for 3 s (its sweep ticks and the heartbeats
	// sent meanwhile wait); on resume the sweep runs first.
	now = t0.Add(3500 * time.Millisecond)
	h.sweep(now)
	for _, id := range []selection.ServerID{"healthy", "quiet", "control"} {
		if !alive(id) {
			t.Fatalf("the sweep right after a 3 s pause of the coordinator marked %s dead (last heartbeat %v before; its heartbeats "+
				"of the pause were still unread)", id, now.Sub(h.servers[id].load.LastHeartbeat))
		}
	}
	// Then the heartbeats that waited are read (not quiet's).
	for _, id := range []string{"healthy", "control"} {
		h.onHeartbeat(now, hb("h1", id, pid, time.Second))
	}
	// From here the coordinator runs on time and only "healthy" keeps
	// beating. "quiet" was heard 0.5 s of running time before the pause:
	// dead once it has been silent 3 s of running time, i.e. after 5.75 s.
	// "control", heard at 3.5 s, is dead after 6.5 s: a heartbeat read
	// after the pause gets no extra grace.
	for now.Before(t0.Add(7 * time.Second)) {
		if now.Sub(h.servers["healthy"].load.LastHeartbeat) >= time.Second {
			h.onHeartbeat(now, hb("h1", "healthy", pid, time.Second))
		}
		now = now.Add(250 * time.Millisecond)
		h.sweep(now)
		at := now.Sub(t0)
		if want := at <= 5750*time.Millisecond; alive("quiet") != want {
			t.Fatalf("at %v quiet (silent since 0 s, coordinator paused 0.5–3.5 s) alive=%v, want %v", at, alive("quiet"), want)
		}
		if want := at <= 6500*time.Millisecond; alive("control") != want {
			t.Fatalf("at %v control (silent since 3.5 s) alive=%v, want %v", at, alive("control"), want)
		}
		if !alive("healthy") {
			t.Fatalf("at %v the healthy server is dead", at)
		}
	}
}

func TestLiveness(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	l := Liveness{Misses: 3, SweepInterval: 250 * time.Millisecond}
	for _, c := range []struct {
		at   time.Duration
		late time.Duration
	}{
		{0, 0}, // first sweep
		{250 * time.Millisecond, 0},
		{400 * time.Millisecond, 0}, // early
		{650 * time.Millisecond, 0},
		{3650 * time.Millisecond, 2750 * time.Millisecond},
		{3600 * time.Millisecond, 0}, // the clock stepped back: nothing forgiven
		{3900 * time.Millisecond, 0},
	} {
		if got := l.Sweep(t0.Add(c.at)); got != c.late {
			t.Fatalf("sweep at %v: lateness %v, want %v", c.at, got, c.late)
		}
	}
	now := t0.Add(10 * time.Second)
	for _, c := range []struct {
		heard, late, want time.Duration
	}{
		{5 * time.Second, 2 * time.Second, 7 * time.Second},
		{9 * time.Second, 2 * time.Second, 10 * time.Second}, // not past now
		{11 * time.Second, 2 * time.Second, 11 * time.Second},
		{5 * time.Second, 0, 5 * time.Second},
	} {
		if got := Forgive(t0.Add(c.heard), now, c.late).Sub(t0); got != c.want {
			t.Fatalf("Forgive(heard %v, late %v) = %v, want %v", c.heard, c.late, got, c.want)
		}
	}
	if Forgive(time.Time{}, now, time.Second) != (time.Time{}) {
		t.Fatal("Forgive moved a zero reference")
	}
	if l.Dead(now, now.Add(-3*time.Second), time.Second) || !l.Dead(now, now.Add(-3*time.Second-1), time.Second) {
		t.Fatal("Dead: want dead only after more than Misses × interval")
	}
}
