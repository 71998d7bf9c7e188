package coordinator_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/clientsys"
	"github.com/scanplane/scanplane/internal/freeport"
	"github.com/scanplane/scanplane/internal/natsserver"
	"github.com/scanplane/scanplane/internal/remoting"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/internal/testutil/servertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
)

var (
	sysOnce sync.Once
	sys     *remoting.System
	sysErr  error
)

// binaries builds the coordinator and scanserver once per test binary.
func binaries(t *testing.T) string {
	t.Helper()
	return clustertest.Binaries(t, context.Background())
}

// actorSystem is this test process's only actor system.
func actorSystem(t *testing.T) *remoting.System {
	t.Helper()
	sysOnce.Do(func() { sys, sysErr = remoting.StartSystem(remoting.SystemConfig{Listen: "127.0.0.1:0"}) })
	if sysErr != nil {
		t.Fatal(sysErr)
	}
	return sys
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, timeout, what, cond)
}

type testCluster struct {
	t       *testing.T
	dataDir string
	srv     *natsserver.EmbeddedServer
	conn    *bus.Conn
	cl      *localcluster.Cluster
	truth   []tablets.Entry
	table   *messages.TableMeta

	mu sync.Mutex
	hb map[string]*messages.Heartbeat // latest heartbeat per server
}

type clusterOpts struct {
	hosts, servers int
	rows, tablets  int
	profiles       string
	hostArgs       func(i int) []string
	// coordArgs are extra coordinator flags (e.g. --heartbeat-misses).
	coordArgs []string
}

func startCluster(t *testing.T, o clusterOpts) *testCluster {
	t.Helper()
	ctx := context.Background()
	bins := binaries(t)
	sc := natsserver.DefaultServerConfig()
	sc.Port, sc.StoreDir = -1, t.TempDir()
	srv, err := natsserver.StartServer(sc)
	if err != nil {
		t.Fatal(err)
	}
	tc := &testCluster{t: t, srv: srv, hb: map[string]*messages.Heartbeat{}}
	t.Cleanup(tc.close)
	bc := bus.DefaultConfig()
	bc.URL = srv.ClientURL()
	if tc.conn, err = bus.Connect(ctx, bc); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.conn.SubscribeHeartbeats(func(h *messages.Heartbeat) {
		tc.mu.Lock()
		tc.hb[h.Server] = h
		tc.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	tc.truth = tablets.GenerateRows(o.rows)
	icfg := tablets.DefaultIngestConfig()
	icfg.Tablets = o.tablets
	icfg.BlockSize = 4 << 10
	tc.table = clustertest.IngestOn(t, ctx, tc.conn, "t", tc.truth, icfg)
	dir := t.TempDir()
	tc.dataDir = dir
	cfg := localcluster.Config{Hosts: o.hosts, ServersPerHost: o.servers, DataDir: dir, BinDir: bins, NATSURL: srv.ClientURL(),
		Heartbeat: 100 * time.Millisecond, HostArgs: o.hostArgs, CoordinatorArgs: o.coordArgs, ReadyTimeout: 30 * time.Second}
	if o.profiles != "" {
		cfg.Profiles = filepath.Join(dir, "profiles.json")
		if err := os.WriteFile(cfg.Profiles, []byte(o.profiles), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now()
	tc.cl = clustertest.StartAlways(t, ctx, cfg)
	t.Logf("cluster started in %v", time.Since(t0))
	return tc
}

// close closes what startCluster opened before the cluster; the cluster,
// started later, is closed first (clustertest.StartAlways, t.Cleanup).
func (tc *testCluster) close() {
	if tc.conn != nil {
		tc.conn.Close()
	}
	tc.srv.Close()
}

func (tc *testCluster) heartbeat(server string) *messages.Heartbeat {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.hb[server]
}

func (tc *testCluster) status() *messages.StatusReply {
	tc.t.Helper()
	st, err := tc.cl.Status(context.Background())
	if err != nil {
		tc.t.Fatal(err)
	}
	return st
}

func (tc *testCluster) client(mod func(*client.Config)) *client.Client {
	tc.t.Helper()
	ctx := clientsys.WithSystem(context.Background(), actorSystem(tc.t).Actors)
	return clustertest.Client(tc.t, ctx, tc.srv.ClientURL(), mod)
}

// check scans [truth[a], truth[b]) and compares with the ground truth.
func (tc *testCluster) check(c *client.Client, a, b int, opts client.ScanOptions) {
	tc.t.Helper()
	if err := checkScan(c, tc.truth, a, b, opts); err != nil {
		tc.t.Fatal(err)
	}
}

func checkScan(c *client.Client, truth []tablets.Entry, a, b int, opts client.ScanOptions) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wrong, failed := clustertest.CheckScan(ctx, c, "t", truth, a, b, opts)
	if wrong != nil {
		return wrong
	}
	return failed
}

func TestScanOverRealProcesses(t *testing.T) {
	tc := startCluster(t, clusterOpts{hosts: 3, servers: 2, rows: 20000, tablets: 5})
	c := tc.client(nil)
	tc.check(c, 0, len(tc.truth), client.ScanOptions{})
	for _, r := range [][2]int{{0, 1}, {17, 4000}, {3999, 4001}, {19999, 20000}, {5000, 5000}, {100, 12345}} {
		tc.check(c, r[0], r[1], client.ScanOptions{})
	}
	ctx := context.Background()
	rows := c.Scan(ctx, "t", tablets.Range{}, client.ScanOptions{Limit: 7})
	n := 0
	for rows.Next() {
		n++
	}
	if rows.Err() != nil || n != 7 {
		t.Fatalf("limit: %d rows, err %v", n, rows.Err())
	}
	rows = c.Scan(ctx, "nope", tablets.Range{}, client.ScanOptions{})
	if rows.Next() || rows.Err() == nil || !strings.Contains(rows.Err().Error(), "nope") {
		t.Fatalf("unknown table should be a clear error, got %v", rows.Err())
	}
	rows = c.Scan(ctx, "t", tablets.Range{Start: []byte("b"), End: []byte("a")}, client.ScanOptions{})
	if rows.Next() || rows.Err() == nil {
		t.Fatal("an inverted range should be an error")
	}
}

// probe stands in for a tablet actor and a client, so a scan server can be
// driven message by message. It acknowledges every batch except those of
// scans whose id starts with "hold" (they stall on flow control).
type probe struct {
	mu   sync.Mutex
	msgs []any
	pid  *actor.PID
	root *actor.RootContext
}

var probeSeq int

func newProbe(t *testing.T) *probe {
	s := actorSystem(t)
	p := &probe{root: s.Actors.Root}
	probeSeq++
	var err error
	p.pid, err = s.Actors.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *messages.RowBatch:
			if !strings.HasPrefix(m.RequestId, "hold") {
				c.Send(wire.ToPID(m.ServerPid), &messages.BatchAck{RequestId: m.RequestId, Attempt: m.Attempt, Seq: m.Seq})
			}
			p.add(m)
		case *messages.ScanStarted, *messages.Busy, *messages.ScanFinished:
			p.add(m)
		}
	}), fmt.Sprintf("probe-%d", probeSeq))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Actors.Root.Stop(p.pid) })
	return p
}

func (p *probe) add(m any) {
	p.mu.Lock()
	p.msgs = append(p.msgs, m)
	p.mu.Unlock()
}

func (p *probe) find(pred func(any) bool) any {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.msgs {
		if pred(m) {
			return m
		}
	}
	return nil
}

func (p *probe) waitFor(t *testing.T, what string, pred func(any) bool) any {
	t.Helper()
	var got any
	waitFor(t, what, 30*time.Second, func() bool { got = p.find(pred); return got != nil })
	return got
}

func (p *probe) startScan(tc *testCluster, server *actor.PID, id string, busyTimeout time.Duration, window uint32) {
	tm := tc.table.Tablets[0]
	self := wire.FromPID(p.pid)
	p.root.Send(server, &messages.StartScan{RequestId: id, Attempt: 1, Client: self, TabletActor: self, Tablet: tm.Ref,
		Files: tm.Files, Range: &messages.KeyRange{}, BatchRows: 10, BusyTimeoutUs: busyTimeout.Microseconds(), Window: window})
}

func started(id string) func(any) bool {
	return func(m any) bool { s, ok := m.(*messages.ScanStarted); return ok && s.RequestId == id }
}

func busyFor(id string) func(any) bool {
	return func(m any) bool { s, ok := m.(*messages.Busy); return ok && s.RequestId == id }
}

func finished(id string) func(any) bool {
	return func(m any) bool { s, ok := m.(*messages.ScanFinished); return ok && s.RequestId == id }
}

func batchOf(id string) func(any) bool {
	return func(m any) bool { s, ok := m.(*messages.RowBatch); return ok && s.RequestId == id }
}

func serverPID(tc *testCluster, host, idx int) *actor.PID {
	return actor.NewPID(tc.cl.Host(host).Ready.Actor, servertest.ActorName(idx))
}

func TestBusyWithinBusyTimeoutNeverRuns(t *testing.T) {
	tc := startCluster(t, clusterOpts{hosts: 1, servers: 1, rows: 2000, tablets: 1,
		hostArgs: func(int) []string { return []string{"--workers", "1", "--queue", "4"} }})
	p := newProbe(t)
	server := serverPID(tc, 0, 0)
	// "hold" takes the only worker and stalls on flow control.
	p.startScan(tc, server, "hold", time.Second, 1)
	p.waitFor(t, "hold started", started("hold"))
	sent := time.Now()
	p.startScan(tc, server, "late", 100*time.Millisecond, 1)
	b := p.waitFor(t, "busy for late", busyFor("late")).(*messages.Busy)
	if waited := time.Since(sent); waited < 100*time.Millisecond || b.WaitedUs < 100000 {
		t.Fatalf("busy after %v (server says %dµs), before the busy timeout of 100ms", waited, b.WaitedUs)
	}
	// Free the worker; a scan queued after "late" runs, "late" never does.
	p.root.Send(server, &messages.Cancel{RequestId: "hold", Attempt: 1})
	p.startScan(tc, server, "after", time.Minute, 16)
	if f := p.waitFor(t, "after finished", finished("after")).(*messages.ScanFinished); f.Error != 0 || f.Rows != 2000 {
		t.Fatalf("after: %+v", f)
	}
	if p.find(started("late")) != nil || p.find(batchOf("late")) != nil {
		t.Fatal("a scan answered busy was run")
	}
	if hold := p.waitFor(t, "hold finished", finished("hold")).(*messages.ScanFinished); !hold.Cancelled {
		t.Fatalf("hold should be cancelled: %+v", hold)
	}
	id := tc.cl.Host(0).Ready.Servers[0]
	waitFor(t, "busy counted in heartbeats", 10*time.Second, func() bool {
		h := tc.heartbeat(id)
		return h != nil && h.BusyTotal == 1
	})
}

func TestBusyAtOnceWhenQueueFull(t *testing.T) {
	tc := startCluster(t, clusterOpts{hosts: 1, servers: 1, rows: 2000, tablets: 1,
		hostArgs: func(int) []string { return []string{"--workers", "1", "--queue", "0"} }})
	p := newProbe(t)
	server := serverPID(tc, 0, 0)
	p.startScan(tc, server, "hold", time.Second, 1)
	p.waitFor(t, "hold started", started("hold"))
	// The busy timeout is an hour, far beyond waitFor's deadline: a Busy
	// that arrives at all was answered without waiting for it (no
	// wall-clock bound on how fast "at once" is).
	p.startScan(tc, server, "full", time.Hour, 1)
	b := p.waitFor(t, "busy", busyFor("full")).(*messages.Busy)
	if b.WaitedUs >= time.Hour.Microseconds() {
		t.Fatalf("a full queue must answer at once, not after the busy timeout: waited %dµs", b.WaitedUs)
	}
	if p.find(started("full")) != nil {
		t.Fatal("busy scan started")
	}
}

// TestAttemptPlanEscalation: every server of the tablet's home host is
// busy, so accumulo-host escalates from plan 1 (one host) to plan 2 (all
// hosts) and the scan succeeds on another host.
func TestAttemptPlanEscalation(t *testing.T) {
	profiles := `[{"isDefault":true,"policy":"accumulo-host","attemptPlans":[
	  {"servers":"1","busyTimeout":"50ms","salt":"one"},{"servers":"100%","busyTimeout":"50ms"}]}]`
	tc := startCluster(t, clusterOpts{hosts: 3, servers: 2, rows: 2000, tablets: 1, profiles: profiles,
		hostArgs: func(int) []string { return []string{"--workers", "1", "--queue", "0"} }})
	c := tc.client(nil)
	ctx := context.Background()
	route, err := c.Route(ctx, client.RouteQuery{Table: "t", Row: tc.truth[0].Key})
	if err != nil {
		t.Fatal(err)
	}
	if route.PlanIndex != 0 || len(route.Candidates) == 0 {
		t.Fatalf("route: %+v", route)
	}
	var home string
	for _, s := range tc.status().Servers {
		if s.Id == route.Choice {
			home = s.Host
		}
	}
	p := newProbe(t)
	var homeServers []*messages.ServerStatus
	for _, s := range tc.status().Servers {
		if s.Host == home {
			homeServers = append(homeServers, s)
		}
	}
	if len(homeServers) != 2 {
		t.Fatalf("home host %q has %d servers", home, len(homeServers))
	}
	for i := 0; i < tc.cl.Hosts(); i++ {
		if localcluster.HostName(i) != home {
			continue
		}
		for idx := 0; idx < 2; idx++ {
			id := fmt.Sprintf("hold-%d", idx)
			p.startScan(tc, serverPID(tc, i, idx), id, time.Second, 1)
			p.waitFor(t, id, started(id))
		}
	}
	tc.check(c, 0, len(tc.truth), client.ScanOptions{})
	st := tc.status()
	var homeBusy uint64
	for _, s := range st.Servers {
		if s.Host == home {
			homeBusy += s.Dispatched
		}
	}
	if st.Busy < 2 || homeBusy < 2 {
		t.Fatalf("want both home servers tried and busy before escalating: busy=%d dispatched-to-home=%d", st.Busy, homeBusy)
	}
	if st.Dispatches < 3 {
		t.Fatalf("want >= 3 dispatches (2 busy + 1 elsewhere), got %d", st.Dispatches)
	}
	if st.ScansFailed != 0 {
		t.Fatalf("failed scans: %d", st.ScansFailed)
	}
}

// TestCancelStopsScan: a client that stops reading cancels the server's
// scan promptly; the worker is free again.
func TestCancelStopsScan(t *testing.T) {
	tc := startCluster(t, clusterOpts{hosts: 1, servers: 1, rows: 20000, tablets: 1})
	c := tc.client(func(c *client.Config) { c.Window = 1; c.BatchRows = 10 })
	rows := c.Scan(context.Background(), "t", tablets.Range{}, client.ScanOptions{})
	if !rows.Next() {
		t.Fatal(rows.Err())
	}
	id := tc.cl.Host(0).Ready.Servers[0]
	waitFor(t, "scan active", 10*time.Second, func() bool { h := tc.heartbeat(id); return h != nil && h.Active == 1 })
	rows.Close()
	// Without the cancel the server would wait 30 s (AckTimeout) for acks.
	waitFor(t, "scan cancelled", 10*time.Second, func() bool { h := tc.heartbeat(id); return h != nil && h.Active == 0 })
	tc.check(c, 10, 20, client.ScanOptions{})
}

// TestServerRestartSameAddress: a scan server killed and restarted on the
// same address (a new incarnation) gets scans again (docs/architecture.md, known pitfalls).
func TestServerRestartSameAddress(t *testing.T) {
	addr, err := freeport.Pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	tc := startCluster(t, clusterOpts{hosts: 1, servers: 1, rows: 3000, tablets: 1,
		hostArgs: func(int) []string { return []string{"--listen", addr} }})
	c := tc.client(nil)
	tc.check(c, 0, 3000, client.ScanOptions{})
	id := tc.cl.Host(0).Ready.Servers[0]
	inc := tc.cl.Host(0).Ready.Incarnation
	if err := tc.cl.Kill(0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "server gone", 10*time.Second, func() bool {
		for _, s := range tc.status().Servers {
			if s.Id == id {
				return !s.Alive
			}
		}
		return true
	})
	if err := tc.cl.Restart(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if tc.cl.Host(0).Ready.Incarnation == inc || tc.cl.Host(0).Ready.Servers[0] != id {
		t.Fatalf("restart: want same id %s with a new incarnation, got %+v", id, tc.cl.Host(0).Ready)
	}
	tc.check(c, 0, 3000, client.ScanOptions{})
	waitFor(t, "scans on the new incarnation", 10*time.Second, func() bool {
		h := tc.heartbeat(id)
		return h != nil && h.Incarnation != inc && h.ScansTotal > 0
	})
}

// TestHungServerMidStream: a scan server stopped (SIGSTOP) while streaming
// to a client is abandoned; the client resumes after the last key on
// another server and gets every row exactly once.
func TestHungServerMidStream(t *testing.T) {
	tc := startCluster(t, clusterOpts{hosts: 2, servers: 1, rows: 20000, tablets: 1})
	c := tc.client(func(c *client.Config) { c.Window = 1; c.BatchRows = 100; c.StallTimeout = 500 * time.Millisecond })
	ctx := context.Background()
	rows := c.Scan(ctx, "t", tablets.Range{}, client.ScanOptions{})
	i := 0
	stopped := -1
	for rows.Next() {
		r := rows.Row()
		if !bytes.Equal(r.Key, tc.truth[i].Key) {
			t.Fatalf("row %d: %q want %q", i, r.Key, tc.truth[i].Key)
		}
		i++
		if i == 150 {
			// Find the host serving us (the one with an active scan) and stop it.
			for h := 0; h < 2; h++ {
				if hb := tc.heartbeat(tc.cl.Host(h).Ready.Servers[0]); hb != nil && hb.Active > 0 {
					stopped = h
				}
			}
			if stopped < 0 {
				waitFor(t, "an active server", 5*time.Second, func() bool {
					for h := 0; h < 2; h++ {
						if hb := tc.heartbeat(tc.cl.Host(h).Ready.Servers[0]); hb != nil && hb.Active > 0 {
							stopped = h
							return true
						}
					}
					return false
				})
			}
			if err := tc.cl.Signal(stopped, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
		}
	}
	if stopped >= 0 {
		_ = tc.cl.Signal(stopped, syscall.SIGCONT)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if i != len(tc.truth) {
		t.Fatalf("%d rows, want %d", i, len(tc.truth))
	}
	if rows.Stats().Resumes < 1 {
		t.Fatalf("expected a resume, stats %+v", rows.Stats())
	}
}

// TestReingestSeenAtomically: re-ingesting a table while a client scans
// it: every scan returns either the whole old table or the whole new one,
// and the client picks up the new generation from its metadata watch.
func TestReingestSeenAtomically(t *testing.T) {
	tc := startCluster(t, clusterOpts{hosts: 2, servers: 1, rows: 3000, tablets: 3})
	c := tc.client(nil)
	ctx := context.Background()
	store, err := tc.conn.BlockStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := tc.conn.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	newer := make([]tablets.Entry, len(tc.truth))
	for i, e := range tc.truth {
		newer[i] = tablets.Entry{Key: e.Key, Value: append([]byte("v2-"), e.Value...)}
	}
	// Which generation did a full scan see? 1 or 2, never a mix.
	version := func() int {
		rows := c.Scan(ctx, "t", tablets.Range{}, client.ScanOptions{})
		defer rows.Close()
		old, nw, n := 0, 0, 0
		for rows.Next() {
			r := rows.Row()
			if !bytes.Equal(r.Key, tc.truth[n].Key) {
				t.Fatalf("row %d key %q", n, r.Key)
			}
			switch {
			case bytes.Equal(r.Value, tc.truth[n].Value):
				old++
			case bytes.Equal(r.Value, newer[n].Value):
				nw++
			default:
				t.Fatalf("row %d: unknown value %q", n, r.Value)
			}
			n++
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if n != len(tc.truth) || (old != 0 && nw != 0) {
			t.Fatalf("scan saw %d rows: %d old and %d new", n, old, nw)
		}
		if nw > 0 {
			return 2
		}
		return 1
	}
	if v := version(); v != 1 {
		t.Fatalf("before re-ingest: version %d", v)
	}
	done := make(chan error, 1)
	go func() {
		icfg := tablets.DefaultIngestConfig()
		icfg.Tablets = 5 // other split points too
		_, err := tablets.Ingest(ctx, store, meta, "t", newer, icfg)
		done <- err
	}()
	// Bounded: the metadata watch delivers the new generation within
	// seconds; a client that never sees it fails here, not at the suite
	// timeout. Every scan meanwhile sees one generation whole (version).
	ingested, scans := false, 0
	if !testutil.Poll(60*time.Second, func() bool {
		v := version()
		scans++
		if !ingested {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				ingested = true
			default:
			}
		}
		return v == 2
	}) {
		t.Fatalf("after %d full scans in 60s the client still reads generation 1 (ingest finished: %v)", scans, ingested)
	}
	if !ingested {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
