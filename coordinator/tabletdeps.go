package coordinator

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/actorenv"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
	"github.com/scanplane/scanplane/wire"
)

// tally counts the coordinator's events and logs, at most once per
// CoordinatorConfig.WarnEvery per kind, the failures that would otherwise
// go unseen. Safe for concurrent use.
type tally struct {
	counters *coordCounters
	warns    *warnLimiter
}

// countBad counts a wire message refused by validation.
func (t tally) countBad(what string, err error) {
	t.counters.badMessages.Add(1)
	t.warns.warn("bad_message", "bad "+what+" refused", "err", err)
}

// countOverloaded counts a request refused because a bounded queue is full.
func (t tally) countOverloaded(queue string) {
	t.counters.overloaded.Add(1)
	t.warns.warn("overloaded", "request refused: coordinator overloaded", "queue", queue)
}

// tabletDeps is what a tablet actor needs of its coordinator: its
// settings, clock and surroundings, the counters it bumps, the load board
// it reads and feeds, and the ways it reaches past itself (host actors,
// load signals, the lease, the remote's grants, the router). The router
// builds it once per incarnation and shares it with every tablet actor it
// spawns; it does not change after, and all it points to is safe for
// concurrent use.
type tabletDeps struct {
	tally
	// Settings (CoordinatorConfig).
	idle       time.Duration // TabletIdle
	maxQueue   int           // MaxTabletQueue
	maxFlows   int           // MaxFlows
	flow       FlowConfig    // Flow
	hostname   string        // Hostname
	routerOnly bool          // RouterOnly
	lostEvery  time.Duration // SweepInterval: how often lost attempts are looked for
	// now reads the coordinator's clock; env runs its timers.
	now func() time.Time
	env actorenv.Env
	// board: the load view read by selection, fed with dispatches, block
	// times and start latencies.
	board   *LoadBoard
	metrics *CoordMetrics
	// gens tells which table generations newer ingests deleted.
	gens wire.GenerationSource
	// hostPIDs: host name -> its host actor's *actor.PID.
	hostPIDs *sync.Map
	// profiles returns the profiles in force.
	profiles func() *selection.Profiles
	// routerEpoch counts the router's incarnations (supervision.go).
	routerEpoch *atomic.Uint64
	// address is the coordinator's actor-system address (load signals
	// name it as their origin).
	address func() string
	// signal publishes a load signal to every coordinator.
	signal func(bus.SignalKind, *messages.LoadSignal)
	// quorumErr says why the coordinator takes no new scans; nil if it does.
	quorumErr func() error
	// permitted checks a client's grant for its request and answers it
	// PERMISSION_DENIED if refused (grant.go).
	permitted func(actor.Context, *messages.ScanRequest) bool
	// reroute sends a client's message that found its tablet actor
	// stopped to the router (gatedmailbox.go).
	reroute func(msg any) bool
}

// tabletDeps builds what the router's tablet actors need of c.
func (c *Coordinator) tabletDeps() *tabletDeps {
	cfg := &c.cfg
	return &tabletDeps{tally: c.tally(),
		idle: cfg.TabletIdle, maxQueue: cfg.MaxTabletQueue, maxFlows: cfg.MaxFlows, flow: cfg.Flow, hostname: cfg.Hostname,
		routerOnly: cfg.RouterOnly, lostEvery: cfg.SweepInterval, now: cfg.Clock, env: cfg.Env,
		board: c.board, metrics: c.metrics, gens: c.meta, hostPIDs: &c.hostPIDs, profiles: c.Profiles, routerEpoch: &c.routerEpoch,
		address: c.Address, signal: c.publishSignal, quorumErr: c.quorumErr, permitted: c.permitted, reroute: c.reroute}
}

// tally is c's counters and warning limiter.
func (c *Coordinator) tally() tally { return tally{counters: &c.counters, warns: c.warns} }
