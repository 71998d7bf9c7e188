// Package client is scanplane's Go client library. A Client finds the
// coordinator through NATS, keeps table metadata, and scans key ranges:
// Scan returns an iterator that yields exactly the rows of the range, in key
// order, each once — or an error that says what failed. If the server
// streaming a tablet dies or stalls mid-stream, the client resumes from the
// last key it received on another server.
//
// Concurrency contract: a Client is safe for concurrent use by many
// goroutines; each Rows iterator belongs to one goroutine. New does no IO;
// Start connects; Close releases everything.
package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/messages"
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
	// Coordinator: the coordinator's actor address host:port; "" = find
	// it in the cluster info the coordinator publishes on NATS.
	Coordinator string
	// Listen: the client's own actor endpoint (rows stream to it);
	// default 127.0.0.1:0 (ephemeral).
	Listen string
	// Advertise: host:port servers use to reach this client; default the
	// listen address.
	Advertise string
	// BatchRows asks servers for this many rows per batch; 0 = server default.
	BatchRows uint32
	// Window: unacknowledged batches in flight per scan; default 4.
	Window uint32
	// StallTimeout: a stream that delivered data and then nothing for this
	// long is resumed on another server; default 2s.
	StallTimeout time.Duration
	// IdleTimeout: no answer at all for a tablet request for this long is
	// an error; default 60s.
	IdleTimeout time.Duration
	// MaxResumes per tablet before giving up; default 10.
	MaxResumes int
	// RequestTimeout for status, route and reload calls; default 5s.
	RequestTimeout time.Duration
	// System: an actor system with remote already started to use instead
	// of starting one (Listen and Advertise are then ignored). A process
	// should run one protoactor remote: each remote start rewrites grpc's
	// global logger. The client does not shut a given System down.
	System *actor.ActorSystem
	Logger *slog.Logger
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{NATSURL: "nats://127.0.0.1:4222", Listen: "127.0.0.1:0", Window: 4, StallTimeout: 2 * time.Second,
		IdleTimeout: 60 * time.Second, MaxResumes: 10, RequestTimeout: 5 * time.Second}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.NATSURL == "":
		return errors.New("client: NATSURL is empty")
	case c.Listen == "":
		return errors.New("client: Listen is empty")
	case c.Window < 1 || c.Window > 1024:
		return fmt.Errorf("client: Window %d must be in [1, 1024]", c.Window)
	case c.StallTimeout <= 0:
		return errors.New("client: StallTimeout must be > 0")
	case c.IdleTimeout <= 0:
		return errors.New("client: IdleTimeout must be > 0")
	case c.MaxResumes < 0:
		return errors.New("client: MaxResumes must be >= 0")
	case c.RequestTimeout <= 0:
		return errors.New("client: RequestTimeout must be > 0")
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("client: Listen %q: %v", c.Listen, err)
	}
	if c.Coordinator != "" {
		if _, _, err := net.SplitHostPort(c.Coordinator); err != nil {
			return fmt.Errorf("client: Coordinator %q: %v", c.Coordinator, err)
		}
	}
	return nil
}

// Client scans scanplane tables.
type Client struct {
	cfg    Config
	log    *slog.Logger
	id     string
	seq    atomic.Uint64
	conn   *bus.Conn
	meta   *bus.MetaStore
	sys    *actor.ActorSystem
	ownSys bool
	rem    *remote.Remote
	rx     *actor.PID
	router *actor.PID

	mu      sync.Mutex
	inboxes map[string]*inbox
	tables  map[string]*messages.TableMeta // by name/gen
	current map[string]uint64              // current generation per table, from the KV watch
	watch   context.CancelFunc
	closed  bool
}

// New checks the config; it does no IO.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &Client{cfg: cfg, log: log, id: "c" + hex.EncodeToString(b[:]), inboxes: map[string]*inbox{},
		tables: map[string]*messages.TableMeta{}, current: map[string]uint64{}}, nil
}

// Start connects to NATS, finds the coordinator and starts the client's
// actor endpoint.
func (c *Client) Start(ctx context.Context) error {
	bc := bus.DefaultConfig()
	bc.URL = c.cfg.NATSURL
	bc.Name = "scanplane-client-" + c.id
	conn, err := bus.Connect(ctx, bc)
	if err != nil {
		return fmt.Errorf("client: connect to NATS %s: %w", c.cfg.NATSURL, err)
	}
	c.conn = conn
	if c.meta, err = conn.MetaStore(ctx); err != nil {
		c.Close()
		return fmt.Errorf("client: metadata store: %w", err)
	}
	// Keep every table's current generation up to date, so a scan needs no
	// metadata round trip unless the table changed.
	wctx, cancel := context.WithCancel(context.Background())
	c.watch = cancel
	if err := c.meta.Watch(wctx, c.onTableChange); err != nil {
		c.Close()
		return fmt.Errorf("client: watch metadata: %w", err)
	}
	coord := c.cfg.Coordinator
	if coord == "" {
		ci, err := c.meta.ClusterInfo(ctx)
		if err != nil {
			c.Close()
			return fmt.Errorf("%w: no cluster info on NATS %s (is a coordinator running?): %v", ErrNoCoordinator, c.cfg.NATSURL, err)
		}
		coord = ci.GetCoordinatorAddress()
	}
	if c.cfg.System != nil {
		c.sys = c.cfg.System
	} else if err := c.startSystem(); err != nil {
		c.Close()
		return err
	}
	c.rx, err = c.sys.Root.SpawnNamed(actor.PropsFromFunc(c.receive), "client-"+c.id)
	if err != nil {
		c.Close()
		return err
	}
	c.router = actor.NewPID(coord, "scanplane-router")
	return nil
}

func (c *Client) startSystem() error {
	host, portS, _ := net.SplitHostPort(c.cfg.Listen)
	port, err := strconv.Atoi(portS)
	if err != nil {
		return fmt.Errorf("client: Listen port %q: %v", portS, err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c.sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }), actor.WithDeadLetterThrottleCount(0))
	c.ownSys = true
	var opts []remote.ConfigOption
	if c.cfg.Advertise != "" {
		opts = append(opts, remote.WithAdvertisedHost(c.cfg.Advertise))
	}
	c.rem = remote.NewRemote(c.sys, remote.Configure(host, port, opts...))
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

// Coordinator returns the coordinator address in use.
func (c *Client) Coordinator() string { return c.router.GetAddress() }

// Close stops the client; running scans fail with ErrClosed.
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
	c.mu.Unlock()
	if c.watch != nil {
		c.watch()
	}
	if c.rx != nil {
		c.sys.Root.Stop(c.rx)
	}
	if c.rem != nil {
		done := make(chan struct{})
		go func() { c.rem.Shutdown(true); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
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

func (c *Client) register(id string) (*inbox, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	in := newInbox()
	c.inboxes[id] = in
	return in, nil
}

func (c *Client) unregister(id string) {
	c.mu.Lock()
	delete(c.inboxes, id)
	c.mu.Unlock()
}

func (c *Client) nextRequestID() string {
	return c.id + "-" + strconv.FormatUint(c.seq.Add(1), 10)
}

func (c *Client) send(pid *actor.PID, msg any) { c.sys.Root.Send(pid, msg) }

func (c *Client) self() *messages.Pid { return &messages.Pid{Address: c.rx.Address, Id: c.rx.Id} }

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
// has not reported is looked up directly.
func (c *Client) Table(ctx context.Context, name string) (*messages.TableMeta, error) {
	if c.meta == nil {
		return nil, ErrClosed
	}
	c.mu.Lock()
	gen := c.current[name]
	c.mu.Unlock()
	if gen == 0 {
		var err error
		if gen, err = c.meta.Current(ctx, name); err != nil {
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
	t, err := c.meta.Get(ctx, name, gen)
	if err != nil {
		return nil, fmt.Errorf("client: table %q generation %d: %w", name, gen, err)
	}
	c.mu.Lock()
	c.tables[key] = t
	c.mu.Unlock()
	return t, nil
}

// Tables lists the tables.
func (c *Client) Tables(ctx context.Context) ([]string, error) {
	if c.meta == nil {
		return nil, ErrClosed
	}
	return c.meta.Tables(ctx)
}

func (c *Client) request(msg any) (any, error) {
	if c.sys == nil {
		return nil, ErrClosed
	}
	res, err := c.sys.Root.RequestFuture(c.router, msg, c.cfg.RequestTimeout).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: %s did not answer within %v: %v", ErrNoCoordinator, c.router.Address, c.cfg.RequestTimeout, err)
	}
	return res, nil
}

// Status asks the coordinator for the cluster status.
func (c *Client) Status(ctx context.Context) (*messages.StatusReply, error) {
	res, err := c.request(&messages.StatusRequest{})
	if err != nil {
		return nil, err
	}
	r, ok := res.(*messages.StatusReply)
	if !ok {
		return nil, fmt.Errorf("client: unexpected status answer %T", res)
	}
	return r, nil
}

// Route asks where a row's tablet would be scanned.
func (c *Client) Route(ctx context.Context, req *messages.RouteRequest) (*messages.RouteReply, error) {
	res, err := c.request(req)
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

// Reload asks the coordinator to re-read its profiles file.
func (c *Client) Reload(ctx context.Context) (*messages.ReloadReply, error) {
	res, err := c.request(&messages.ReloadProfiles{})
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
