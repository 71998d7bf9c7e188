package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
)

// CoordinatorConfig configures the coordinator component.
type CoordinatorConfig struct {
	// System: where the actor system listens; default 127.0.0.1:8090.
	System SystemConfig
	// Flow tunes every scan's ScanFlow.
	Flow FlowConfig
	// HeartbeatMisses: a server missing this many heartbeats leaves the
	// view; default 3.
	HeartbeatMisses int
	// SweepInterval: how often missed heartbeats are checked; default 250ms.
	SweepInterval time.Duration
	// TabletIdle: a tablet actor with no scans for this long stops; default 10m.
	TabletIdle time.Duration
	// Hostname: this coordinator's hostname (ClickHouse nearest_hostname).
	// Default os.Hostname().
	Hostname string
	Logger   *slog.Logger
}

// DefaultCoordinatorConfig returns the documented defaults.
func DefaultCoordinatorConfig() CoordinatorConfig {
	h, _ := os.Hostname()
	return CoordinatorConfig{System: SystemConfig{Listen: "127.0.0.1:8090"}, Flow: DefaultFlowConfig(), HeartbeatMisses: 3,
		SweepInterval: 250 * time.Millisecond, TabletIdle: 10 * time.Minute, Hostname: h}
}

// Validate names the first bad field.
func (c CoordinatorConfig) Validate() error {
	switch {
	case c.HeartbeatMisses < 1:
		return fmt.Errorf("actors: coordinator HeartbeatMisses %d must be >= 1", c.HeartbeatMisses)
	case c.SweepInterval <= 0:
		return errors.New("actors: coordinator SweepInterval must be > 0")
	case c.TabletIdle <= 0:
		return errors.New("actors: coordinator TabletIdle must be > 0")
	}
	if err := c.System.Validate(); err != nil {
		return err
	}
	return c.Flow.Validate()
}

type coordCounters struct {
	scans, failed, dispatches, hedges, busy, timeouts atomic.Uint64
}

// Coordinator runs the registry, host actors, the router and tablet
// actors over one actor system, fed by NATS heartbeats and signals.
type Coordinator struct {
	cfg       CoordinatorConfig
	conn      *bus.Conn
	meta      *metaCache
	log       *slog.Logger
	sys       *System
	board     *LoadBoard
	profiles  atomic.Pointer[selection.Profiles]
	reloadMu  sync.Mutex
	reloader  func() (*selection.Profiles, error)
	status    sync.Map
	hostPIDs  sync.Map
	registry  *actor.PID
	router    *actor.PID
	subs      []*bus.Subscription
	counters  coordCounters
	stopWatch context.CancelFunc
	started   time.Time
	stop      chan struct{}
	wg        sync.WaitGroup
	once      sync.Once
}

// NewCoordinator checks its inputs; it does no IO.
func NewCoordinator(cfg CoordinatorConfig, conn *bus.Conn, meta MetaSource, profiles *selection.Profiles) (*Coordinator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if conn == nil || meta == nil {
		return nil, errors.New("actors: coordinator needs a bus connection and a metadata source")
	}
	if profiles == nil {
		profiles = selection.DefaultProfiles()
	}
	log := cfg.Logger
	if log == nil {
		log = DiscardLogger()
	}
	c := &Coordinator{cfg: cfg, conn: conn, meta: newMetaCache(meta), log: log, stop: make(chan struct{})}
	c.board = NewLoadBoard(time.Now, profiles.Decays())
	c.profiles.Store(profiles)
	return c, nil
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
	c.started = time.Now()
	sc := c.cfg.System
	sc.Logger = c.log
	sys, err := StartSystem(sc)
	if err != nil {
		return err
	}
	c.sys = sys
	root := sys.Actors.Root
	reg := &RegistryActor{board: c.board, status: &c.status, hostPID: &c.hostPIDs, misses: c.cfg.HeartbeatMisses, now: time.Now,
		hosts: map[string]*actor.PID{}, addrs: map[string]map[string]bool{}}
	if c.registry, err = root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return reg }), "scanplane-registry"); err != nil {
		c.Close()
		return err
	}
	if c.router, err = root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return newRouterActor(c) }), RouterName); err != nil {
		c.Close()
		return err
	}
	sys.Actors.EventStream.Subscribe(func(evt any) {
		if e, ok := evt.(*remote.EndpointTerminatedEvent); ok {
			root.Send(c.registry, e)
		}
	})
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
	c.wg.Add(1)
	go c.sweepLoop()
	c.log.Info("coordinator started", "address", sys.Address())
	return nil
}

// metaWatcher is a MetaSource that reports current-generation changes
// (bus.MetaStore does).
type metaWatcher interface {
	Watch(ctx context.Context, fn func(table string, gen uint64)) error
}

// watchMeta drops cached table generations that no scan can ask for any
// more: when generation N becomes current, those older than N−1 (ingest
// keeps the previous one readable). Without a watching source the cache
// keeps what it loaded.
func (c *Coordinator) watchMeta() {
	w, ok := c.meta.src.(metaWatcher)
	if !ok {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.stopWatch = cancel
	err := w.Watch(ctx, func(table string, gen uint64) {
		switch {
		case gen == 0: // table removed
			c.meta.forget(table, ^uint64(0))
		case gen > 1:
			c.meta.forget(table, gen-1)
		}
	})
	if err != nil {
		c.log.Warn("metadata watch failed; cached table generations are kept", "err", err)
	}
}

func (c *Coordinator) sweepLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.sys.Actors.Root.Send(c.registry, &sweepTick{})
		}
	}
}

// Address is the actor system's advertised address.
func (c *Coordinator) Address() string { return c.sys.Address() }

// Profiles returns the profiles in force.
func (c *Coordinator) Profiles() *selection.Profiles { return c.profiles.Load() }

// SetProfiles replaces the profiles (new scans use them; running scans
// keep theirs).
func (c *Coordinator) SetProfiles(p *selection.Profiles) {
	c.profiles.Store(p)
	d := p.Decays()
	c.board.SetDecays(d)
	if c.sys != nil {
		c.sys.Actors.Root.Send(c.registry, &setDecays{decays: d})
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
	if err := c.conn.PublishSignal(k, s); err != nil {
		c.log.Debug("publish signal", "err", err)
	}
}

// Status describes the cluster as this coordinator sees it.
func (c *Coordinator) Status() *messages.StatusReply {
	r := &messages.StatusReply{ScansStarted: c.counters.scans.Load(), ScansFailed: c.counters.failed.Load(),
		Dispatches: c.counters.dispatches.Load(), Hedges: c.counters.hedges.Load(), Busy: c.counters.busy.Load(),
		Timeouts: c.counters.timeouts.Load(), ProfilesSummary: strings.Join(c.Profiles().Summary(), "\n"),
		StartedUnixMs: c.started.UnixMilli()}
	c.status.Range(func(_, v any) bool {
		r.Servers = append(r.Servers, v.([]*messages.ServerStatus)...)
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

// Collectors returns Prometheus collectors for the coordinator's counters.
func (c *Coordinator) Collectors() []prometheus.Collector {
	f := func(name, help string, v *atomic.Uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "scanplane_coordinator_" + name, Help: help},
			func() float64 { return float64(v.Load()) })
	}
	return []prometheus.Collector{
		f("scans_total", "Scan requests received by tablet actors.", &c.counters.scans),
		f("scans_failed_total", "Scan requests answered with an error.", &c.counters.failed),
		f("dispatches_total", "StartScan messages sent (retries and hedges included).", &c.counters.dispatches),
		f("hedges_total", "Hedged or speculative dispatches.", &c.counters.hedges),
		f("busy_total", "Attempts answered busy.", &c.counters.busy),
		f("timeouts_total", "Attempts that timed out waiting for the server.", &c.counters.timeouts),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "scanplane_coordinator_live_servers", Help: "Live scan servers in the view."},
			func() float64 {
				n := 0
				for _, s := range c.board.View().Servers {
					if s.Alive {
						n++
					}
				}
				return float64(n)
			}),
	}
}

// Close stops everything Start started.
func (c *Coordinator) Close() {
	c.once.Do(func() {
		close(c.stop)
		c.wg.Wait()
		if c.stopWatch != nil {
			c.stopWatch()
		}
		for _, s := range c.subs {
			_ = s.Close()
		}
		if c.sys != nil {
			if c.router != nil {
				_ = c.sys.Actors.Root.StopFuture(c.router).Wait()
			}
			if c.registry != nil {
				_ = c.sys.Actors.Root.StopFuture(c.registry).Wait()
			}
			c.sys.Close()
		}
	})
}
