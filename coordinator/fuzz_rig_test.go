package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/natsserver"
	"github.com/scanplane/scanplane/internal/remoting"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/servertest"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
)

// rigWait bounds every wait for a reply. A valid request that gets no
// answer in this time is a hang, whatever the machine's speed.
const rigWait = 30 * time.Second

// rigAllocLimit: one fuzzed message (at most rigMaxInput bytes) may make
// the actors allocate at most this much, replies included.
const (
	rigAllocLimit = 64 << 20
	rigMaxInput   = 64 << 10
)

type fuzzRig struct {
	tb       testing.TB
	sys      *actor.ActorSystem
	co       *Coordinator
	registry *actor.PID
	router   *actor.PID
	server   *actor.PID
	serverID string
	inbox    *actor.PID
	table    *messages.TableMeta
	truth    []tablets.Entry
	endLife  context.CancelFunc
	seq      atomic.Uint64

	// tablets: the running tablet actors.
	tablets *tabletWatch

	mu      sync.Mutex
	got     []proto.Message
	crashes []string
}

// newFuzzRig builds the rig; tb.Cleanup stops it.
func newFuzzRig(tb testing.TB) *fuzzRig {
	tb.Helper()
	ctx := context.Background()
	dir := tb.TempDir()
	store, err := tablets.NewDirStore(dir + "/blocks")
	if err != nil {
		tb.Fatal(err)
	}
	meta, err := tablets.NewDirMetaStore(dir + "/meta")
	if err != nil {
		tb.Fatal(err)
	}
	r := &fuzzRig{tb: tb, truth: tablets.GenerateRows(300)}
	icfg := tablets.DefaultIngestConfig()
	icfg.Tablets = 2
	icfg.BlockSize = 1 << 10
	if r.table, err = tablets.Ingest(ctx, store, meta, "t", r.truth, icfg); err != nil {
		tb.Fatal(err)
	}
	// NewCoordinator wants a bus connection (the tablet actors publish
	// timeout signals on it): a real one, to an embedded server.
	sc := natsserver.DefaultServerConfig()
	sc.Port, sc.StoreDir = -1, dir+"/nats"
	srv, err := natsserver.StartServer(sc)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(srv.Close)
	bc := bus.DefaultConfig()
	bc.URL = srv.ClientURL()
	conn, err := bus.Connect(ctx, bc)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(conn.Close)

	// The dead-letter throttle keeps a goroutine for its interval after a
	// dead letter; a short one lets the leak check at the end see none.
	r.sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return remoting.DiscardLogger() }),
		actor.WithDeadLetterThrottleInterval(time.Millisecond))
	tb.Cleanup(r.sys.Shutdown)
	cfg := DefaultCoordinatorConfig()
	cfg.System = remoting.SystemConfig{Listen: "127.0.0.1:0"}
	r.tablets = newTabletWatch()
	cfg.Env.Middleware = []actor.ReceiverMiddleware{r.tablets.middleware}
	if r.co, err = NewCoordinator(cfg, conn, meta, selection.DefaultProfiles()); err != nil {
		tb.Fatal(err)
	}
	r.co.sys = &remoting.System{Actors: r.sys, Logger: remoting.DiscardLogger()}
	r.co.started = time.Now()

	// A panic in any actor is a crash: the supervisors record it (and
	// restart the actor, as protoactor's default would).
	strategy := actor.NewOneForOneStrategy(1000, time.Second, func(reason any) actor.Directive {
		r.mu.Lock()
		r.crashes = append(r.crashes, fmt.Sprint(reason))
		r.mu.Unlock()
		return actor.RestartDirective
	})
	root := r.sys.Root
	reg := newRegistryActor(r.co.registryDeps())
	if r.registry, err = root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return reg },
		actor.WithGuardian(strategy), actor.WithSupervisor(strategy)), "scanplane-registry"); err != nil {
		tb.Fatal(err)
	}
	r.co.registry = r.registry
	if r.router, err = root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return newRouterActor(r.co) },
		actor.WithGuardian(strategy), actor.WithSupervisor(strategy)), wire.RouterName); err != nil {
		tb.Fatal(err)
	}
	r.co.router = r.router

	life, end := context.WithCancel(context.Background())
	r.endLife = end
	tb.Cleanup(end)
	scfg := servertest.Default()
	scfg.Workers, scfg.MaxQueue = 4, 64
	// Fuzzed scans whose client is not the inbox get no acknowledgements;
	// they give their worker back after this.
	scfg.AckTimeout = time.Second
	r.serverID = "fuzzhost:1/0"
	ss, _ := servertest.New(scfg, servertest.Deps{ID: r.serverID, Host: "fuzzhost", Fetcher: tablets.StoreFetcher{Store: store}, System: r.sys, Life: life})
	if r.server, err = root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return ss }, actor.WithGuardian(strategy)), servertest.ActorName(0)); err != nil {
		tb.Fatal(err)
	}
	if r.inbox, err = root.SpawnNamed(actor.PropsFromFunc(r.receive, actor.WithGuardian(strategy)), "fuzz-inbox"); err != nil {
		tb.Fatal(err)
	}
	// The scan server joins the view by heartbeat, as over NATS. The rig
	// runs no sweep, so it stays.
	root.Send(r.registry, &messages.Heartbeat{Host: "fuzzhost", Server: r.serverID, Zone: "default", Group: selection.DefaultGroup,
		Pid: wire.FromPID(r.server), Incarnation: "fuzz", Workers: 4, IntervalMs: 1000, SentUnixMs: time.Now().UnixMilli()})
	r.waitFor("the scan server in the load view", func() bool {
		s := r.co.board.View().Server(selection.ServerID(r.serverID))
		return s != nil && s.Alive
	})
	return r
}

// receive is the inbox: it keeps every message and acknowledges every
// batch, like a client.
func (r *fuzzRig) receive(c actor.Context) {
	m, ok := c.Message().(proto.Message)
	if !ok {
		return
	}
	if b, ok := m.(*messages.RowBatch); ok {
		if f := b.GetFinished(); f != nil {
			// The last batch carries the end: kept as the
			// client's ScanFinished, not acknowledged.
			m = f
		} else {
			if p := wire.ToPID(b.GetServerPid()); p != nil {
				c.Send(p, &messages.BatchAck{RequestId: b.GetRequestId(), Attempt: b.GetAttempt(), Seq: b.GetSeq()})
			}
			return // rows are not kept: the inbox lives as long as the fuzz run
		}
	}
	r.mu.Lock()
	r.got = append(r.got, m)
	r.mu.Unlock()
}

// id returns a request id unique in this rig.
func (r *fuzzRig) id(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, r.seq.Add(1))
}

// uniqueID makes a fuzzed request id unique (so that the tablet actor's
// duplicate check does not swallow it) without changing whether it is
// valid: empty stays empty, over 256 bytes stays over.
func (r *fuzzRig) uniqueID(id string) string {
	if id == "" || len(id) > 256 {
		return id
	}
	p := fmt.Sprintf("f%d-", r.seq.Add(1))
	if len(id)+len(p) > 256 {
		return p + id[len(p):]
	}
	return p + id
}

func (r *fuzzRig) waitFor(what string, cond func() bool) {
	r.tb.Helper()
	testutil.Eventually(r.tb, rigWait, what, cond)
}

// find returns the first message the inbox got that matches pred.
func (r *fuzzRig) find(pred func(proto.Message) bool) proto.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.got {
		if pred(m) {
			return m
		}
	}
	return nil
}

// await waits for a message matching pred and returns it.
func (r *fuzzRig) await(what string, pred func(proto.Message) bool) proto.Message {
	r.tb.Helper()
	var m proto.Message
	r.waitFor(what, func() bool { m = r.find(pred); return m != nil })
	return m
}

// forget drops what the inbox holds about request id (the fuzz run is
// long; the inbox must not grow with it).
func (r *fuzzRig) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := r.got[:0]
	for _, m := range r.got {
		if requestID(m) != id {
			kept = append(kept, m)
		}
	}
	clear(r.got[len(kept):])
	r.got = kept
}

func requestID(m proto.Message) string {
	if x, ok := m.(interface{ GetRequestId() string }); ok {
		return x.GetRequestId()
	}
	return ""
}

// scanEnded: the client's view of a scan's end — a ScanError, or a
// ScanFinished that ends it: a success (from the server, or attempt 0
// from the tablet actor for an empty range), or DEADLINE_EXCEEDED.
func scanEnded(id string) func(proto.Message) bool {
	return func(m proto.Message) bool {
		switch x := m.(type) {
		case *messages.ScanError:
			return x.GetRequestId() == id
		case *messages.ScanFinished:
			// A success, or the request's deadline passing while the
			// server streamed (final for the client).
			return x.GetRequestId() == id && !x.GetCancelled() &&
				(x.GetError() == 0 || x.GetError() == messages.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED)
		}
		return false
	}
}

// attemptEnded: a scan server's answer to one attempt, Busy or ScanFinished.
func attemptEnded(id string, attempt uint32) func(proto.Message) bool {
	return func(m proto.Message) bool {
		switch x := m.(type) {
		case *messages.Busy:
			return x.GetRequestId() == id && x.GetAttempt() == attempt
		case *messages.ScanFinished:
			return x.GetRequestId() == id && x.GetAttempt() == attempt
		}
		return false
	}
}

// validScan is a ScanRequest for rows [a, b) of the rig's table, tablet 0
// or 1 as the rows fall; the client is the inbox.
func (r *fuzzRig) validScan(id string, tablet int) *messages.ScanRequest {
	tm := r.table.Tablets[tablet]
	return &messages.ScanRequest{RequestId: id, Client: wire.FromPID(r.inbox), Tablet: tm.Ref,
		Range: &messages.KeyRange{Start: tm.Ref.GetPrevEndRow(), End: tm.Ref.GetEndRow()}, BatchRows: 20, Window: 2}
}

// validStart is a StartScan of the whole of tablet 0 for the rig's server.
func (r *fuzzRig) validStart(id string, attempt uint32) *messages.StartScan {
	tm := r.table.Tablets[0]
	return &messages.StartScan{RequestId: id, Attempt: attempt, Client: wire.FromPID(r.inbox), TabletActor: wire.FromPID(r.inbox), Tablet: tm.Ref,
		Files: tm.Files, Range: &messages.KeyRange{}, BatchRows: 10, BusyTimeoutUs: int64(10 * time.Second / time.Microsecond), Window: 1,
		Server: r.serverID}
}

// tabletPID is the running actor of tablet idx of the rig's table (each
// spawn gets a new actor id).
func (r *fuzzRig) tabletPID(idx int) *actor.PID {
	r.tb.Helper()
	// The router spawns the tablet actor once the table's metadata is
	// loaded (asynchronously, for the first scan): wait until it runs.
	var pid *actor.PID
	r.waitFor(fmt.Sprintf("the actor of tablet %d", idx), func() bool {
		pid = r.tablets.pid(tabletActorName(r.table.Name, r.table.Generation, uint32(idx)))
		return pid != nil
	})
	return pid
}

// healthy fails the test if an actor panicked, and checks the router
// still answers.
func (r *fuzzRig) healthy(input any) {
	r.tb.Helper()
	r.mu.Lock()
	crashes := append([]string(nil), r.crashes...)
	r.mu.Unlock()
	if len(crashes) > 0 {
		r.tb.Fatalf("an actor panicked on %v: %s", input, strings.Join(crashes, "; "))
	}
	res, err := r.sys.Root.RequestFuture(r.router, &messages.StatusRequest{}, rigWait).Result()
	if err != nil {
		r.tb.Fatalf("router does not answer StatusRequest after %v: %v", input, err)
	}
	if _, ok := res.(*messages.StatusReply); !ok {
		r.tb.Fatalf("router answered StatusRequest with %T", res)
	}
}

// allocated runs fn and fails if it (and whatever runs meanwhile, replies
// included) allocated more than rigAllocLimit.
func (r *fuzzRig) allocated(input any, fn func()) {
	r.tb.Helper()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	if d := after.TotalAlloc - before.TotalAlloc; d > rigAllocLimit {
		r.tb.Fatalf("%d MiB allocated handling %v (limit %d MiB)", d>>20, input, rigAllocLimit>>20)
	}
}
