package scanserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/cache"
	"github.com/scanplane/scanplane/internal/remoting"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
)

// HostAgentConfig configures one scanserver process (one host agent).
type HostAgentConfig struct {
	// Host is the host id (default: the machine's hostname, set by the
	// command). Servers of one host share its cache.
	Host string
	// Zone and Group: the host's availability zone and resource group.
	// Defaults "default".
	Zone  string
	Group string
	// Servers: scan-server actors in this process; default 2.
	Servers int
	// System: where the actor system listens (default 127.0.0.1:0).
	System remoting.SystemConfig
	// Server: per-server settings (workers, queue, batches, faults).
	Server ScanServerConfig
	// FaultServer: which server index gets Server.Fault; -1 = all (default).
	FaultServer int
	// Cache: the host block cache (default 256 MiB).
	Cache cache.Config
	// DigestBytes: the budget of the host's cache of block digest trees
	// (tablets.DigestCache), which outlives the blocks in Cache; 0
	// (default) = Cache.MaxBytes/4. A block's digests take a
	// small fraction of its bytes.
	DigestBytes int64
	// HeartbeatInterval: how often each server announces itself; default 1s.
	HeartbeatInterval time.Duration
	Logger            *slog.Logger
}

// DefaultHostAgentConfig returns the documented defaults (Host empty).
func DefaultHostAgentConfig() HostAgentConfig {
	return HostAgentConfig{Zone: "default", Group: "default", Servers: 2,
		System: remoting.SystemConfig{Listen: "127.0.0.1:0"}, Server: DefaultScanServerConfig(), FaultServer: -1,
		Cache: cache.DefaultConfig(), HeartbeatInterval: time.Second}
}

// Validate names the first bad field.
func (c HostAgentConfig) Validate() error {
	switch {
	case c.Host == "":
		return errors.New("scanserver: host agent Host is empty")
	case bus.Token(c.Host) != c.Host:
		return fmt.Errorf("scanserver: host agent Host %q may only contain [A-Za-z0-9_-]", c.Host)
	case c.Zone == "":
		return errors.New("scanserver: host agent Zone is empty")
	case c.Group == "":
		return errors.New("scanserver: host agent Group is empty")
	case c.Servers < 1 || c.Servers > 256:
		return fmt.Errorf("scanserver: host agent Servers %d must be in [1, 256]", c.Servers)
	case c.FaultServer < -1 || c.FaultServer >= c.Servers:
		return fmt.Errorf("scanserver: host agent FaultServer %d must be -1 or a server index < %d", c.FaultServer, c.Servers)
	case c.DigestBytes < 0:
		return fmt.Errorf("scanserver: host agent DigestBytes %d must be >= 0 (0 = Cache.MaxBytes/4)", c.DigestBytes)
	case c.HeartbeatInterval < 10*time.Millisecond:
		return fmt.Errorf("scanserver: host agent HeartbeatInterval %v must be >= 10ms", c.HeartbeatInterval)
	}
	if err := c.System.Validate(); err != nil {
		return err
	}
	if err := c.Server.Validate(); err != nil {
		return err
	}
	return c.Cache.Validate()
}

// ServerActorID is the actor id of scan server idx in a host agent.
func ServerActorID(idx int) string { return "scanserver-" + strconv.Itoa(idx) }

// HostAgent is one scanserver process: an actor system, one host block
// cache, Servers scan-server actors, and their heartbeats on NATS.
type HostAgent struct {
	cfg         HostAgentConfig
	conn        *bus.Conn
	store       tablets.BlockStore
	log         *slog.Logger
	sys         *remoting.System
	cache       *cache.BlockCache
	incarnation string
	ids         []string
	pids        []*actor.PID
	counters    []*ServerCounters
	metrics     *serverMetrics
	stop        chan struct{}
	// heartbeatFailing: the last heartbeat could not be published
	// (Start, then the heartbeat loop; never at once).
	heartbeatFailing bool
	life             context.Context
	endLife          context.CancelFunc
	wg               sync.WaitGroup
	closeOnce        sync.Once
}

// NewHostAgent checks the config; it does no IO.
func NewHostAgent(cfg HostAgentConfig, conn *bus.Conn, store tablets.BlockStore) (*HostAgent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if conn == nil || store == nil {
		return nil, errors.New("scanserver: host agent needs a bus connection and a block store")
	}
	log := cfg.Logger
	if log == nil {
		log = remoting.DiscardLogger()
	}
	life, end := context.WithCancel(context.Background())
	return &HostAgent{cfg: cfg, conn: conn, store: store, log: log.With("host", cfg.Host), stop: make(chan struct{}), life: life, endLife: end,
		metrics: newServerMetrics(cfg.Host, cfg.Server.Workers)}, nil
}

// Start starts the actor system, the cache, the servers and heartbeats.
func (h *HostAgent) Start(ctx context.Context) error {
	var err error
	if h.cache, err = cache.New(h.cfg.Cache); err != nil {
		return err
	}
	sc := h.cfg.System
	sc.Logger = h.log
	if h.sys, err = remoting.StartSystem(sc); err != nil {
		h.cache.Close()
		return err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	h.incarnation = hex.EncodeToString(b[:])
	if _, err := h.sys.Actors.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return echoActor{} },
		actor.WithGuardian(restartStrategy("echo", h.log))), wire.EchoName); err != nil {
		h.Close()
		return fmt.Errorf("scanserver: spawn echo actor: %w", err)
	}
	fetcher := h.cache.Fetcher(retrying(h.store))
	digestBytes := h.cfg.DigestBytes
	if digestBytes == 0 {
		digestBytes = max(h.cfg.Cache.MaxBytes/4, 1)
	}
	digests := tablets.NewDigestCache(digestBytes)
	source := blockSource(h.store)
	gens := &lazyMetaStore{conn: h.conn}
	for i := 0; i < h.cfg.Servers; i++ {
		id := wire.ServerID(h.sys.Address(), i)
		scfg := h.cfg.Server
		if h.cfg.FaultServer >= 0 && h.cfg.FaultServer != i {
			scfg.Fault = FaultConfig{}
		}
		counters := &ServerCounters{}
		newActor := func() *ScanServerActor {
			a := NewScanServerActor(scfg, ServerDeps{ID: id, Host: h.cfg.Host, Fetcher: fetcher, Digests: digests, Gens: gens, System: h.sys.Actors,
				Life: h.life, Counters: counters, OnBusy: h.publishBusy, Logger: h.log})
			a.guard = h.sys.Guard
			a.stages = h.metrics.stageObservers()
			// Timed outside the fault wrapper: injected slowness shows in
			// the fetch latency as an operator would see a slow disk.
			a.fetcher = h.metrics.timed(a.fetcher, source)
			return a
		}
		pid, err := h.sys.Actors.Root.SpawnNamed(ServerProps(newActor, h.log, inlineDispatch(scfg.Fault)...), ServerActorID(i))
		if err != nil {
			h.Close()
			return fmt.Errorf("scanserver: spawn scan server %d: %w", i, err)
		}
		h.ids = append(h.ids, id)
		h.pids = append(h.pids, pid)
		h.counters = append(h.counters, counters)
		h.metrics.add(id, counters)
	}
	h.heartbeat(false)
	h.wg.Add(1)
	go h.heartbeatLoop()
	h.log.Info("host agent started", "address", h.sys.Address(), "servers", h.cfg.Servers, "incarnation", h.incarnation)
	return nil
}

func (h *HostAgent) publishBusy(sig *messages.LoadSignal) {
	if err := h.conn.PublishSignal(bus.SignalBusy, sig); err != nil {
		h.log.Debug("publish busy", "err", err)
	}
}

func (h *HostAgent) heartbeatLoop() {
	defer h.wg.Done()
	t := time.NewTicker(h.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			h.heartbeat(false)
		}
	}
}

func (h *HostAgent) heartbeat(leaving bool) {
	st := h.cache.Stats()
	now := time.Now()
	for i, id := range h.ids {
		c := h.counters[i]
		hb := &messages.Heartbeat{
			Host: h.cfg.Host, Server: id, Zone: h.cfg.Zone, Group: h.cfg.Group, Pid: wire.FromPID(h.pids[i]),
			Incarnation: h.incarnation, QueueLen: uint32(c.QueueLen.Load()), Active: uint32(c.Active.Load()),
			Workers: uint32(h.cfg.Server.Workers), CacheHitRatio: h.cache.HitRatio(), CacheHits: st.Hits, CacheMisses: st.Misses,
			SentUnixMs: now.UnixMilli(), BusyTotal: c.Busy.Load(), IntervalMs: h.cfg.HeartbeatInterval.Milliseconds(),
			Leaving: leaving, ScansTotal: c.Scans.Load(), CacheBytes: uint64(max(st.Bytes, 0)), CacheEvictions: st.Evictions,
		}
		if err := h.conn.PublishHeartbeat(hb); err != nil {
			if !h.heartbeatFailing {
				h.log.Warn("publishing heartbeats failed; retrying every interval", "server", id, "err", err)
			}
			h.heartbeatFailing = true
			return
		}
	}
	if h.heartbeatFailing {
		h.log.Info("publishing heartbeats again")
		h.heartbeatFailing = false
	}
}

// Address is the actor system's advertised address.
func (h *HostAgent) Address() string { return h.sys.Address() }

// ServerIDs lists this agent's server ids.
func (h *HostAgent) ServerIDs() []string { return append([]string(nil), h.ids...) }

// Cache returns the host block cache.
func (h *HostAgent) Cache() *cache.BlockCache { return h.cache }

// Collectors returns the Prometheus collectors of this process's scan
// servers (scanplane_scanserver_*: queue length, running scans, workers,
// scans started and finished by outcome, busy answers, rows and bytes
// streamed, labelled by server and host; block fetch latency by source),
// of its block cache (scanplane_cache_*) and of its actor remote's
// refusals (remoting.RefusedMetric). Call it after Start and
// register the result once per registry; the Go runtime and process
// collectors are the caller's.
func (h *HostAgent) Collectors() []prometheus.Collector {
	guard := h.sys.Guard
	return append([]prometheus.Collector{h.metrics, remoting.RefusedCollector(func() *remoting.Guard { return guard })}, h.cache.Collectors()...)
}

// Incarnation is this process's incarnation id.
func (h *HostAgent) Incarnation() string { return h.incarnation }

// Close announces leaving, stops the servers and the actor system.
func (h *HostAgent) Close() {
	h.closeOnce.Do(func() {
		close(h.stop)
		h.endLife()
		h.wg.Wait()
		if h.sys == nil {
			return
		}
		if len(h.ids) > 0 {
			h.heartbeat(true)
		}
		for _, pid := range h.pids {
			_ = h.sys.Actors.Root.StopFuture(pid).Wait()
		}
		h.sys.Close()
		if h.cache != nil {
			h.cache.Close()
		}
	})
}

// lazyMetaStore binds the metadata bucket on first use: a scan server
// needs it only to tell a deleted generation from a lost block, and the
// store may be down when the agent starts. Safe for concurrent use.
type lazyMetaStore struct {
	conn *bus.Conn
	mu   sync.Mutex
	ms   *bus.MetaStore
	// files: the file lists of tablets kept in manifests, loaded from the
	// bucket once per host.
	files tablets.TabletFiles
}

func (l *lazyMetaStore) store(ctx context.Context) (*bus.MetaStore, error) {
	l.mu.Lock()
	ms := l.ms
	l.mu.Unlock()
	if ms == nil {
		m, err := l.conn.MetaStore(ctx)
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		l.ms, ms = m, m
		l.mu.Unlock()
	}
	return ms, nil
}

// Current implements GenerationSource.
func (l *lazyMetaStore) Current(ctx context.Context, table string) (uint64, error) {
	ms, err := l.store(ctx)
	if err != nil {
		return 0, err
	}
	return ms.Current(ctx, table)
}

// TabletFiles returns the files of a tablet whose scan request names
// its manifests (tablets.TabletFiles).
func (l *lazyMetaStore) TabletFiles(ctx context.Context, ref *messages.TabletRef, refs []*messages.ManifestRef) ([]*messages.FileRef, error) {
	l.mu.Lock()
	if l.files.Get == nil {
		l.files.Get = func(ctx context.Context, table string, id tablets.ManifestID) ([]byte, error) {
			ms, err := l.store(ctx)
			if err != nil {
				return nil, err
			}
			return ms.GetManifest(ctx, table, id.Gen, id.Digest)
		}
	}
	l.mu.Unlock()
	return l.files.Files(ctx, ref, refs)
}
