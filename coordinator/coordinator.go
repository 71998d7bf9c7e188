package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/actorenv"
	"github.com/scanplane/scanplane/internal/remoting"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
	"github.com/scanplane/scanplane/wire"
	"google.golang.org/protobuf/proto"
)

// CoordinatorConfig configures the coordinator component.
type CoordinatorConfig struct {
	// System: where the actor system listens; default 127.0.0.1:8090.
	System remoting.SystemConfig
	// Flow tunes every scan's ScanFlow.
	Flow FlowConfig
	// HeartbeatMisses: a server missing this many heartbeats leaves the
	// view; default 3. Only time the coordinator was running counts (see
	// Liveness): a sweep later than SweepInterval forgives its lateness.
	HeartbeatMisses int
	// SweepInterval: how often missed heartbeats are checked; default 250ms.
	SweepInterval time.Duration
	// TabletIdle: a tablet actor with no scans and no message for this long
	// stops (after a handshake with the router, so that no request sent to
	// it is lost); default 10m.
	TabletIdle time.Duration
	// MaxWaiting bounds the scan requests the router holds: those waiting
	// for their table generation's metadata plus those waiting for a tablet
	// actor that is stopping. Beyond it a request is answered OVERLOADED at
	// once. Default 10000.
	MaxWaiting int
	// MaxWaitingPerTable bounds the requests waiting for one table
	// generation's metadata, and those waiting for one stopping tablet
	// actor. Default 1000.
	MaxWaitingPerTable int
	// MaxMetaLoads bounds the metadata loads the router runs at once (one
	// goroutine each; more table generations wait their turn), and
	// likewise the RouteRequest lookups (beyond it answered overloaded).
	// Default 8.
	MaxMetaLoads int
	// MaxHosts bounds the host actors (one per host name found in a valid
	// heartbeat). A heartbeat of a new host beyond it is refused and
	// counted as a bad message. Default 10000.
	MaxHosts int
	// RouterOnly: tablet actors do not tell clients their PID, so every
	// scan request passes the router. Default false: a client that asks
	// (ScanRequest.want_tablet_actor) sends a tablet's next requests
	// straight to its tablet actor (direct.go).
	RouterOnly bool
	// HostForget: a host actor whose servers have all been out of the view
	// for this long forgets them and stops (a later heartbeat starts a new
	// one). Default 1m.
	HostForget time.Duration
	// NoQuorumAfter: a clustered coordinator that has not been able to
	// renew its lease for this long (NATS lost its quorum, or this
	// coordinator is cut off from it) answers new scan requests
	// NO_COORDINATOR naming why, instead of serving what its caches
	// still allow: the cluster is not whole, and the client should know.
	// It is longer than a JetStream leader election (seconds), which
	// must cost no scan. Default 15s.
	NoQuorumAfter time.Duration
	// QuorumLost, when set (the coordinator embeds a node of a NATS
	// cluster: natsserver.EmbeddedServer.QuorumLost), tells whether that node
	// reaches too few nodes of its cluster for a quorum, since when and
	// why. It decides instead of the lease: new scan requests are
	// answered NO_COORDINATOR once it has said so for QuorumGrace, and
	// served again as soon as the nodes are back, while JetStream still
	// elects its leaders and the lease is not renewed yet.
	QuorumLost func() (lost bool, since time.Time, why string)
	// WarnEvery: each kind of warning (dead letters, publish errors, bad
	// messages, overloaded) is logged at most once per WarnEvery, with the
	// count of the ones suppressed meanwhile. Default 10s.
	WarnEvery time.Duration
	// Hostname: this coordinator's hostname (ClickHouse nearest_hostname).
	// Default os.Hostname().
	Hostname string
	Logger   *slog.Logger
	// Version is the build version /status reports; "" = "devel".
	Version string
	// Metrics receives the scan, selection and load-view histograms and
	// the NATS error counts; nil = private metrics nobody scrapes. Pass
	// the same CoordMetrics to every coordinator a process starts.
	Metrics *CoordMetrics
	// MaxFlows bounds the scan flows the coordinator runs at once, over
	// all its tablet actors; a request beyond it is answered OVERLOADED.
	// Default 50000.
	MaxFlows int
	// MaxTabletQueue bounds the messages waiting in a tablet actor's
	// mailbox when it takes a new scan request: beyond it the request is
	// answered OVERLOADED (the client backs off and asks again) instead of
	// adding its dispatches to a backlog that already delays every
	// answer of the tablet's scans. Default 2000.
	MaxTabletQueue int
	// Clock reads the time the actors decide with (deadlines, timers,
	// liveness); nil = time.Now. Only durations on it matter: requests
	// carry time left, not a time of day.
	Clock func() time.Time
	// Env: the actors' timers, goroutines and dispatcher; the zero Env is
	// the real ones (actorenv). A deterministic harness sets it.
	Env actorenv.Env
}

// DefaultCoordinatorConfig returns the documented defaults.
func DefaultCoordinatorConfig() CoordinatorConfig {
	h, _ := os.Hostname()
	return CoordinatorConfig{System: remoting.SystemConfig{Listen: "127.0.0.1:8090"}, Flow: DefaultFlowConfig(), HeartbeatMisses: 3,
		SweepInterval: 250 * time.Millisecond, TabletIdle: 10 * time.Minute, MaxWaiting: 10000, MaxWaitingPerTable: 1000,
		MaxMetaLoads: 8, MaxHosts: 10000, HostForget: time.Minute, WarnEvery: 10 * time.Second, NoQuorumAfter: 15 * time.Second, Hostname: h,
		MaxFlows: 50000, MaxTabletQueue: 2000}
}

// Validate names the first bad field.
func (c CoordinatorConfig) Validate() error {
	switch {
	case c.HeartbeatMisses < 1:
		return fmt.Errorf("coordinator: coordinator HeartbeatMisses %d must be >= 1", c.HeartbeatMisses)
	case c.SweepInterval <= 0:
		return errors.New("coordinator: coordinator SweepInterval must be > 0")
	case c.TabletIdle < time.Millisecond:
		return errors.New("coordinator: coordinator TabletIdle must be >= 1ms")
	case c.MaxWaiting < 1:
		return fmt.Errorf("coordinator: coordinator MaxWaiting %d must be >= 1", c.MaxWaiting)
	case c.MaxWaitingPerTable < 1:
		return fmt.Errorf("coordinator: coordinator MaxWaitingPerTable %d must be >= 1", c.MaxWaitingPerTable)
	case c.MaxMetaLoads < 1:
		return fmt.Errorf("coordinator: coordinator MaxMetaLoads %d must be >= 1", c.MaxMetaLoads)
	case c.MaxHosts < 1:
		return fmt.Errorf("coordinator: coordinator MaxHosts %d must be >= 1", c.MaxHosts)
	case c.HostForget <= 0:
		return errors.New("coordinator: coordinator HostForget must be > 0")
	case c.WarnEvery <= 0:
		return errors.New("coordinator: coordinator WarnEvery must be > 0")
	case c.NoQuorumAfter <= 0:
		return errors.New("coordinator: coordinator NoQuorumAfter must be > 0")
	case c.MaxFlows < 1:
		return fmt.Errorf("coordinator: coordinator MaxFlows %d must be >= 1", c.MaxFlows)
	case c.MaxTabletQueue < 1:
		return fmt.Errorf("coordinator: coordinator MaxTabletQueue %d must be >= 1", c.MaxTabletQueue)
	}
	if err := c.System.Validate(); err != nil {
		return err
	}
	return c.Flow.Validate()
}

type coordCounters struct {
	scans, failed, dispatches, hedges, busy, timeouts atomic.Uint64
	// failures that would otherwise go unnoticed
	deadLetters, publishErrors, badMessages, overloaded atomic.Uint64
	tabletStarts, hostStarts                            atomic.Uint64
	forwarded                                           atomic.Uint64 // scan requests sent to the tablet's owner
	direct                                              atomic.Uint64 // direct.go
	rerouted                                            atomic.Uint64 // gatedmailbox.go
	probesSent, probeReplies                            atomic.Uint64 // prequal probes (probe.go)
	progress                                            atomic.Uint64 // ScanProgress sent to clients
	reforwarded                                         atomic.Uint64 // forwards not delivered, routed again
	actorFailures                                       atomic.Uint64 // actor panics (supervision.go)
	// gauges
	flows, tabletActors, hostActors atomic.Int64
}

// warnLimiter logs each kind of warning at most once per interval, with
// the number suppressed since the last line. Safe for concurrent use.
type warnLimiter struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time
	mu    sync.Mutex
	kinds map[string]*warnKind
}

type warnKind struct {
	last       time.Time
	suppressed uint64
}

func (w *warnLimiter) warn(kind, msg string, args ...any) {
	now := w.now()
	w.mu.Lock()
	k := w.kinds[kind]
	if k == nil {
		k = &warnKind{}
		w.kinds[kind] = k
	}
	if !k.last.IsZero() && now.Sub(k.last) < w.every {
		k.suppressed++
		w.mu.Unlock()
		return
	}
	n := k.suppressed
	k.last, k.suppressed = now, 0
	w.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressed", n, "suppressed_for", w.every.String())
	}
	w.log.Warn(msg, args...)
}

// Coordinator runs the registry, host actors, the router and tablet
// actors over one actor system, fed by NATS heartbeats and signals.
type Coordinator struct {
	cfg      CoordinatorConfig
	conn     *bus.Conn
	meta     *metaCache
	log      *slog.Logger
	warns    *warnLimiter
	sys      *remoting.System   // nil when started on a given actor system (tests)
	as       *actor.ActorSystem // the actor system the actors run on
	board    *LoadBoard
	profiles atomic.Pointer[selection.Profiles]
	reloadMu sync.Mutex
	reloader func() (*selection.Profiles, error)
	// leaseUpdate, when set, edits the coordinator's lease content (the
	// tablet actors it holds go there once per LeaseEvery).
	leaseUpdate func(func(*messages.ClusterInfo))
	status      sync.Map
	hostPIDs    sync.Map
	// routerEpoch counts the router's incarnations (supervision.go).
	routerEpoch atomic.Uint64
	registry    *actor.PID
	router      *actor.PID
	subs        []*bus.Subscription
	counters    coordCounters
	metrics     *CoordMetrics
	stopWatch   context.CancelFunc
	events      *eventstream.Subscription
	started     time.Time
	stop        chan struct{}
	wg          sync.WaitGroup
	once        sync.Once
	failed      chan struct{} // closed when the router or registry stopped unasked
	failure     error         // why failed is closed
	failOnce    sync.Once

	// localPlace: the members SetMembers gave (local coordinators).
	localPlace atomic.Pointer[placement]
}

// NewCoordinator checks its inputs; it does no IO.
func NewCoordinator(cfg CoordinatorConfig, conn *bus.Conn, meta MetaSource, profiles *selection.Profiles) (*Coordinator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if conn == nil || meta == nil {
		return nil, errors.New("coordinator: coordinator needs a bus connection and a metadata source")
	}
	return newCoordinator(cfg, conn, meta, profiles), nil
}

// newCoordinator builds a validated coordinator; conn may be nil for
// in-process tests (no heartbeat subscription, signals not published).
func newCoordinator(cfg CoordinatorConfig, conn *bus.Conn, meta MetaSource, profiles *selection.Profiles) *Coordinator {
	if profiles == nil {
		profiles = selection.DefaultProfiles()
	}
	log := cfg.Logger
	if log == nil {
		log = remoting.DiscardLogger()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	c := &Coordinator{cfg: cfg, conn: conn, meta: newMetaCache(meta), log: log, stop: make(chan struct{}), failed: make(chan struct{}),
		warns: &warnLimiter{log: log, every: cfg.WarnEvery, now: cfg.Clock, kinds: map[string]*warnKind{}}}
	c.metrics = cfg.Metrics
	if c.metrics == nil {
		c.metrics = NewCoordMetrics()
	}
	c.board = NewLoadBoard(cfg.Clock, profiles.Decays())
	c.board.env = cfg.Env
	c.board.onRebuild = c.metrics.rebuilt
	c.profiles.Store(profiles)
	return c
}

// SetLeaseUpdater sets how the coordinator edits its cluster lease (see
// LeaseProvider.Update); the sweep loop reports the tablet actors held.
func (c *Coordinator) SetLeaseUpdater(fn func(func(*messages.ClusterInfo))) {
	c.reloadMu.Lock()
	c.leaseUpdate = fn
	c.reloadMu.Unlock()
}

// SetReloader sets the function Reload uses to re-read the profiles.
func (c *Coordinator) SetReloader(fn func() (*selection.Profiles, error)) {
	c.reloadMu.Lock()
	c.reloader = fn
	c.reloadMu.Unlock()
}

// Start starts the actor system, actors, NATS subscriptions and sweeps,
// and publishes ClusterInfo so clients can find this coordinator.
func (c *Coordinator) Start(ctx context.Context) error {
	sc := c.cfg.System
	sc.Logger = c.log
	if sc.MaxMessage == 0 {
		// The public API's gateway scans through this system: row batches
		// arrive here as at any client.
		sc.MaxMessage = remoting.ClientMaxMessage
	}
	sys, err := remoting.StartSystem(sc)
	if err != nil {
		return err
	}
	c.sys = sys
	if err := c.startActors(sys.Actors); err != nil {
		c.Close()
		return err
	}
	root := sys.Actors.Root
	hb, err := c.conn.SubscribeHeartbeats(func(m *messages.Heartbeat) { root.Send(c.registry, m) })
	if err != nil {
		c.Close()
		return err
	}
	c.subs = append(c.subs, hb)
	sig, err := c.conn.SubscribeSignals(func(k bus.SignalKind, s *messages.LoadSignal) { root.Send(c.registry, &signalMsg{kind: k, sig: s}) })
	if err != nil {
		c.Close()
		return err
	}
	c.subs = append(c.subs, sig)
	c.watchMeta()
	// Announce this member last: its lease is what clients and the other
	// coordinators send requests on, so the router must be there first.
	if sys.Cluster != nil {
		if a, ok := sys.Cluster.Config.ClusterProvider.(memberAnnouncer); ok {
			if err := a.Announce(ctx); err != nil {
				c.Close()
				return fmt.Errorf("coordinator: announce coordinator: %w", err)
			}
		}
	}
	c.log.Info("coordinator started", "address", sys.Address())
	return nil
}

// startActors spawns the registry and the router on as, subscribes to its
// event stream and starts the sweeps. Start calls it with the remote
// system; in-process tests call it with a local one (and no NATS).
func (c *Coordinator) startActors(as *actor.ActorSystem) error {
	c.started = c.now()
	c.as = as
	root := as.Root
	var err error
	if c.registry, err = root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return newRegistryActor(c.registryDeps()) },
		c.cfg.Env.Props(actor.WithGuardian(c.supervisor("registry")), actor.WithSupervisor(c.supervisor("host actor")))...), "scanplane-registry"); err != nil {
		return err
	}
	if c.router, err = root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return newRouterActor(c) },
		c.cfg.Env.Props(actor.WithGuardian(c.supervisor("router")), actor.WithSupervisor(c.supervisor("tablet actor")))...), wire.RouterName); err != nil {
		return err
	}
	if _, err := root.SpawnNamed(actor.PropsFromFunc(c.keep, c.cfg.Env.Props()...), "scanplane-keeper"); err != nil {
		return err
	}
	c.events = as.EventStream.Subscribe(func(evt any) {
		switch e := evt.(type) {
		case *remote.EndpointTerminatedEvent:
			root.Send(c.registry, e)
		case *cluster.ClusterTopology:
			root.Send(c.router, &topologyChanged{})
		case *actor.DeadLetterEvent:
			if c.isTabletActor(e.PID) && c.reroute(e.Message) {
				return // a client's message for a tablet actor that stopped
			}
			if m, ok := e.Message.(*messages.ScanRequest); ok && c.reforward(e.PID, m) {
				return // a request we forwarded to an owner that is gone
			}
			switch e.Message.(type) {
			case *actor.DeadLetterResponse, *flowTimer, *lostCheck, *idleCheck:
				// protoactor's own answer to a dead request; our timers
				// racing with their actor's stop.
				return
			}
			if strings.HasPrefix(fmt.Sprintf("%T", e.Message), "*cluster.") {
				return // cluster gossip answering a request that timed out
			}
			c.counters.deadLetters.Add(1)
			c.warns.warn("dead_letter", "message not delivered (dead letter)", "to", e.PID.String(), "type", fmt.Sprintf("%T", e.Message))
		}
	})
	if c.cfg.Env.AfterFunc != nil {
		c.armSweep(time.Time{})
		return nil
	}
	c.wg.Add(1)
	go c.sweepLoop()
	return nil
}

// keep is the keeper actor: it watches the router and the registry, and
// fails the coordinator when either stops while the coordinator is not
// closing (supervision gave up on it, or something stopped it). A
// coordinator without them would hold its lease and answer nothing.
func (c *Coordinator) keep(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		ctx.Watch(c.router)
		ctx.Watch(c.registry)
	case *actor.Terminated:
		select {
		case <-c.stop:
			return
		default:
		}
		who := "registry"
		if m.GetWho().Equal(c.router) {
			who = "router"
		}
		c.fail(fmt.Errorf("%w: the %s stopped", ErrActorStopped, who))
	}
}

// ErrActorStopped: an actor the coordinator cannot run without stopped.
var ErrActorStopped = errors.New("coordinator: actor stopped")

func (c *Coordinator) fail(err error) {
	c.failOnce.Do(func() {
		c.failure = err
		c.log.Error("coordinator failed; it must be restarted", "err", err)
		close(c.failed)
	})
}

// Failed is closed when the coordinator can no longer serve: its router
// or registry stopped (Err says which). The process then closes the
// coordinator, which gives up its lease, and exits so that its
// supervisor starts it anew.
func (c *Coordinator) Failed() <-chan struct{} { return c.failed }

// Err is why Failed is closed (nil while it is not).
func (c *Coordinator) Err() error {
	select {
	case <-c.failed:
		return c.failure
	default:
		return nil
	}
}

// reforward takes back a scan request this coordinator forwarded to the
// router at to, which did not get it (a dead letter: the owner is gone or
// restarting): the request goes to our router again, naming that owner
// among the coordinators to avoid, so it is served here or by the next
// owner instead of being lost. It reports whether m was such a request.
func (c *Coordinator) reforward(to *actor.PID, m *messages.ScanRequest) bool {
	if m.GetForwardedBy() != c.as.Address() || to.GetId() != wire.RouterName || to.GetAddress() == c.as.Address() {
		return false
	}
	fwd := proto.Clone(m).(*messages.ScanRequest)
	fwd.ForwardedBy = ""
	if !slices.Contains(fwd.AvoidCoordinators, to.Address) && len(fwd.AvoidCoordinators) < wire.MaxAvoidCoordinators {
		fwd.AvoidCoordinators = append(fwd.AvoidCoordinators, to.Address)
	}
	c.counters.reforwarded.Add(1)
	c.warns.warn("reforward", "forward to the tablet's owner not delivered; routing the request again without it",
		"owner", to.Address, "request", m.GetRequestId())
	c.as.Root.Send(c.router, fwd)
	return true
}

// QuorumGrace is how long CoordinatorConfig.QuorumLost must say the
// quorum is lost before requests are refused: a route to a node that
// reconnects at once costs no scan.
const QuorumGrace = time.Second

// leaseHolder is a cluster provider that knows how long its lease went
// unrenewed (LeaseProvider).
type leaseHolder interface {
	Unrenewed() time.Duration
}

// quorumErr says why this coordinator takes no new scans: its lease has
// not been renewed for NoQuorumAfter; nil otherwise.
func (c *Coordinator) quorumErr() error {
	if c.sys == nil || c.sys.Cluster == nil {
		return nil
	}
	h, ok := c.sys.Cluster.Config.ClusterProvider.(leaseHolder)
	if !ok {
		return nil
	}
	if q := c.cfg.QuorumLost; q != nil {
		lost, since, why := q()
		if d := time.Since(since); lost && d >= QuorumGrace {
			return fmt.Errorf("coordinator %s: %s, for %v: NATS has lost its quorum (too few nodes up) or this coordinator is cut off from it",
				c.Address(), why, d.Round(time.Second))
		}
		return nil
	}
	if d := h.Unrenewed(); d > c.cfg.NoQuorumAfter {
		return fmt.Errorf("coordinator %s cannot renew its lease in NATS for %v: NATS has lost its quorum (too few nodes up) or this coordinator is cut off from it",
			c.Address(), d.Round(time.Second))
	}
	return nil
}

// memberAnnouncer is a cluster provider that announces the member only
// when asked (LeaseProvider): after the coordinator's actors started.
type memberAnnouncer interface {
	Announce(ctx context.Context) error
}

// metaWatcher is a MetaSource that reports current-generation changes,
// and keeps setting up its watch when the first set-up fails
// (bus.MetaStore does).
type metaWatcher interface {
	WatchRetrying(ctx context.Context, fn func(table string, gen uint64)) error
}

// watchMeta drops cached table generations that no scan can ask for any
// more: when generation N becomes current, those older than N−1 (ingest
// keeps the previous one readable). A watch whose first set-up fails is
// set up again in the background until it is or Close; until then the
// cache keeps what it loaded. Without a watching source the cache keeps
// what it loaded.
func (c *Coordinator) watchMeta() {
	w, ok := c.meta.src.(metaWatcher)
	if !ok {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.stopWatch = cancel
	err := w.WatchRetrying(ctx, c.onCurrent)
	if err != nil {
		c.metrics.NATSError(NATSOpMetaWatch)
		c.log.Warn("metadata watch failed; setting it up again in the background, cached table generations are kept meanwhile", "err", err)
	}
}

// onCurrent: gen became table's current generation (0: the table was
// removed). Cached generations no scan can ask for are dropped, and tablet
// actors learn that older generations were deleted (STALE_GENERATION).
func (c *Coordinator) onCurrent(table string, gen uint64) {
	c.meta.noteCurrent(table, gen)
	switch {
	case gen == 0: // table removed
		c.meta.forget(table, ^uint64(0))
	case gen > 1:
		c.meta.forget(table, gen-1)
	}
}

func (c *Coordinator) sweepLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.SweepInterval)
	defer t.Stop()
	var leaseAt time.Time
	for {
		select {
		case <-c.stop:
			return
		case now := <-t.C:
			leaseAt = c.sweep(now, leaseAt)
		}
	}
}

// armSweep runs the sweep on Env timers (a harness's clock) instead of
// sweepLoop's ticker: every SweepInterval until Close.
func (c *Coordinator) armSweep(leaseAt time.Time) {
	c.cfg.Env.After(c.cfg.SweepInterval, func() {
		select {
		case <-c.stop:
			return
		default:
		}
		c.armSweep(c.sweep(c.now(), leaseAt))
	})
}

// sweep nudges the registry's liveness sweep and, once a second, reports
// the tablet actors held in the lease; it returns when it last did.
func (c *Coordinator) sweep(now, leaseAt time.Time) time.Time {
	c.as.Root.Send(c.registry, &sweepTick{})
	if now.Sub(leaseAt) < time.Second {
		return leaseAt
	}
	c.reloadMu.Lock()
	up := c.leaseUpdate
	c.reloadMu.Unlock()
	if up != nil {
		n := uint32(max(c.counters.tabletActors.Load(), 0))
		up(func(ci *messages.ClusterInfo) { ci.TabletActors = n })
	}
	return now
}

// Address is the actor system's advertised address.
func (c *Coordinator) Address() string {
	if c.as == nil {
		return ""
	}
	return c.as.Address()
}

// now reads the coordinator's clock (CoordinatorConfig.Clock).
func (c *Coordinator) now() time.Time { return c.cfg.Clock() }

// ActorSystem is the coordinator's actor system, nil before Start. A
// client in the coordinator's process shares it (internal/clientsys): a
// process runs one actor remote.
func (c *Coordinator) ActorSystem() *actor.ActorSystem { return c.as }

// MemberID is this coordinator's lease key and cluster member id: its
// actor system's id, unique per start ([A-Za-z0-9], 22 characters).
func (c *Coordinator) MemberID() string { return c.as.ID }

// Profiles returns the profiles in force.
func (c *Coordinator) Profiles() *selection.Profiles { return c.profiles.Load() }

// SetProfiles replaces the profiles (new scans use them; running scans
// keep theirs).
func (c *Coordinator) SetProfiles(p *selection.Profiles) {
	c.profiles.Store(p)
	d := p.Decays()
	c.board.SetDecays(d)
	if c.as != nil && c.registry != nil {
		c.as.Root.Send(c.registry, &setDecays{decays: d})
	}
}

// Reload re-reads the profiles with the reloader; on error the old
// profiles stay and the error says why.
func (c *Coordinator) Reload() (string, error) {
	c.reloadMu.Lock()
	fn := c.reloader
	c.reloadMu.Unlock()
	if fn == nil {
		return "", errors.New("no profiles file to reload (coordinator runs on the built-in default profiles)")
	}
	p, err := fn()
	if err != nil {
		c.log.Warn("profiles reload refused; keeping the old profiles", "err", err)
		return "", err
	}
	c.SetProfiles(p)
	msg := "reloaded: " + strings.Join(p.Summary(), "; ")
	c.log.Info(msg)
	return msg, nil
}

// View returns the current load view.
func (c *Coordinator) View() *selection.LoadView { return c.board.View() }

func (c *Coordinator) publishSignal(k bus.SignalKind, s *messages.LoadSignal) {
	if c.conn == nil {
		return // in-process tests run without NATS
	}
	if err := c.conn.PublishSignal(k, s); err != nil {
		c.counters.publishErrors.Add(1)
		c.metrics.NATSError(NATSOpPublish)
		c.warns.warn("publish_error", "publish load signal failed", "kind", k, "err", err)
	}
}

// countBad counts a wire message refused by validation.
func (c *Coordinator) countBad(what string, err error) { c.tally().countBad(what, err) }

// countOverloaded counts a request refused because a bounded queue is full.
func (c *Coordinator) countOverloaded(queue string) { c.tally().countOverloaded(queue) }

// Status describes the cluster as this coordinator sees it.
func (c *Coordinator) Status() *messages.StatusReply {
	r := &messages.StatusReply{ScansStarted: c.counters.scans.Load(), ScansFailed: c.counters.failed.Load(),
		Dispatches: c.counters.dispatches.Load(), Hedges: c.counters.hedges.Load(), Busy: c.counters.busy.Load(),
		Timeouts: c.counters.timeouts.Load(), ProfilesSummary: strings.Join(c.Profiles().Summary(), "\n"),
		StartedUnixMs: c.started.UnixMilli(), DeadLetters: c.counters.deadLetters.Load(), PublishErrors: c.counters.publishErrors.Load(),
		BadMessages: c.counters.badMessages.Load(), Flows: uint32(max(c.counters.flows.Load(), 0)),
		HostActors: uint32(max(c.counters.hostActors.Load(), 0)), Overloaded: c.counters.overloaded.Load(),
		TabletActors: uint32(max(c.counters.tabletActors.Load(), 0)), ProbesSent: c.counters.probesSent.Load(),
		ProbeReplies: c.counters.probeReplies.Load(), Version: cmp.Or(c.cfg.Version, "devel"), Tables: c.meta.tableStatus(),
		DirectRequests: c.counters.direct.Load(), Rerouted: c.counters.rerouted.Load(), Address: c.Address(),
		Reforwarded: c.counters.reforwarded.Load(), ProgressSent: c.counters.progress.Load(), ActorFailures: c.counters.actorFailures.Load()}
	c.status.Range(func(_, v any) bool {
		r.Servers = append(r.Servers, v.(*hostStatus).messages()...)
		return true
	})
	sort.Slice(r.Servers, func(i, j int) bool {
		if r.Servers[i].Host != r.Servers[j].Host {
			return r.Servers[i].Host < r.Servers[j].Host
		}
		return r.Servers[i].Id < r.Servers[j].Id
	})
	return r
}

// PeerStatuses asks the router of each coordinator at addrs (other than
// this one) for its status, all at once, each within timeout, and returns
// the answers' counters (servers, tables, leases and peers left out),
// sorted by address; a coordinator that does not answer is missing.
func (c *Coordinator) PeerStatuses(addrs []string, timeout time.Duration) []*messages.StatusReply {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out []*messages.StatusReply
	)
	for _, a := range addrs {
		if a == "" || a == c.Address() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A reply address of our own, not a future: an answer that
			// arrives as the wait times out does not race (remoting.Reply).
			r := remoting.NewReply(c.as)
			defer r.Close()
			c.as.Root.RequestWithCustomSender(actor.NewPID(a, wire.RouterName), &messages.StatusRequest{}, r.PID())
			res, err := r.Wait(context.Background(), timeout)
			st, ok := res.(*messages.StatusReply)
			if err != nil || !ok {
				return
			}
			st.Servers, st.Tables, st.Coordinators, st.Peers = nil, nil, nil, nil
			if st.Address == "" {
				st.Address = a
			}
			mu.Lock()
			out = append(out, st)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	return out
}

// Collectors returns Prometheus collectors for the coordinator's counters.
func (c *Coordinator) Collectors() []prometheus.Collector {
	return CoordinatorCollectors(func() *Coordinator { return c })
}

// CoordinatorCollectors returns Prometheus collectors that read the
// counters and the per-server status of the coordinator get returns at
// scrape time (cmd/coordinator replaces its coordinator when it rejoins
// the cluster; a nil coordinator reads as zeros and no servers), and what
// its actor remote refused (remoting.RefusedMetric). The histograms are
// in CoordMetrics, registered besides.
func CoordinatorCollectors(get func() *Coordinator) []prometheus.Collector {
	f := func(name, help string, v func(*coordCounters) *atomic.Uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "scanplane_coordinator_" + name, Help: help},
			func() float64 {
				if c := get(); c != nil {
					return float64(v(&c.counters).Load())
				}
				return 0
			})
	}
	g := func(name, help string, v func(*coordCounters) *atomic.Int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "scanplane_coordinator_" + name, Help: help},
			func() float64 {
				if c := get(); c != nil {
					return float64(v(&c.counters).Load())
				}
				return 0
			})
	}
	return []prometheus.Collector{
		newServerCollector(get),
		remoting.RefusedCollector(func() *remoting.Guard {
			if c := get(); c != nil && c.sys != nil {
				return c.sys.Guard
			}
			return nil
		}),
		f("scans_total", "Scan requests received by tablet actors.", func(k *coordCounters) *atomic.Uint64 { return &k.scans }),
		f("scans_failed_total", "Scan requests answered with an error.", func(k *coordCounters) *atomic.Uint64 { return &k.failed }),
		f("dispatches_total", "StartScan messages sent (retries and hedges included).", func(k *coordCounters) *atomic.Uint64 { return &k.dispatches }),
		f("hedges_total", "Hedged or speculative dispatches.", func(k *coordCounters) *atomic.Uint64 { return &k.hedges }),
		f("busy_total", "Attempts answered busy.", func(k *coordCounters) *atomic.Uint64 { return &k.busy }),
		f("timeouts_total", "Attempts that timed out waiting for the server.", func(k *coordCounters) *atomic.Uint64 { return &k.timeouts }),
		f("dead_letters_total", "Messages the actor system could not deliver.", func(k *coordCounters) *atomic.Uint64 { return &k.deadLetters }),
		f("bad_messages_total", "Wire messages refused by validation (heartbeats, signals, requests) and heartbeats beyond MaxHosts.", func(k *coordCounters) *atomic.Uint64 { return &k.badMessages }),
		f("overloaded_total", "Requests refused because a bounded coordinator queue was full.", func(k *coordCounters) *atomic.Uint64 { return &k.overloaded }),
		f("tablet_actor_starts_total", "Tablet actors started (they stop when idle).", func(k *coordCounters) *atomic.Uint64 { return &k.tabletStarts }),
		f("host_actor_starts_total", "Host actors started (they stop when their servers are gone).", func(k *coordCounters) *atomic.Uint64 { return &k.hostStarts }),
		f("forwarded_total", "Scan requests forwarded to the coordinator that owns their tablet.", func(k *coordCounters) *atomic.Uint64 { return &k.forwarded }),
		f("direct_requests_total", "Scan requests that reached a tablet actor straight from the client (not through the router).", func(k *coordCounters) *atomic.Uint64 { return &k.direct }),
		f("rerouted_total", "Client messages for a tablet actor that had stopped, sent on to the router.", func(k *coordCounters) *atomic.Uint64 { return &k.rerouted }),
		f("probes_sent_total", "Prequal probes sent to scan servers.", func(k *coordCounters) *atomic.Uint64 { return &k.probesSent }),
		f("probe_replies_total", "Prequal probe answers fed into a probe pool.", func(k *coordCounters) *atomic.Uint64 { return &k.probeReplies }),
		g("flows", "Scan requests in flight in tablet actors.", func(k *coordCounters) *atomic.Int64 { return &k.flows }),
		g("tablet_actors", "Tablet actors running.", func(k *coordCounters) *atomic.Int64 { return &k.tabletActors }),
		g("host_actors", "Host actors running.", func(k *coordCounters) *atomic.Int64 { return &k.hostActors }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "scanplane_coordinator_live_servers", Help: "Live scan servers in the view."},
			func() float64 {
				c := get()
				if c == nil {
					return 0
				}
				n := 0
				for _, s := range c.board.View().Servers {
					if s.Alive {
						n++
					}
				}
				return float64(n)
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "scanplane_coordinator_cluster_members", Help: "Coordinators in this coordinator's cluster topology (0 when not clustered)."},
			func() float64 {
				if c := get(); c != nil {
					return float64(len(c.placement().memberList()))
				}
				return 0
			}),
	}
}

// Close stops everything Start started.
func (c *Coordinator) Close() {
	c.once.Do(func() {
		c.sys.LeaveCluster()
		close(c.stop)
		c.wg.Wait()
		if c.stopWatch != nil {
			c.stopWatch()
		}
		for _, s := range c.subs {
			_ = s.Close()
		}
		if c.as != nil {
			if c.router != nil {
				_ = c.as.Root.StopFuture(c.router).Wait()
			}
			if c.registry != nil {
				_ = c.as.Root.StopFuture(c.registry).Wait()
			}
		}
		if c.events != nil {
			c.as.EventStream.Unsubscribe(c.events)
		}
		if c.sys != nil {
			c.sys.Close()
		}
	})
}
