package coordinator

import (
	"time"
)

// Liveness is the pure rule by which a host actor judges its servers'
// heartbeats. A server is dead once it has been silent for more than
// Misses × its heartbeat interval — silent while the coordinator was
// running. A sweep that comes later than SweepInterval after the previous
// one means the coordinator itself stood still meanwhile (SIGSTOP, a long
// GC pause, a VM freeze, mailboxes backed up): the heartbeats of that time
// may still sit unread in its socket or mailboxes, so the lateness is
// forgiven — every server's liveness reference moves forward by it (never
// past now) before silence is judged. Without that, a coordinator waking
// from a pause longer than Misses × interval would mark every server dead,
// and end their running attempts as errors, before reading the heartbeats
// that prove them alive.
//
// Not safe for concurrent use; each host actor has its own.
type Liveness struct {
	// Misses: heartbeats a server may miss (CoordinatorConfig.HeartbeatMisses).
	Misses int
	// SweepInterval: how often Sweep is meant to run
	// (CoordinatorConfig.SweepInterval); 0 forgives nothing.
	SweepInterval time.Duration
	lastSweep     time.Time
}

// Sweep records a sweep at now and returns its lateness: the time since
// the previous sweep beyond SweepInterval (0 for the first sweep, or when
// on time). The caller forgives it with Forgive before calling Dead.
func (l *Liveness) Sweep(now time.Time) time.Duration {
	prev := l.lastSweep
	if prev.IsZero() || now.After(prev) {
		l.lastSweep = now
	}
	if prev.IsZero() || l.SweepInterval <= 0 {
		return 0
	}
	return max(now.Sub(prev)-l.SweepInterval, 0)
}

// Forgive moves a server's liveness reference heardAt forward by a
// sweep's lateness, but not past now (a heartbeat read after the stall
// already counts from its own time).
func Forgive(heardAt, now time.Time, late time.Duration) time.Time {
	if late <= 0 || heardAt.IsZero() {
		return heardAt
	}
	if t := heardAt.Add(late); t.Before(now) {
		return t
	}
	if heardAt.After(now) {
		return heardAt
	}
	return now
}

// Dead reports whether a server whose liveness reference is heardAt and
// whose heartbeat interval is interval has missed its heartbeats at now.
func (l *Liveness) Dead(now, heardAt time.Time, interval time.Duration) bool {
	return now.Sub(heardAt) > time.Duration(l.Misses)*interval
}
