// Package client is scanplane's Go client library. A Client knows the
// coordinators (Config.Coordinators, or their leases on NATS), keeps
// table metadata, and scans key ranges: Scan returns an iterator that
// yields exactly the rows of the range, in key order, each once — or an
// error that says what failed. Every batch is verified (row count and
// checksum) before its rows are handed over. If the server streaming a
// tablet dies, stalls or sends a batch that fails verification, the client
// resumes after the last key it handed over, on another server; if the
// coordinator is lost, requests go to another (or the same, once back) or
// the scan fails naming it (README, "When something dies").
//
// The per-tablet protocol is a pure state machine, TabletStream; Rows is
// the shell that runs it.
//
// Concurrency contract: a Client is safe for concurrent use by many
// goroutines; each Rows iterator belongs to one goroutine. New does no IO;
// Start connects; Close releases everything and returns within about a
// second.
package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/credentials"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/remoting"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/wire"
)

var (
	// ErrScan: the cluster answered a scan with an error (see *ScanError).
	ErrScan = errors.New("client: scan failed")
	// ErrNoCoordinator: no coordinator could be found or reached.
	ErrNoCoordinator = errors.New("client: no coordinator")
	// ErrNoTable: the table does not exist.
	ErrNoTable = errors.New("client: no such table")
	// ErrClosed: the client is closed.
	ErrClosed = errors.New("client: closed")
	// ErrStream: the row stream broke in a way resuming could not mend.
	ErrStream = errors.New("client: row stream broken")
)

// ScanError is an error answered by the coordinator or a scan server.
type ScanError struct {
	Code     messages.ErrorCode
	Message  string
	Attempts []*messages.AttemptInfo
}

func (e *ScanError) Error() string {
	return fmt.Sprintf("client: scan failed: %s: %s", e.Code, e.Message)
}

// Is makes errors.Is(err, ErrScan) true.
func (e *ScanError) Is(target error) bool { return target == ErrScan }

// Config configures a Client.
type Config struct {
	// NATSURL: the cluster's NATS; default nats://127.0.0.1:4222.
	NATSURL string
	// Coordinators: the coordinators' actor addresses (host:port) in order
	// of preference. A scan request whose coordinator is lost before any
	// data arrived goes to the next one that is up, or to the same one once
	// it is back. Empty = discover them from the leases they keep on NATS
	// (bus.LeaseStore) and follow those as coordinators come and go; the
	// client then prefers the coordinator whose embedded NATS server it is
	// connected to, else one picked by rendezvous hashing of its client id
	// (spreading clients over coordinators).
	Coordinators []string
	// Coordinator: one coordinator address, shorthand for a one-element
	// Coordinators (set one of the two, not both).
	Coordinator string
	// CoordinatorWait: how long a scan that lost its coordinator waits for
	// one to be up (again) before it fails with ErrNoCoordinator; default 3s.
	CoordinatorWait time.Duration
	// MaxRequestTime: the deadline a scan request carries when the scan's
	// context has none, so every flow in the coordinator ends; default 1h.
	MaxRequestTime time.Duration
	// Listen: the client's own actor endpoint (rows stream to it);
	// default 127.0.0.1:0 (ephemeral).
	Listen string
	// Advertise: host:port servers use to reach this client; default the
	// listen address.
	Advertise string
	// BatchRows asks servers for this many rows per batch; 0 = server default.
	BatchRows uint32
	// Window: unacknowledged batches in flight per scan, 1..wire.MaxWindow;
	// default 4.
	Window uint32
	// StallTimeout: a stream that delivered data and then nothing for this
	// long is resumed on another server; default 2s.
	StallTimeout time.Duration
	// IdleTimeout: a tablet request that has had no data and heard
	// nothing (no rows, no progress: a coordinator holding a request says
	// what it waits for every second) for this long is sent to another
	// coordinator; when none is left the scan fails with ErrNoCoordinator
	// after CoordinatorWait. Default 3s.
	IdleTimeout time.Duration
	// MaxResumes per tablet before giving up; default 10.
	MaxResumes int
	// RequestTimeout bounds each status, route and reload call (the call's
	// context may end it sooner); default 5s.
	RequestTimeout time.Duration
	// RouterOnly: send every scan request through the coordinator's
	// router. Default false: once a tablet actor told its PID (it does
	// when a request asks, ScanRequest.want_tablet_actor), the tablet's
	// next requests and ScanDones go straight to it.
	RouterOnly bool
	// System: an actor system with remote already started to use instead
	// of starting one (Listen and Advertise are then ignored). A process
	// should run one protoactor remote: each remote start rewrites grpc's
	// global logger. The client does not shut a given System down.
	System *actor.ActorSystem
	// TLS, when set, secures the client's actor remote with mutual TLS,
	// as the cluster's (remoting.SystemConfig.TLS): the client dials the
	// coordinators with it (presenting its Certificates, verifying theirs
	// against RootCAs) and its own endpoint, to which the scan servers
	// stream rows, accepts only peers whose certificate ClientCAs
	// verifies (ClientAuth must be tls.RequireAndVerifyClientCert).
	// cliutil.RemoteTLS builds it from a secrets directory's client
	// certificate. The client's NATS connection uses it too (TLS,
	// presenting the certificate, also with System). nil = plain text.
	// Ignored by the actor remote with System.
	TLS    *tls.Config
	Logger *slog.Logger
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{NATSURL: "nats://127.0.0.1:4222", Listen: "127.0.0.1:0", Window: 4, StallTimeout: 2 * time.Second,
		IdleTimeout: 3 * time.Second, MaxResumes: 10, RequestTimeout: 5 * time.Second,
		CoordinatorWait: 3 * time.Second, MaxRequestTime: time.Hour}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.NATSURL == "":
		return errors.New("client: NATSURL is empty")
	case c.Listen == "":
		return errors.New("client: Listen is empty")
	case c.Window < 1 || c.Window > wire.MaxWindow:
		return fmt.Errorf("client: Window %d must be in [1, %d]", c.Window, wire.MaxWindow)
	case c.StallTimeout <= 0:
		return errors.New("client: StallTimeout must be > 0")
	case c.IdleTimeout <= 0:
		return errors.New("client: IdleTimeout must be > 0")
	case c.MaxResumes < 0:
		return errors.New("client: MaxResumes must be >= 0")
	case c.RequestTimeout <= 0:
		return errors.New("client: RequestTimeout must be > 0")
	case c.CoordinatorWait <= 0:
		return errors.New("client: CoordinatorWait must be > 0")
	case c.MaxRequestTime <= 0:
		return errors.New("client: MaxRequestTime must be > 0")
	case c.Coordinator != "" && len(c.Coordinators) > 0:
		return errors.New("client: set Coordinators or Coordinator, not both")
	}
	if c.TLS != nil && c.System == nil {
		switch {
		case len(c.TLS.Certificates) == 0 && c.TLS.GetClientCertificate == nil:
			return errors.New("client: TLS has no certificate (the cluster requires one)")
		case c.TLS.ClientAuth != tls.RequireAndVerifyClientCert || c.TLS.ClientCAs == nil:
			return errors.New("client: TLS must require and verify peer certificates (ClientAuth tls.RequireAndVerifyClientCert, ClientCAs = the cluster CA)")
		}
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("client: Listen %q: %v", c.Listen, err)
	}
	if c.Coordinator != "" {
		if _, _, err := net.SplitHostPort(c.Coordinator); err != nil {
			return fmt.Errorf("client: Coordinator %q: %v", c.Coordinator, err)
		}
	}
	for i, a := range c.Coordinators {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("client: Coordinators[%d] %q: %v", i, a, err)
		}
	}
	return nil
}

// coordinators is the configured list (Coordinator as a one-element list).
func (c Config) coordinators() []string {
	if c.Coordinator != "" {
		return []string{c.Coordinator}
	}
	return slices.Clone(c.Coordinators)
}

// Client scans scanplane tables.
type Client struct {
	cfg    Config
	log    *slog.Logger
	id     string
	conn   *bus.Conn
	meta   *bus.MetaStore
	leases *bus.LeaseStore
	sys    *actor.ActorSystem
	ownSys bool
	rem    *remote.Remote
	stops  *remoting.Tracker // the remote's stream handlers, for a race-free Close
	rx     *actor.PID
	evSub  *eventstream.Subscription

	mu      sync.Mutex
	inboxes map[string]*inbox              // by request id
	streams map[*inbox]struct{}            // inboxes of running tablet streams
	tables  map[string]*messages.TableMeta // by name/gen
	current map[string]uint64              // current generation per table, from the KV watch
	watch   context.CancelFunc
	bg      sync.WaitGroup // the metadata and lease watches, stopped by watch
	closed  bool
	coord   coordDirectory
	// tabletActors: where a tablet's requests go without the router.
	tabletActors tabletActorDirectory
}

// coordDirectory is what the client knows about the coordinators; guarded
// by Client.mu.
type coordDirectory struct {
	discover  bool              // the list comes from the coordinators' leases
	list      []string          // in order of preference
	lost      map[string]string // lost coordinators: why
	connected map[string]bool   // the endpoint was connected at least once
	instance  map[string]string // incarnation (and start time) from its lease
	routers   map[string]string // router actor id per address, from its lease
	leased    map[string]bool   // addresses with a live lease
	// clustered: the leased coordinators form a cluster (their leases
	// name the tablet kind): requests go to each tablet's owner.
	clustered bool
	probing   bool
	// watched: the lease watch has reported the leases at least once.
	watched bool
}

// New checks the config; it does no IO.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	list := cfg.coordinators()
	return &Client{cfg: cfg, log: log, id: "c" + hex.EncodeToString(b[:]), inboxes: map[string]*inbox{},
		streams: map[*inbox]struct{}{}, tables: map[string]*messages.TableMeta{}, current: map[string]uint64{},
		coord: coordDirectory{discover: len(list) == 0, list: list, lost: map[string]string{}, connected: map[string]bool{},
			instance: map[string]string{}, routers: map[string]string{}, leased: map[string]bool{}}}, nil
}

// Start connects to NATS, finds the coordinator and starts the client's
// actor endpoint. It returns when ctx ends, with ctx's error.
//
// One Client serves any number of concurrent scans; a process needs one.
// A process that runs several starts them all before any of them scans:
// starting an actor endpoint (protoactor's Remote.Start) replaces gRPC's
// process-wide logger without synchronisation, a data race with the
// connections of a client already in use.
func (c *Client) Start(ctx context.Context) error {
	if err := c.start(ctx); err != nil {
		c.Close()
		return err
	}
	return nil
}

func (c *Client) start(ctx context.Context) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return ErrClosed
	}
	bc := bus.DefaultConfig()
	bc.URL = c.cfg.NATSURL
	bc.Name = "scanplane-client-" + c.id
	bc.TLS = c.cfg.TLS
	conn, err := bus.Connect(ctx, bc)
	if err != nil {
		return fmt.Errorf("client: connect to NATS %s: %w", c.cfg.NATSURL, err)
	}
	c.conn = conn
	if c.meta, err = conn.MetaStore(ctx); err != nil {
		return fmt.Errorf("client: metadata store: %w", err)
	}
	if c.cfg.System != nil {
		c.sys = c.cfg.System
	} else if err := c.startSystem(); err != nil {
		return err
	}
	c.evSub = c.sys.EventStream.Subscribe(c.onEndpointEvent)
	c.rx, err = c.sys.Root.SpawnNamed(actor.PropsFromFunc(c.receive), "client-"+c.id)
	if err != nil {
		return fmt.Errorf("client: start endpoint actor: %w", err)
	}
	// Keep every table's current generation up to date (a table the
	// watch has not reported is read directly), and follow the
	// coordinators' leases: new ones, departed or dead ones, restarted
	// ones (a new incarnation). Both run in the background for the
	// client's life: a JetStream electing a leader after a NATS node was
	// lost answers nothing for seconds, and a scan needs neither at once.
	wctx, cancel := context.WithCancel(context.Background())
	c.watch = cancel
	c.bg.Add(2)
	go func() {
		defer c.bg.Done()
		if err := bus.RetryUnavailable(wctx, 0, func() error { return c.meta.Watch(wctx, c.onTableChange) }); err != nil && wctx.Err() == nil {
			c.log.Warn("client: metadata watch failed; tables are read directly", "err", err)
		}
	}()
	go func() {
		defer c.bg.Done()
		c.followLeases(wctx, conn)
	}()
	if c.coord.discover {
		if err := c.discover(ctx); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("client: start: %w", err)
	}
	return nil
}

// discoverWait bounds how long Start waits to learn of a first
// coordinator when the client discovers coordinators.
const discoverWait = 10 * time.Second

// followLeases binds the lease bucket and watches it (onLeases) until ctx
// ends, trying again while JetStream is unavailable.
func (c *Client) followLeases(ctx context.Context, conn *bus.Conn) {
	err := bus.RetryUnavailable(ctx, 0, func() error {
		leases, err := conn.Leases(ctx, bus.DefaultLeaseConfig())
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.leases = leases
		c.mu.Unlock()
		return leases.Watch(ctx, func(live []*messages.ClusterInfo) {
			c.mu.Lock()
			c.coord.watched = true
			c.mu.Unlock()
			c.onLeases(live)
		})
	})
	if err != nil && ctx.Err() == nil {
		c.log.Warn("client: coordinator lease watch failed", "err", err)
	}
}

// discover waits until the client knows a coordinator: from the lease
// watch, or by asking the coordinators over core NATS (bus.Discover),
// which answers while the lease bucket cannot. It gives up after
// discoverWait with ErrNoCoordinator.
func (c *Client) discover(ctx context.Context) error {
	start := time.Now()
	none := func(err error) error {
		msg := fmt.Sprintf("no coordinator lease on NATS %s and none answered within %v (is a coordinator running?)",
			c.cfg.NATSURL, time.Since(start).Round(time.Millisecond))
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrNoCoordinator, msg, err)
		}
		return fmt.Errorf("%w: %s", ErrNoCoordinator, msg)
	}
	for {
		c.mu.Lock()
		n, watched := len(c.coord.list), c.coord.watched
		c.mu.Unlock()
		if n > 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return none(err)
		}
		if time.Since(start) > discoverWait {
			return none(nil)
		}
		live, err := c.conn.Discover(ctx, time.Second)
		c.mu.Lock()
		empty := len(c.coord.list) == 0
		c.mu.Unlock()
		if err == nil && len(live) > 0 && empty {
			c.onLeases(live)
			continue
		}
		if watched && errors.Is(err, bus.ErrNoAnswer) && errors.Is(err, nats.ErrNoResponders) {
			// No lease and nobody listening: no coordinator runs.
			return none(nil)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Client) startSystem() error {
	host, portS, _ := net.SplitHostPort(c.cfg.Listen)
	port, err := strconv.Atoi(portS)
	if err != nil {
		return fmt.Errorf("client: Listen port %q: %v", portS, err)
	}
	quiet := slog.New(slog.DiscardHandler)
	c.sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }), actor.WithDeadLetterThrottleCount(0))
	c.ownSys = true
	opts := []remote.ConfigOption{remoting.WriterQueueOption()}
	if c.cfg.Advertise != "" {
		opts = append(opts, remote.WithAdvertisedHost(c.cfg.Advertise))
	}
	c.stops = remoting.NewTracker()
	var creds credentials.TransportCredentials
	if c.cfg.TLS != nil {
		creds = credentials.NewTLS(c.cfg.TLS)
	}
	opts = append(opts, remoting.TransportOptions(creds, remoting.NewGuard(c.log, c.sys), c.stops.ServerOption())...)
	rc := remote.Configure(host, port, opts...)
	// A connection that fails is reported (EndpointTerminatedEvent) after
	// one try and its 2s back-off instead of five: a dead coordinator is
	// noticed sooner and shutdown never waits on a long retry loop.
	rc.MaxRetryCount = 1
	c.rem = remote.NewRemote(c.sys, rc)
	if err := startRemote(c.rem); err != nil {
		c.rem = nil
		return fmt.Errorf("client: listen on %s: %v", c.cfg.Listen, err)
	}
	return nil
}

func startRemote(r *remote.Remote) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	r.Start()
	return nil
}

// Coordinator returns the address of the coordinator requests go to
// first: the first in the list that is not known to be lost.
func (c *Client) Coordinator() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.coord.list {
		if _, lost := c.coord.lost[a]; !lost {
			return a
		}
	}
	if len(c.coord.list) > 0 {
		return c.coord.list[0]
	}
	return ""
}

// Coordinators returns the coordinators the client knows, in order of
// preference, with why each lost one was lost ("" = up).
func (c *Client) Coordinators() (addrs, lost []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.coord.list {
		addrs = append(addrs, a)
		lost = append(lost, c.coord.lost[a])
	}
	return addrs, lost
}

// closeWait bounds how long Close waits for the actor remote to stop. A
// remote left stopping in the background keeps goroutines that read
// gRPC's global logger, which the next remote started in the same process
// writes (protoactor's Remote.Start): a data race in processes that start
// client after client. 3 s leaves room for a slow stop; a dead peer costs
// no more.
const closeWait = 3 * time.Second

// Close stops the client; running scans fail with ErrClosed. It returns
// within about three seconds whatever is dead: it does not wait for a
// graceful remote shutdown (peers see the connection drop).
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	for _, in := range c.inboxes {
		in.close()
	}
	for in := range c.streams {
		in.close()
	}
	c.mu.Unlock()
	if c.watch != nil {
		c.watch()
		c.bg.Wait()
	}
	if c.sys != nil && c.evSub != nil {
		c.sys.EventStream.Unsubscribe(c.evSub)
	}
	if c.rx != nil {
		c.sys.Root.Stop(c.rx)
	}
	if c.rem != nil {
		done := make(chan struct{})
		rem := c.rem
		go func() {
			defer close(done)
			// Inbound streams stop at once; the outbound endpoints stop
			// once no stream handler runs (internal/remoting).
			c.stops.Stop(rem, closeWait)
		}()
		select {
		case <-done:
		case <-time.After(closeWait):
			c.log.Debug("actor remote still stopping; not waiting for it", "waited", closeWait)
		}
	}
	if c.sys != nil && c.ownSys {
		c.sys.Shutdown()
	}
	if c.conn != nil {
		c.conn.Close()
	}
	return nil
}

// receive is the client endpoint actor: it hands each message to the
// inbox of its request.
func (c *Client) receive(ctx actor.Context) {
	var id string
	switch m := ctx.Message().(type) {
	case *messages.RowBatch:
		id = m.GetRequestId()
	case *messages.ScanFinished:
		id = m.GetRequestId()
	case *messages.ScanError:
		id = m.GetRequestId()
	case *messages.ScanRouted:
		id = m.GetRequestId()
	case *messages.ScanProgress:
		id = m.GetRequestId()
	default:
		return
	}
	c.mu.Lock()
	in := c.inboxes[id]
	c.mu.Unlock()
	if in != nil {
		in.put(ctx.Message())
	} else if b, ok := ctx.Message().(*messages.RowBatch); ok {
		// A straggler of a finished request: stop it.
		if p := b.GetServerPid(); p != nil {
			c.sys.Root.Send(actor.NewPID(p.Address, p.Id), &messages.Cancel{RequestId: b.RequestId, Attempt: b.Attempt, Reason: "request already done"})
		}
	}
}

// coordEvent tells a running stream that a coordinator was lost or is up.
type coordEvent struct {
	addr string
	lost bool
	why  string
}

// openStream registers a tablet stream's inbox for coordinator events and
// returns the coordinator list and the lost ones at this moment (events
// after it reach the inbox).
func (c *Client) openStream() (in *inbox, coords []string, lost map[string]string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, nil, nil, ErrClosed
	}
	in = newInbox()
	c.streams[in] = struct{}{}
	if len(c.coord.lost) > 0 && !c.coord.probing && c.sys != nil {
		c.coord.probing = true
		go c.probe()
	}
	return in, slices.Clone(c.coord.list), maps.Clone(c.coord.lost), nil
}

// register routes a request id's replies to in.
func (c *Client) register(id string, in *inbox) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.inboxes[id] = in
	return nil
}

// closeStream forgets a stream's inbox and request ids.
func (c *Client) closeStream(in *inbox, ids []string) {
	c.mu.Lock()
	delete(c.streams, in)
	for _, id := range ids {
		delete(c.inboxes, id)
	}
	c.mu.Unlock()
}

// nextRequestID returns a new request id: the client's id (for logs) and
// 128 random bits from crypto/rand, so that no one who sees or guesses
// other ids can name (and cancel) a request of this client.
func (c *Client) nextRequestID() string {
	return c.id + "-" + newRequestID()
}

// newRequestID is 128 bits from crypto/rand in hex (32 characters).
func newRequestID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand.Read does not fail on supported platforms (Go 1.24+
		// crashes the program instead); never fall back to guessable ids.
		panic("client: crypto/rand: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

func (c *Client) send(pid *actor.PID, msg any) { c.sys.Root.Send(pid, msg) }

func (c *Client) self() *messages.Pid { return &messages.Pid{Address: c.rx.Address, Id: c.rx.Id} }

// routerPID is the router of the coordinator at addr.
func (c *Client) routerPID(addr string) *actor.PID {
	c.mu.Lock()
	id := c.routerActorIDLocked(addr)
	c.mu.Unlock()
	return actor.NewPID(addr, id)
}

func (c *Client) routerActorIDLocked(addr string) string {
	if id := c.coord.routers[addr]; id != "" {
		return id
	}
	return wire.RouterName
}

// requestTarget is where a ScanRequest for ref goes: the tablet's actor at
// the coordinator addr when known, else addr's router, and then req asks
// for the tablet actor's PID. A request that avoids coordinators always
// goes through the router (it decides where it is served).
func (c *Client) requestTarget(ref *messages.TabletRef, addr string, req *messages.ScanRequest) *actor.PID {
	if !c.cfg.RouterOnly && len(req.GetAvoidCoordinators()) == 0 {
		if pid := c.tabletActorAt(ref, addr); pid != nil {
			return pid
		}
		req.WantTabletActor = true
	}
	return c.routerPID(addr)
}

// doneTarget is where a ScanDone for ref goes: as requestTarget.
func (c *Client) doneTarget(ref *messages.TabletRef, addr string) *actor.PID {
	if pid := c.tabletActorAt(ref, addr); pid != nil {
		return pid
	}
	return c.routerPID(addr)
}

// tabletActorAt is ref's tablet actor at the coordinator addr, if known.
func (c *Client) tabletActorAt(ref *messages.TabletRef, addr string) *actor.PID {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tabletActors.lookup(ref, addr)
}

// onScanRouted updates the tablet actor directory from a ScanRouted for a
// request of ref; a bad one is logged and ignored.
func (c *Client) onScanRouted(ref *messages.TabletRef, m *messages.ScanRouted) {
	c.mu.Lock()
	err := c.tabletActors.learn(ref, m, c.routerActorIDLocked(m.GetOwner()))
	c.mu.Unlock()
	if err != nil {
		c.log.Warn("ignored a bad tablet actor address", "err", err)
	}
}

// dropEndpoint makes the remote forget its connection to addr, so that
// the next message opens a new one: a connection to a coordinator that
// left or restarted on the same address may not have failed yet, and what
// is sent into it is lost (protoactor reports nothing for it). Publishing
// EndpointTerminatedEvent is how protoactor's own cluster drops a member's
// endpoint (MemberList.TerminateMember).
func (c *Client) dropEndpoint(addr string) {
	c.mu.Lock()
	sys := c.sys
	c.mu.Unlock()
	if sys != nil {
		sys.EventStream.Publish(&remote.EndpointTerminatedEvent{Address: addr})
	}
}

// onEndpointEvent watches the actor system's event stream: a coordinator
// whose endpoint terminated is lost; one that connects again is up.
func (c *Client) onEndpointEvent(ev any) {
	switch e := ev.(type) {
	case *remote.EndpointTerminatedEvent:
		c.mu.Lock()
		known := slices.Contains(c.coord.list, e.Address)
		why := "endpoint terminated"
		if !c.coord.connected[e.Address] {
			why = "unreachable: endpoint terminated before it ever connected"
			// A refused TLS handshake looks the same from here (with TLS
			// 1.3 the server refuses a client certificate after the
			// client's side of the handshake is done); the coordinator
			// logs the reason.
			if c.cfg.TLS == nil && c.cfg.System == nil {
				why += "; if the cluster runs with --secrets (mutual TLS), the client needs them too"
			} else if c.cfg.System == nil {
				why += "; if the coordinator refused the TLS handshake, its log says why (\"remote: TLS handshake refused\")"
			}
		}
		c.mu.Unlock()
		if known {
			c.coordLost(e.Address, why)
		}
	case *remote.EndpointConnectedEvent:
		c.mu.Lock()
		known := slices.Contains(c.coord.list, e.Address)
		if known {
			c.coord.connected[e.Address] = true
		}
		c.mu.Unlock()
		if known {
			c.coordUp(e.Address)
		}
	}
}

// onLeases follows the coordinators' leases (bus.LeaseStore.Watch): a
// coordinator whose lease appears is up; one whose lease is gone (it left,
// or renewed it not within the lease TTL) is lost; a new incarnation at a
// known address is a restart: lost, then up. With discovery, the list is
// the leased coordinators in order of preference (preferOrder); one whose
// lease is gone leaves the list once lost. With a configured list, leases
// of other addresses are ignored.
func (c *Client) onLeases(live []*messages.ClusterInfo) {
	node := ""
	if c.conn != nil {
		node = c.conn.NATS().ConnectedServerName()
	}
	byAddr := map[string]*messages.ClusterInfo{}
	for _, ci := range live {
		a := ci.GetCoordinatorAddress()
		// Two leases for one address: a restarted coordinator's and its
		// predecessor's, not yet expired. The later start wins.
		if prev := byAddr[a]; prev == nil || ci.GetStartedUnixMs() > prev.GetStartedUnixMs() {
			byAddr[a] = ci
		}
	}
	var ups, gone, restarted []string
	c.mu.Lock()
	for a := range c.coord.leased {
		if byAddr[a] == nil {
			gone = append(gone, a)
			delete(c.coord.leased, a)
		}
	}
	for a, ci := range byAddr {
		if !c.coord.discover && !slices.Contains(c.coord.list, a) {
			delete(byAddr, a)
			continue
		}
		inst := ci.GetIncarnation() + "@" + strconv.FormatInt(ci.GetStartedUnixMs(), 10)
		prev, seen := c.coord.instance[a]
		c.coord.instance[a] = inst
		if id := ci.GetRouterId(); id != "" {
			c.coord.routers[a] = id
		}
		switch {
		case seen && prev != inst:
			restarted = append(restarted, a)
		case !c.coord.leased[a]:
			ups = append(ups, a)
		}
		c.coord.leased[a] = true
	}
	if c.coord.discover {
		c.coord.list = preferOrder(byAddr, node, c.id)
		c.coord.clustered = false
		for _, ci := range byAddr {
			c.coord.clustered = c.coord.clustered || slices.Contains(ci.GetKinds(), wire.TabletKind)
		}
	}
	c.mu.Unlock()
	slices.Sort(gone)
	for _, a := range gone {
		c.coordLost(a, "its lease is gone (it left, or did not renew it in time)")
		c.dropEndpoint(a)
	}
	slices.Sort(restarted)
	for _, a := range restarted {
		// A new incarnation at the same address: the old one and every
		// request it held are gone; the new one takes requests.
		c.coordLost(a, "restarted (new incarnation)")
		c.dropEndpoint(a)
		c.coordUp(a)
	}
	slices.Sort(ups)
	for _, a := range ups {
		c.coordUp(a)
	}
	if c.coord.discover && len(gone) > 0 {
		// Forget the departed: streams have been told, and no probe
		// should knock on their addresses. A lease brings one back.
		c.mu.Lock()
		for _, a := range gone {
			if !c.coord.leased[a] {
				delete(c.coord.lost, a)
				delete(c.coord.connected, a)
			}
		}
		c.mu.Unlock()
	}
}

// byOwner reports whether requests go to each tablet's owner (see
// StreamConfig.ByOwner): the coordinators were discovered and form a
// cluster.
func (c *Client) byOwner() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.coord.discover && c.coord.clustered
}

// preferOrder orders the leased coordinators by preference: the one whose
// embedded NATS server is node (the server the client is connected to:
// one machine to depend on, not two) first, then by rendezvous hashing of
// the client id and the address, so clients spread over coordinators and
// each keeps its order as others come and go.
func preferOrder(byAddr map[string]*messages.ClusterInfo, node, clientID string) []string {
	addrs := slices.Collect(maps.Keys(byAddr))
	local := func(a string) bool { return node != "" && byAddr[a].GetNatsNode() == node }
	slices.SortFunc(addrs, func(x, y string) int {
		if lx, ly := local(x), local(y); lx != ly {
			if lx {
				return -1
			}
			return 1
		}
		if hx, hy := rendezvous(clientID, x), rendezvous(clientID, y); hx != hy {
			if hx > hy {
				return -1
			}
			return 1
		}
		return strings.Compare(x, y)
	})
	return addrs
}

// rendezvous is the FNV-1a 64 hash of client id and address, finished
// with a 64-bit mix (FNV alone barely moves with the last bytes).
func rendezvous(clientID, addr string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(clientID))
	h.Write([]byte{0})
	h.Write([]byte(addr))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// coordLost marks a coordinator lost and tells the running streams.
func (c *Client) coordLost(addr, why string) {
	c.mu.Lock()
	if _, already := c.coord.lost[addr]; already || c.closed {
		c.mu.Unlock()
		return
	}
	c.coord.lost[addr] = why
	c.tabletActors.forgetAddr(addr)
	c.broadcast(coordEvent{addr: addr, lost: true, why: why})
	probe := !c.coord.probing && len(c.streams) > 0 && c.sys != nil
	c.coord.probing = c.coord.probing || probe
	c.mu.Unlock()
	// Info, not Warn: a scan that cannot do without it fails with an error
	// that says so; one that goes on elsewhere has not failed.
	c.log.Info("coordinator lost", "coordinator", addr, "why", why)
	if probe {
		go c.probe()
	}
}

// coordUp marks a coordinator up and tells the running streams.
func (c *Client) coordUp(addr string) {
	c.mu.Lock()
	_, wasLost := c.coord.lost[addr]
	delete(c.coord.lost, addr)
	if !c.closed {
		c.broadcast(coordEvent{addr: addr})
	}
	c.mu.Unlock()
	if wasLost {
		c.log.Info("coordinator up again", "coordinator", addr)
	}
}

// broadcast puts ev into every running stream's inbox; c.mu held.
func (c *Client) broadcast(ev coordEvent) {
	for in := range c.streams {
		in.put(ev)
	}
}

// probeEvery is how often lost coordinators are asked whether they are back.
const probeEvery = 500 * time.Millisecond

// probe checks every lost coordinator while one is lost and a scan runs
// (until the client closes); one that answers a status request is up
// again. It finds a coordinator restarted on the same address when NATS
// cannot tell (its NATS died with it). The status request is sent only
// once a TCP connection to the address succeeds: an actor message to a
// dead address makes the actor system's endpoint for it retry with a
// back-off, and messages sent meanwhile (a scan request to the restarted
// coordinator) would wait behind it.
func (c *Client) probe() {
	for {
		c.mu.Lock()
		var lost []string
		for _, a := range c.coord.list {
			if _, l := c.coord.lost[a]; l {
				lost = append(lost, a)
			}
		}
		if len(lost) == 0 || len(c.streams) == 0 || c.closed {
			c.coord.probing = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		for _, a := range lost {
			conn, err := net.DialTimeout("tcp", a, probeEvery)
			if err != nil {
				continue
			}
			conn.Close()
			res, err := c.sys.Root.RequestFuture(c.routerPID(a), &messages.StatusRequest{}, 2*probeEvery).Result()
			if _, ok := res.(*messages.StatusReply); ok && err == nil {
				c.coordUp(a)
			}
		}
		time.Sleep(probeEvery)
	}
}

func (c *Client) onTableChange(table string, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen == 0 {
		delete(c.current, table)
		return
	}
	c.current[table] = gen
	// Generations older than the previous one are gone from the cluster.
	for k, t := range c.tables {
		if t.GetName() == table && t.GetGeneration()+1 < gen {
			delete(c.tables, k)
		}
	}
}

// Table returns the current generation of a table's metadata. The
// generation comes from a watch on the metadata bucket; a table the watch
// has not reported is looked up directly. A lookup that finds the store
// unavailable (JetStream electing a leader) is tried again for up to
// metaRetryLimit, within ctx.
func (c *Client) Table(ctx context.Context, name string) (*messages.TableMeta, error) {
	if c.meta == nil {
		return nil, ErrClosed
	}
	c.mu.Lock()
	gen := c.current[name]
	c.mu.Unlock()
	if gen == 0 {
		err := bus.RetryUnavailable(ctx, metaRetryLimit, func() (err error) {
			gen, err = c.meta.Current(ctx, name)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("client: table %q: %w", name, err)
		}
	}
	if gen == 0 {
		return nil, fmt.Errorf("%w: %q", ErrNoTable, name)
	}
	key := name + "/" + strconv.FormatUint(gen, 10)
	c.mu.Lock()
	t := c.tables[key]
	c.mu.Unlock()
	if t != nil {
		return t, nil
	}
	err := bus.RetryUnavailable(ctx, metaRetryLimit, func() (err error) {
		t, err = c.meta.Get(ctx, name, gen)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("client: table %q generation %d: %w", name, gen, err)
	}
	c.mu.Lock()
	c.tables[key] = t
	c.mu.Unlock()
	return t, nil
}

// metaRetryLimit bounds how long Table tries a metadata store that does
// not answer: longer than a JetStream leader election after a node died.
const metaRetryLimit = 30 * time.Second

// Tables lists the tables.
func (c *Client) Tables(ctx context.Context) ([]string, error) {
	if c.meta == nil {
		return nil, ErrClosed
	}
	return c.meta.Tables(ctx)
}

// request asks the coordinators, those up first, until one answers, within
// RequestTimeout each and within ctx.
func (c *Client) request(ctx context.Context, msg any) (any, error) {
	if c.sys == nil || c.rx == nil {
		return nil, ErrClosed
	}
	c.mu.Lock()
	var order, lost []string
	whyLost := maps.Clone(c.coord.lost)
	for _, a := range c.coord.list {
		if _, l := whyLost[a]; l {
			lost = append(lost, a)
		} else {
			order = append(order, a)
		}
	}
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	order = append(order, lost...)
	if len(order) == 0 {
		return nil, fmt.Errorf("%w: no coordinator address known", ErrNoCoordinator)
	}
	var fails []string
	for _, addr := range order {
		if ctx.Err() != nil {
			break
		}
		timeout := c.cfg.RequestTimeout
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
			// ctx ends first: let it (a margin keeps the future from
			// timing out a hair before ctx reports its deadline).
			timeout = time.Until(dl) + 100*time.Millisecond
		}
		res, err := waitFuture(ctx, c.sys.Root.RequestFuture(c.routerPID(addr), msg, timeout))
		if err == nil {
			return res, nil
		}
		f := addr + " did not answer"
		switch {
		case errors.Is(err, actor.ErrDeadLetter):
			// The future ended early: the request could not be delivered.
			f = addr + " is unreachable (the request could not be delivered)"
		case ctx.Err() == nil:
			f += fmt.Sprintf(" within %v (%v)", timeout.Round(time.Millisecond), err)
		}
		if why := whyLost[addr]; why != "" {
			f += " and was lost: " + why
		}
		fails = append(fails, f)
	}
	if err := ctx.Err(); err != nil {
		if len(fails) == 0 {
			fails = append(fails, "none asked")
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrNoCoordinator, strings.Join(fails, "; "), err)
	}
	return nil, fmt.Errorf("%w: %s", ErrNoCoordinator, strings.Join(fails, "; "))
}

// waitFuture waits for a future's result or for ctx to end, whichever is
// first (the future itself ends at its own timeout).
func waitFuture(ctx context.Context, f *actor.Future) (any, error) {
	type result struct {
		v   any
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f.Result()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Status asks the coordinator for the cluster status.
func (c *Client) Status(ctx context.Context) (*messages.StatusReply, error) {
	res, err := c.request(ctx, &messages.StatusRequest{})
	if err != nil {
		return nil, err
	}
	r, ok := res.(*messages.StatusReply)
	if !ok {
		return nil, fmt.Errorf("client: unexpected status answer %T", res)
	}
	return r, nil
}

// StatusOf asks the coordinator at addr for its own status (within
// RequestTimeout and ctx), not trying another.
func (c *Client) StatusOf(ctx context.Context, addr string) (*messages.StatusReply, error) {
	if c.sys == nil || c.rx == nil {
		return nil, ErrClosed
	}
	timeout := c.cfg.RequestTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl) + 100*time.Millisecond
	}
	res, err := waitFuture(ctx, c.sys.Root.RequestFuture(c.routerPID(addr), &messages.StatusRequest{}, timeout))
	if err != nil {
		return nil, fmt.Errorf("%w: %s did not answer a status request: %w", ErrNoCoordinator, addr, err)
	}
	r, ok := res.(*messages.StatusReply)
	if !ok {
		return nil, fmt.Errorf("client: unexpected status answer %T from %s", res, addr)
	}
	return r, nil
}

// CoordinatorLeases returns the coordinators' live leases on NATS, sorted
// by member id (bus.LeaseStore.List). While the lease bucket cannot be
// read (the client has not bound it yet, or JetStream is electing a
// leader) it returns what a coordinator answers over core NATS
// (bus.Conn.Discover) instead.
func (c *Client) CoordinatorLeases(ctx context.Context) ([]*messages.ClusterInfo, error) {
	c.mu.Lock()
	leases := c.leases
	c.mu.Unlock()
	var err error
	if leases != nil {
		var live []*messages.ClusterInfo
		if live, err = leases.List(ctx); err == nil || !errors.Is(err, bus.ErrUnavailable) {
			return live, err
		}
	}
	if c.conn == nil {
		return nil, ErrClosed
	}
	live, derr := c.conn.Discover(ctx, c.cfg.RequestTimeout)
	if derr != nil {
		return nil, fmt.Errorf("client: coordinator leases: %w", errors.Join(err, derr))
	}
	sort.Slice(live, func(i, j int) bool { return live[i].GetMemberId() < live[j].GetMemberId() })
	return live, nil
}

// Route asks where a row's tablet would be scanned.
func (c *Client) Route(ctx context.Context, req *messages.RouteRequest) (*messages.RouteReply, error) {
	res, err := c.request(ctx, req)
	if err != nil {
		return nil, err
	}
	r, ok := res.(*messages.RouteReply)
	if !ok {
		return nil, fmt.Errorf("client: unexpected route answer %T", res)
	}
	if r.Error != "" {
		return r, fmt.Errorf("client: route: %s", r.Error)
	}
	return r, nil
}

// ReloadResult is one coordinator's answer to ReloadAll.
type ReloadResult struct {
	Coordinator string // actor address
	Message     string // what it reloaded (the profiles in force)
	Err         error  // why it did not reload (its old profiles stay)
}

// ReloadAll asks every leased coordinator to re-read its profiles file,
// all at once, and returns each one's answer, by address. A coordinator
// that does not answer is asked again until it answers or its lease ends
// (a coordinator that is gone no longer holds profiles, and its successor
// reads the file when it starts); one that still holds its lease without
// answering within twice RequestTimeout (or before ctx ends) has
// ErrNoCoordinator in its result.
func (c *Client) ReloadAll(ctx context.Context) ([]ReloadResult, error) {
	if c.sys == nil || c.rx == nil {
		return nil, ErrClosed
	}
	timeout := c.cfg.RequestTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	until := time.Now().Add(2 * timeout)
	addrs := c.leasedCoordinators(ctx, timeout)
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: none known", ErrNoCoordinator)
	}
	results := map[string]ReloadResult{}
	for pending := addrs; len(pending) > 0; {
		for _, r := range c.reloadEach(ctx, pending, timeout) {
			results[r.Coordinator] = r
		}
		pending = pending[:0:0]
		for a, r := range results {
			if errors.Is(r.Err, ErrNoCoordinator) {
				pending = append(pending, a)
			}
		}
		if len(pending) == 0 || ctx.Err() != nil || time.Now().After(until) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(reloadRetryEvery):
		}
		current := c.leasedCoordinators(ctx, timeout)
		pending = slices.DeleteFunc(pending, func(a string) bool {
			if !slices.Contains(current, a) {
				delete(results, a) // its lease ended: not running
				return true
			}
			return false
		})
	}
	out := make([]ReloadResult, 0, len(results))
	for _, r := range results {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Coordinator < out[j].Coordinator })
	return out, nil
}

// reloadRetryEvery spaces ReloadAll's tries of a coordinator that did not
// answer.
const reloadRetryEvery = 250 * time.Millisecond

// leasedCoordinators returns the addresses of the coordinators that hold
// a lease now, read from the lease bucket (or, while JetStream cannot
// answer, from a discovery answer; failing both, the client's own list).
// A client given a fixed list of coordinators gets that list.
func (c *Client) leasedCoordinators(ctx context.Context, timeout time.Duration) []string {
	c.mu.Lock()
	leases, discover := c.leases, c.coord.discover
	c.mu.Unlock()
	if !discover {
		addrs, _ := c.Coordinators()
		return addrs
	}
	var live []*messages.ClusterInfo
	var err error
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if leases != nil {
		live, err = leases.List(lctx)
	}
	if leases == nil || err != nil {
		live, err = c.conn.Discover(lctx, timeout)
	}
	if err != nil {
		addrs, _ := c.Coordinators()
		return addrs
	}
	var addrs []string
	for _, ci := range live {
		if a := ci.GetCoordinatorAddress(); !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

// reloadEach sends ReloadProfiles to each of addrs at once and returns
// their answers.
func (c *Client) reloadEach(ctx context.Context, addrs []string, timeout time.Duration) []ReloadResult {
	out := make([]ReloadResult, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].Coordinator = a
			res, err := waitFuture(ctx, c.sys.Root.RequestFuture(c.routerPID(a), &messages.ReloadProfiles{}, timeout))
			r, ok := res.(*messages.ReloadReply)
			switch {
			case err != nil:
				out[i].Err = fmt.Errorf("%w: %s did not answer: %w", ErrNoCoordinator, a, err)
			case !ok:
				out[i].Err = fmt.Errorf("client: %s answered a reload with %T", a, res)
			case !r.GetOk():
				out[i].Err = fmt.Errorf("refused, old profiles kept: %s", r.GetMessage())
			default:
				out[i].Message = r.GetMessage()
			}
		}()
	}
	wg.Wait()
	return out
}

// Reload asks one coordinator to re-read its profiles file (ReloadAll
// asks every one).
func (c *Client) Reload(ctx context.Context) (*messages.ReloadReply, error) {
	res, err := c.request(ctx, &messages.ReloadProfiles{})
	if err != nil {
		return nil, err
	}
	r, ok := res.(*messages.ReloadReply)
	if !ok {
		return nil, fmt.Errorf("client: unexpected reload answer %T", res)
	}
	return r, nil
}

// inbox is an unbounded queue of one request's messages: the endpoint
// actor must never block on a slow consumer.
type inbox struct {
	mu     sync.Mutex
	items  []any
	notify chan struct{}
	closed bool
}

func newInbox() *inbox { return &inbox{notify: make(chan struct{}, 1)} }

func (in *inbox) put(m any) {
	in.mu.Lock()
	in.items = append(in.items, m)
	in.mu.Unlock()
	select {
	case in.notify <- struct{}{}:
	default:
	}
}

func (in *inbox) close() {
	in.mu.Lock()
	in.closed = true
	in.mu.Unlock()
	select {
	case in.notify <- struct{}{}:
	default:
	}
}

// take returns the next message, or nil if none; closed reports a closed client.
func (in *inbox) take() (m any, closed bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.items) > 0 {
		m = in.items[0]
		in.items[0] = nil
		in.items = in.items[1:]
		return m, false
	}
	return nil, in.closed
}
