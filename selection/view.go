package selection

import (
	"math"
	"slices"
	"time"
)

// DecayParams say how an error-like counter decays: halved once per whole
// elapsed HalfLife, capped at Cap (ClickHouse error_half_life, error_cap).
type DecayParams struct {
	HalfLife time.Duration // 0 = never decays
	Cap      uint32        // 0 = uncapped
}

// DefaultDecay is ClickHouse's default: 60 s half-life, cap 1000.
var DefaultDecay = DecayParams{HalfLife: 60 * time.Second, Cap: 1000}

// DecayedCount is a ClickHouse-style error counter: halving is applied
// lazily, by whole periods since Origin, as a right shift. The zero value is
// an empty counter. Methods are pure; a DecayedCount is a value.
type DecayedCount struct {
	Count  uint32
	Origin time.Time // start of the current half-life period
	// Last is the latest time Add counted something (n > 0); zero when
	// nothing was counted since the counter was created or Reset. Marks
	// that last a fixed window after the latest event (BookKeeper's slow
	// bookies) read it instead of the halved Count.
	Last time.Time
}

// Value returns the count as of now.
func (d DecayedCount) Value(now time.Time, p DecayParams) uint32 {
	if d.Count == 0 {
		return 0
	}
	return d.decayed(now, p).Count
}

// Add returns the counter with n added at now (after decaying to now).
func (d DecayedCount) Add(now time.Time, p DecayParams, n uint32) DecayedCount {
	d = d.decayed(now, p)
	c := uint64(d.Count) + uint64(n)
	if p.Cap > 0 && c > uint64(p.Cap) {
		c = uint64(p.Cap)
	}
	if c > uint64(^uint32(0)) {
		c = uint64(^uint32(0))
	}
	d.Count = uint32(c)
	if n > 0 && now.After(d.Last) {
		d.Last = now
	}
	return d
}

// Reset returns an empty counter whose period starts at now.
func (d DecayedCount) Reset(now time.Time) DecayedCount { return DecayedCount{Origin: now} }

func (d DecayedCount) decayed(now time.Time, p DecayParams) DecayedCount {
	if d.Origin.IsZero() {
		d.Origin = now
		return d
	}
	if p.HalfLife <= 0 || !now.After(d.Origin) {
		return d
	}
	periods := int64(now.Sub(d.Origin) / p.HalfLife)
	if periods <= 0 {
		return d
	}
	if periods >= 32 {
		d.Count = 0
	} else {
		d.Count >>= uint(periods)
	}
	d.Origin = d.Origin.Add(time.Duration(periods) * p.HalfLife)
	return d
}

// ServerLoad is what the coordinator knows of one scan server. It is part
// of an immutable LoadView: never modify one reachable from a view.
type ServerLoad struct {
	ID    ServerID
	Host  string
	Zone  string
	Group string
	// Address and ActorID locate the scan-server actor (protoactor PID).
	Address string
	ActorID string
	// Incarnation changes when the server process restarts.
	Incarnation string
	Alive       bool
	// InFlight: scans this coordinator dispatched and not yet finished.
	InFlight int
	// QueueLen and Active: last reported by the server (heartbeat; a busy
	// answer or ScanStarted reports QueueLen alone).
	QueueLen int
	Active   int
	Workers  int
	// Errors and Slowdowns per decay parameters in use (see
	// LoadView.ErrorsOf). Indexed like LoadView.Decays.
	Errors    []DecayedCount
	Slowdowns []DecayedCount
	// Busy: busy answers and busy timeouts, per decay parameters like
	// Errors (see LoadView.BusyOf).
	Busy []DecayedCount
	// ConsecutiveFailures and LastFailure drive circuit breakers; any
	// success resets ConsecutiveFailures.
	ConsecutiveFailures int
	LastFailure         time.Time
	// RecentFailures holds the times of the most recent failures, newest
	// last (at most 32).
	RecentFailures []time.Time
	// StartLatency is an EWMA of dispatch → first data for this server,
	// last updated at StartLatencyAt; read it through
	// LoadView.StartLatencyOf, which forgets it with time.
	StartLatency   time.Duration
	StartLatencyAt time.Time
	// UnansweredSince: this coordinator's oldest dispatch to the server
	// that no answer from it has followed (first data, a busy answer, an
	// error, a finished scan); zero when it answered after its latest
	// dispatch. LastAnswer: when it last answered. A server that holds our
	// scans and says nothing is paused, hung or stuck in a slow read, which
	// a latency EWMA only learns when those scans finally answer; the
	// adaptive policy counts the silence as start latency (selection
	// package doc, "The adaptive policy").
	UnansweredSince time.Time
	LastAnswer      time.Time
	LastHeartbeat   time.Time
	CacheHitRatio   float64
}

// FailuresSince counts recent failures at or after t.
func (s *ServerLoad) FailuresSince(t time.Time) int {
	n := 0
	for i := len(s.RecentFailures) - 1; i >= 0; i-- {
		if s.RecentFailures[i].Before(t) {
			break
		}
		n++
	}
	return n
}

// LoadView is an immutable snapshot of every known scan server.
type LoadView struct {
	// Servers sorted by ID.
	Servers []*ServerLoad
	// Decays lists the decay parameters whose counters ServerLoad.Errors
	// and Slowdowns hold, in the same order.
	Decays []DecayParams
	// At is when the snapshot was taken.
	At time.Time
	// StartLatencyP50 is the recent median of dispatch → first data over
	// all servers (0 = unknown).
	StartLatencyP50 time.Duration
	// StartLatencyP95 is the recent 95th percentile of dispatch → first
	// data over all servers (0 = unknown).
	StartLatencyP95 time.Duration
	// RecentDispatches and RecentHedges count this coordinator's primary
	// dispatches and hedges over a recent window (hedge budgets).
	RecentDispatches uint64
	RecentHedges     uint64
	// BlockTimes: this coordinator's scan time per block at home and
	// away (adaptive's learned spill cost).
	BlockTimes BlockTimes

	// indexed: built by NewLoadView or a ViewBuilder, with groups (sorted
	// by name) precomputed; false for a view built as a struct literal.
	indexed bool
	groups  []*groupIndex
	// blk: the block a ViewBuilder allocated this view in (nil for a
	// literal), which ViewBuilder.Recycle hands back.
	blk *viewBlock
}

// NewLoadView builds a view; it takes ownership of servers (sorts them).
// A caller that builds views in succession uses a ViewBuilder, which
// shares what did not change with the previous view.
func NewLoadView(servers []*ServerLoad, decays []DecayParams, at time.Time) *LoadView {
	b := ViewBuilder{once: true}
	return b.Build(servers, decays, at)
}

// Server returns the server with that id, or nil (binary search: Servers
// is sorted by ID).
func (v *LoadView) Server(id ServerID) *ServerLoad {
	if v == nil {
		return nil
	}
	if i, ok := slices.BinarySearchFunc(v.Servers, id, cmpID); ok {
		return v.Servers[i]
	}
	// A view built as a literal may be unsorted.
	if !v.indexed {
		for _, s := range v.Servers {
			if s.ID == id {
				return s
			}
		}
	}
	return nil
}

// decayIndex returns the index of p in v.Decays, or -1.
func (v *LoadView) decayIndex(p DecayParams) int {
	for i, d := range v.Decays {
		if d == p {
			return i
		}
	}
	return -1
}

// ErrorsOf returns s's error count under p as of now (0 if p is not
// tracked by this view).
func (v *LoadView) ErrorsOf(s *ServerLoad, p DecayParams, now time.Time) uint32 {
	return countAt(s.Errors, v.decayIndex(p), p, now)
}

// BusyOf returns s's busy count under p as of now (0 if p is not tracked
// by this view).
func (v *LoadView) BusyOf(s *ServerLoad, p DecayParams, now time.Time) uint32 {
	return countAt(s.Busy, v.decayIndex(p), p, now)
}

// countAt is counts[i] under p as of now, 0 when absent.
func countAt(counts []DecayedCount, i int, p DecayParams, now time.Time) uint32 {
	if i < 0 || i >= len(counts) {
		return 0
	}
	return counts[i].Value(now, p)
}

// StartLatencyForget is the time constant with which a server's start
// latency estimate decays toward the fleet median when it gets no new
// samples (Peak-EWMA style): a server that was slow once and then got no
// traffic is not shunned forever.
const StartLatencyForget = 2 * time.Second

// StartLatencyOf is s's start-latency estimate at now: its EWMA, decayed
// toward StartLatencyP50 with StartLatencyForget (decayedStartLatency).
// Pure: no clock is read.
func (v *LoadView) StartLatencyOf(s *ServerLoad, now time.Time) time.Duration {
	return decayedStartLatency(s, v.StartLatencyP50, now, StartLatencyForget)
}

// decayedStartLatency is s's start-latency EWMA decayed toward target by
// exp(−age/forget) since its last sample; the EWMA itself when target is
// 0 or s has no sample time.
func decayedStartLatency(s *ServerLoad, target time.Duration, now time.Time, forget time.Duration) time.Duration {
	if s.StartLatency == 0 || target == 0 || s.StartLatencyAt.IsZero() {
		return s.StartLatency
	}
	age := now.Sub(s.StartLatencyAt)
	if age <= 0 {
		return s.StartLatency
	}
	w := math.Exp(-float64(age) / float64(forget))
	return time.Duration(w*float64(s.StartLatency) + (1-w)*float64(target))
}
