package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/clientsys"
	"github.com/scanplane/scanplane/internal/natsserver"
	"github.com/scanplane/scanplane/internal/remoting"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
)

// Coordinator actor addresses of the tests below.
const (
	coordA = "127.0.0.1:8090"
	coordB = "127.0.0.1:8091"
)

// drain returns the coordinator events queued in an inbox.
func drain(in *inbox) []coordEvent {
	var out []coordEvent
	for {
		m, _ := in.take()
		if m == nil {
			return out
		}
		if ev, ok := m.(coordEvent); ok {
			out = append(out, ev)
		}
	}
}

// TestCoordinatorDirectory: what the client learns about coordinators —
// endpoint events from the actor system, the leases on NATS — reaches
// every running stream as lost/up events, once per change.
func TestCoordinatorDirectory(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Coordinators = []string{coordA, coordB}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	in, coords, lost, err := c.openStream()
	if err != nil || len(coords) != 2 || len(lost) != 0 {
		t.Fatalf("openStream: %v %v %v", coords, lost, err)
	}
	c.onEndpointEvent(&remote.EndpointConnectedEvent{Address: coordA})
	drain(in)
	c.onEndpointEvent(&remote.EndpointTerminatedEvent{Address: coordA})
	c.onEndpointEvent(&remote.EndpointTerminatedEvent{Address: coordA}) // reported twice: one event
	c.onEndpointEvent(&remote.EndpointTerminatedEvent{Address: "127.0.0.1:9999"})
	evs := drain(in)
	if len(evs) != 1 || !evs[0].lost || evs[0].addr != coordA || evs[0].why != "endpoint terminated" {
		t.Fatalf("events %+v, want one loss of %s", evs, coordA)
	}
	if got := c.Coordinator(); got != coordB {
		t.Fatalf("Coordinator() = %s, want the next one up", got)
	}
	// A stream opened now starts knowing the loss.
	in2, _, lost2, _ := c.openStream()
	if lost2[coordA] != "endpoint terminated" {
		t.Fatalf("snapshot %v", lost2)
	}
	c.onEndpointEvent(&remote.EndpointConnectedEvent{Address: coordA})
	for _, in := range []*inbox{in, in2} {
		if evs := drain(in); len(evs) != 1 || evs[0].lost || evs[0].addr != coordA {
			t.Fatalf("events %+v, want %s up", evs, coordA)
		}
	}
	// Never connected, then terminated: unreachable.
	c.onEndpointEvent(&remote.EndpointTerminatedEvent{Address: coordB})
	if evs := drain(in); len(evs) != 1 || !strings.Contains(evs[0].why, "unreachable") {
		t.Fatalf("events %+v", evs)
	}

	// Leases: the first sight of a known coordinator is no change (it is
	// up already); renewals are none either; a new incarnation is a
	// restart: lost, then up; a lease gone is a loss, and its return
	// brings the coordinator up again. Unknown addresses are ignored with
	// a configured list.
	lease := func(addr, inc string, started int64) *messages.ClusterInfo {
		return &messages.ClusterInfo{MemberId: inc, CoordinatorAddress: addr, Incarnation: inc, StartedUnixMs: started}
	}
	c.onLeases([]*messages.ClusterInfo{lease(coordA, "i1", 1), lease("127.0.0.1:9998", "x", 1)})
	drain(in)
	c.onLeases([]*messages.ClusterInfo{lease(coordA, "i1", 1)})
	if evs := drain(in); len(evs) != 0 {
		t.Fatalf("same incarnation: %+v, want no change", evs)
	}
	c.onLeases([]*messages.ClusterInfo{lease(coordA, "i2", 2)})
	evs = drain(in)
	if len(evs) != 2 || !evs[0].lost || evs[0].why != "restarted (new incarnation)" || evs[1].lost {
		t.Fatalf("restart: %+v, want lost then up", evs)
	}
	c.onLeases(nil)
	if evs := drain(in); len(evs) != 1 || !evs[0].lost || !strings.Contains(evs[0].why, "lease is gone") {
		t.Fatalf("lease gone: %+v", evs)
	}
	if addrs, _ := c.Coordinators(); len(addrs) != 2 {
		t.Fatalf("a configured coordinator left the list: %v", addrs)
	}
	c.onLeases([]*messages.ClusterInfo{lease(coordA, "i2", 2)})
	if evs := drain(in); len(evs) != 1 || evs[0].lost || evs[0].addr != coordA {
		t.Fatalf("lease back: %+v, want %s up", evs, coordA)
	}
	c.closeStream(in, nil)
	c.closeStream(in2, nil)
	c.onEndpointEvent(&remote.EndpointConnectedEvent{Address: coordA})
	if evs := drain(in); len(evs) != 0 {
		t.Fatalf("a closed stream got %+v", evs)
	}
}

// TestDiscoveredCoordinators: without a configured list, the coordinators
// are the leased ones, in an order of preference that puts the one on the
// client's NATS node first and is otherwise the client's own (rendezvous);
// one whose lease is gone is lost and leaves the list.
func TestDiscoveredCoordinators(t *testing.T) {
	c, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	in, _, _, _ := c.openStream()
	a := &messages.ClusterInfo{MemberId: "a", CoordinatorAddress: coordA, RouterId: "r", Incarnation: "i1"}
	b := &messages.ClusterInfo{MemberId: "b", CoordinatorAddress: coordB, Incarnation: "i9"}
	c.onLeases([]*messages.ClusterInfo{a, b})
	addrs, _ := c.Coordinators()
	if want := preferOrder(map[string]*messages.ClusterInfo{coordA: a, coordB: b}, "", c.id); !slices.Equal(addrs, want) || len(addrs) != 2 {
		t.Fatalf("coordinators %v, want %v", addrs, want)
	}
	if evs := drain(in); len(evs) != 2 || evs[0].lost || evs[1].lost {
		t.Fatalf("events %+v, want both up", evs)
	}
	if p := c.routerPID(coordA); p.Id != "r" {
		t.Fatalf("router %v", p)
	}
	if p := c.routerPID(coordB); p.Id != wire.RouterName {
		t.Fatalf("router %v", p)
	}
	c.onLeases([]*messages.ClusterInfo{b})
	if evs := drain(in); len(evs) != 1 || !evs[0].lost || evs[0].addr != coordA {
		t.Fatalf("events %+v, want %s lost", evs, coordA)
	}
	if addrs, lost := c.Coordinators(); !slices.Equal(addrs, []string{coordB}) || lost[0] != "" {
		t.Fatalf("after A's lease went: %v %v", addrs, lost)
	}
	// The NATS node the client is on wins over rendezvous.
	nodeA := &messages.ClusterInfo{MemberId: "a", CoordinatorAddress: coordA, NatsNode: "n1"}
	nodeB := &messages.ClusterInfo{MemberId: "b", CoordinatorAddress: coordB, NatsNode: "n2"}
	m := map[string]*messages.ClusterInfo{coordA: nodeA, coordB: nodeB}
	for _, node := range []string{"n1", "n2"} {
		if got := preferOrder(m, node, c.id); got[0] != map[string]string{"n1": coordA, "n2": coordB}[node] {
			t.Fatalf("on node %s: order %v", node, got)
		}
	}
	// Rendezvous spreads clients: of 1000 client ids, each of 4
	// coordinators is first for 250 ± 80.
	four := map[string]*messages.ClusterInfo{}
	for i := range 4 {
		addr := fmt.Sprintf("127.0.0.1:%d", 8090+2*i)
		four[addr] = &messages.ClusterInfo{CoordinatorAddress: addr}
	}
	first := map[string]int{}
	for i := range 1000 {
		first[preferOrder(four, "", fmt.Sprintf("c%012x", i*7919))[0]]++
	}
	for addr, n := range first {
		if n < 170 || n > 330 {
			t.Errorf("%s is first for %d of 1000 clients: %v", addr, n, first)
		}
	}
	// With a configured list, an unknown address in a lease is not added.
	cfg := DefaultConfig()
	cfg.Coordinator = coordA
	c, _ = New(cfg)
	c.onLeases([]*messages.ClusterInfo{b})
	if addrs, _ := c.Coordinators(); len(addrs) != 1 {
		t.Fatalf("coordinators %v", addrs)
	}
}

var (
	sysOnce sync.Once
	testSys *actor.ActorSystem
	testRem *remote.Remote
	sysErr  error
)

// sharedSystem is this test binary's one actor system with remote (one
// remote per process: each start rewrites grpc's global logger).
func sharedSystem(t *testing.T) *actor.ActorSystem {
	t.Helper()
	sysOnce.Do(func() {
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		testSys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
		rc := remote.Configure("127.0.0.1", 0)
		rc.MaxRetryCount = 1 // as a client's own system: no pile of retrying connections to dead addresses
		testRem = remote.NewRemote(testSys, rc)
		sysErr = remoting.StartRemote(testRem)
	})
	if sysErr != nil {
		t.Fatal(sysErr)
	}
	return testSys
}

func startNATS(t *testing.T) string {
	t.Helper()
	sc := natsserver.DefaultServerConfig()
	sc.Port, sc.StoreDir = -1, t.TempDir()
	srv, err := natsserver.StartServer(sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv.ClientURL()
}

// TestCallsHonourContext: Status, Route and Reload end
// when their context does, not after RequestTimeout, and say which
// coordinator did not answer. Start honours its context too. Before, they
// ignored ctx and waited out RequestTimeout (here a minute). Elapsed times
// are upper bounds with generous slack.
func TestCallsHonourContext(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NATSURL = startNATS(t)
	cfg.Coordinators = []string{"127.0.0.1:1"} // nothing listens there
	cfg.RequestTimeout = time.Minute
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Start(clientsys.WithSystem(ctx, sharedSystem(t))); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	calls := map[string]func(context.Context) error{
		"Status": func(ctx context.Context) error { _, err := c.Status(ctx); return err },
		"Route": func(ctx context.Context) error {
			_, err := c.Route(ctx, RouteQuery{Table: "t", Row: []byte("a")})
			return err
		},
		"Reload": func(ctx context.Context) error { _, err := c.Reload(ctx); return err },
	}
	for name, call := range calls {
		for _, how := range []string{"deadline", "cancel"} {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			if how == "cancel" {
				ctx, cancel = context.WithCancel(context.Background())
				time.AfterFunc(300*time.Millisecond, cancel)
			}
			start := time.Now()
			err := call(ctx)
			took := time.Since(start)
			ended := ctxErr(ctx)
			cancel()
			// Before ctx ends the call may fail only because the request
			// could not be delivered (the actor system gave up on the
			// address); after, it says ctx ended.
			early := ended == nil && strings.Contains(fmt.Sprint(err), "could not be delivered")
			if !errors.Is(err, ErrNoCoordinator) || !early && (ended == nil || !errors.Is(err, ended)) || !strings.Contains(err.Error(), "127.0.0.1:1") {
				t.Errorf("%s (%s): %v; want ErrNoCoordinator and the context's error, naming 127.0.0.1:1", name, how, err)
			}
			if took > 20*time.Second {
				t.Errorf("%s (%s) took %v for a 300ms context", name, how, took)
			}
		}
	}

	// Start with a context that has ended: an error, at once, no leftovers.
	c2, _ := New(cfg)
	done, stop := context.WithCancel(context.Background())
	stop()
	if err := c2.Start(done); err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Start with a cancelled context: %v", err)
	}
}

// TestScanFailsWithoutCoordinator: a scan whose only coordinator is known
// lost fails after CoordinatorWait with the one-line error, and Close ends
// a scan in progress with ErrClosed.
func TestScanFailsWithoutCoordinator(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NATSURL = startNATS(t)
	// Not 127.0.0.1:1: the shared actor system may still report that
	// address's endpoint from the test before.
	cfg.Coordinators = []string{"127.0.0.1:2"}
	cfg.CoordinatorWait = 200 * time.Millisecond
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Start(clientsys.WithSystem(ctx, sharedSystem(t))); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A one-tablet table (metadata only: no server will read it).
	if err := c.meta.Publish(ctx, &messages.TableMeta{Name: "t", Generation: 1, Tablets: []*messages.TabletMeta{{Ref: &messages.TabletRef{Table: "t", Generation: 1}}}}, 0); err != nil {
		t.Fatal(err)
	}
	c.coordLost("127.0.0.1:2", "endpoint terminated")
	rows := c.Scan(ctx, "t", tablets.Range{}, ScanOptions{})
	if rows.Next() {
		t.Fatal("a row without a coordinator")
	}
	want := "client: no coordinator: coordinator 127.0.0.1:2 was lost (endpoint terminated) and no other answered within 200ms (it was the only coordinator this client knew)"
	if err := rows.Err(); err == nil || err.Error() != want {
		t.Fatalf("err %v, want %q", err, want)
	}
	if st := rows.Stats(); st.Requests != 0 {
		t.Fatalf("stats %+v: nothing should have been sent to a lost coordinator", st)
	}
}

// TestRediscoverWhenEveryKnownCoordinatorIsLost: the lease watch shows
// one coordinator (A) while the coordinators answer discovery with two
// (A and B). Once A is lost, the client asks over core NATS and B joins
// its list, up, and running streams hear of it. Without the request the
// client knew no coordinator until the watch caught up.
func TestRediscoverWhenEveryKnownCoordinatorIsLost(t *testing.T) {
	url := startNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bcfg := bus.DefaultConfig()
	bcfg.URL = url
	coordConn, err := bus.Connect(ctx, bcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer coordConn.Close()
	leases, err := coordConn.Leases(ctx, bus.DefaultLeaseConfig())
	if err != nil {
		t.Fatal(err)
	}
	a := &messages.ClusterInfo{MemberId: "a", CoordinatorAddress: "127.0.0.1:3", RouterId: "r", Incarnation: "ia",
		HttpAddress: "127.0.0.1:5", Version: "v9", StartedUnixMs: 1_700_000_000_000, NatsNode: "n1", NatsUrl: "nats://127.0.0.1:6", TabletActors: 7}
	b := &messages.ClusterInfo{MemberId: "b", CoordinatorAddress: "127.0.0.1:4", RouterId: "r", Incarnation: "ib"}
	lease, err := leases.Announce(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Close()
	cfg := DefaultConfig()
	cfg.NATSURL = url
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(clientsys.WithSystem(ctx, sharedSystem(t))); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if addrs, _ := c.Coordinators(); !slices.Equal(addrs, []string{"127.0.0.1:3"}) {
		t.Fatalf("coordinators from the lease watch: %v, want A only", addrs)
	}
	// CoordinatorLeases describes A's lease as A announced it.
	ls, err := c.CoordinatorLeases(ctx)
	if err != nil || len(ls) != 1 {
		t.Fatalf("leases %+v, %v; want A's", ls, err)
	}
	got := ls[0]
	got.Renewed = time.Time{}
	want := CoordinatorLease{MemberID: "a", Address: "127.0.0.1:3", HTTPAddress: "127.0.0.1:5", Version: "v9", Incarnation: "ia",
		Started: time.UnixMilli(1_700_000_000_000), NATSNode: "n1", NATSURL: "nats://127.0.0.1:6", TabletActors: 7}
	if got != want {
		t.Fatalf("lease %+v, want %+v", got, want)
	}
	// The coordinators answer discovery from now on (before, the client's
	// start could have learnt B from them).
	stop, err := coordConn.ServeDiscovery(func() []*messages.ClusterInfo { return []*messages.ClusterInfo{a, b} })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	in, _, _, _ := c.openStream()
	c.coordLost("127.0.0.1:3", "endpoint terminated")
	var evs []coordEvent
	if !testutil.Poll(10*time.Second, func() bool {
		evs = append(evs, drain(in)...)
		return slices.ContainsFunc(evs, func(e coordEvent) bool { return e.addr == "127.0.0.1:4" && !e.lost })
	}) {
		addrs, lost := c.Coordinators()
		t.Fatalf("B never came up after A was lost: events %+v, coordinators %v lost %v", evs, addrs, lost)
	}
	addrs, lost := c.Coordinators()
	if i := slices.Index(addrs, "127.0.0.1:4"); i < 0 || lost[i] != "" {
		t.Fatalf("coordinators %v, lost %q: want B known and up", addrs, lost)
	}
}
