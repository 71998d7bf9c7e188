package client

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/eventstream"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/clientsys"
	"github.com/scanplane/scanplane/internal/remoting"
	"github.com/scanplane/scanplane/internal/tabletstream"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// Client scans scanplane tables.
type Client struct {
	cfg    Config
	log    *slog.Logger
	id     string
	conn   *bus.Conn
	meta   *bus.MetaStore
	leases *bus.LeaseStore
	sys    *actor.ActorSystem
	shared *processRemote // the process's remote this client holds a share of; nil with a system of the process's own (internal/clientsys)
	rx     *actor.PID
	evSub  *eventstream.Subscription
	bgCtx  context.Context // of the watches and probes; ended by watch (Close)
	// gate: every send through the actor remote and every
	// EndpointTerminatedEvent the client publishes passes it; Close shuts
	// it first, so nothing is sent once the client closes and none meets
	// the remote's stop (remoting.Gate).
	gate remoting.Gate

	mu      sync.Mutex
	inboxes map[string]*inbox              // by request id
	streams map[*inbox]struct{}            // inboxes of running tablet streams
	tables  map[string]*messages.TableMeta // by name/gen: records, without files kept in manifests
	files   *tablets.TabletFiles           // tablets' files loaded from manifests (tabletMeta); nil until first used
	current map[string]uint64              // current generation per table, from the KV watch
	watch   context.CancelFunc
	bg      sync.WaitGroup // the metadata and lease watches and the probes, stopped by watch
	closed  bool
	coord   coordDirectory
	// tabletActors: where a tablet's requests go without the router.
	tabletActors tabletActorDirectory
	// bulk: the slots its parallel scans handle messages in.
	bulk *bulkSlots
	// leaves: the leaf hashes its scans proved (Config.ProvenLeaves).
	leaves *tabletstream.ProvenLeaves
}

// New checks the config; it does no IO.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.checkRemoteTLS(); err != nil {
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
			instance: map[string]string{}, routers: map[string]string{}, leased: map[string]bool{}},
		bulk: newBulkSlots(bulkGoroutines()), leaves: tabletstream.NewProvenLeaves(cmp.Or(cfg.ProvenLeaves, DefaultProvenLeaves))}, nil
}

// Dial is New and Start in one step: a started Client, or the reason it
// could not start (nothing is left running then).
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Start connects to NATS, finds the coordinator and starts the client's
// actor endpoint. It returns when ctx ends, with ctx's error; on an error
// the client is closed.
//
// One Client serves any number of concurrent scans; a process needs one.
// The clients of a process with the same Listen, Advertise and TLS share
// one actor system and remote, started by the first and stopped with the
// last: each actor remote a process starts (protoactor's Remote.Start)
// replaces gRPC's process-wide logger without synchronisation, a data
// race with the connections of a remote already in use.
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
	// The context of what runs in the background for the client's life
	// (watches, probes); Close ends it.
	c.bgCtx, c.watch = context.WithCancel(context.Background())
	bc := bus.DefaultConfig()
	bc.URL = c.cfg.NATSURL
	bc.Name = "scanplane-client-" + c.id
	bc.TLS = c.cfg.TLS
	bc.ReadOnly = true
	conn, err := bus.Connect(ctx, bc)
	if err != nil {
		return fmt.Errorf("client: connect to NATS %s: %w", c.cfg.NATSURL, err)
	}
	c.conn = conn
	if c.meta, err = conn.MetaStore(ctx); err != nil {
		return fmt.Errorf("client: metadata store: %w", err)
	}
	if sys := clientsys.System(ctx); sys != nil {
		c.sys = sys
	} else if err := c.startSystem(ctx); err != nil {
		return err
	}
	c.evSub = c.sys.EventStream.Subscribe(c.onEndpointEvent)
	c.rx, err = c.sys.Root.SpawnNamed(c.endpointProps(), "client-"+c.id)
	if err != nil {
		return fmt.Errorf("client: start endpoint actor: %w", err)
	}
	// Keep every table's current generation up to date (a table the
	// watch has not reported is read directly), and follow the
	// coordinators' leases: new ones, departed or dead ones, restarted
	// ones (a new incarnation). Both run in the background for the
	// client's life: a JetStream electing a leader after a NATS node was
	// lost answers nothing for seconds, and a scan needs neither at once.
	wctx := c.bgCtx
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

func (c *Client) startSystem(ctx context.Context) error {
	pr, err := acquireRemote(ctx, c.cfg, c.log)
	if err != nil {
		return err
	}
	c.shared, c.sys = pr, pr.sys
	return nil
}

// closeWait bounds how long Close waits for the actor remote to stop. A
// remote left stopping in the background keeps goroutines that read
// gRPC's global logger, which the next remote started in the same process
// writes (protoactor's Remote.Start): that start waits for the stop to
// end (acquireRemote). 3 s leaves room for a slow stop; a dead peer costs
// no more.
const closeWait = 3 * time.Second

// Close stops the client; running scans fail with ErrClosed, and so do
// calls that would send after Close began. It returns within about three
// seconds whatever is dead: it does not wait for a graceful remote
// shutdown (peers see the connection drop).
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
	// Sends under way end first, and none starts after: the remote's
	// stop below must not meet one (remoting.Gate).
	c.gate.Shut()
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
	if c.shared != nil {
		c.shared.release(c.cfg, closeWait, c.log)
	}
	if c.conn != nil {
		c.conn.Close()
	}
	return nil
}
