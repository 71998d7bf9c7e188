package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/clientsys"
	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
)

// TestRemoteRolesUnderAttack (docs/security.md): a secured cluster (two
// coordinators, two scan-server hosts with per-host certificates) is
// attacked over the actor remote by a holder of the client certificate
// and by a holder of host1's scan-server certificate, while honest
// clients scan it and check every row against the ground truth:
//
//	fake server: heartbeats of a fake scan server sent to the registries,
//	  which would then send it StartScans, answered with a forged row, no
//	  row or a damaged block;
//	direct StartScan: scans started on the scan servers directly, enough
//	  to hold every worker and fill every queue;
//	other attempts: a Cancel and a BatchAck for another client's stream,
//	  sent to its scan server, and Busy for it to its tablet actor (its
//	  request id leaked: the test taps the honest client);
//	remote Stop: actor.Stop and actor.PoisonPill to each coordinator's
//	  router and registry and to each scan server;
//	unserved methods: ListProcesses and GetProcessDiagnostics.
//
// Each attack is refused (counted in scanplane_remote_refused_total on the
// attacked processes), the honest scans see no wrong row and no failure,
// and every coordinator and scan server stays up.
func TestRemoteRolesUnderAttack(t *testing.T) {
	clustertest.SkipShort(t)
	ctx := context.Background()
	secDir := filepath.Join(t.TempDir(), "secrets")
	if err := secrets.Init(secDir, secrets.InitOptions{ServerHosts: []string{localcluster.HostName(0), localcluster.HostName(1)}}); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	cl := clustertest.Start(t, ctx, localcluster.Config{Coordinators: 2, Hosts: 2, ServersPerHost: 1, DataDir: dataDir,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 60 * time.Second, Secrets: secDir, HostMetrics: true})
	t.Cleanup(func() { logTails(t, dataDir) })
	tlsOf := func(role string) *tls.Config {
		cfg, err := cliutil.RemoteTLS(secDir, role)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	truth := tablets.GenerateRows(20000)
	meta := clustertest.Ingest(t, ctx, cl.NATSURL(), tlsOf("admin"), table, truth, 8)
	if err := cl.WaitServers(ctx, 2, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	sys, tp := tappedSystem(t, tlsOf("client"))
	sysCtx := clientsys.WithSystem(ctx, sys)
	honest := clustertest.Client(t, sysCtx, cl.NATSURL(), func(c *client.Config) { c.TLS = tlsOf("client") })
	victim := clustertest.Client(t, sysCtx, cl.NATSURL(), func(c *client.Config) {
		c.TLS, c.Window, c.StallTimeout = tlsOf("client"), 1, 30*time.Second
	})
	load := startHonestLoad(t, honest, truth)
	evil := newAttacker(t, tlsOf("client"))                                         // the client certificate
	evilHost := newAttacker(t, tlsOf(secrets.ServerRole(localcluster.HostName(0)))) // host1's scan-server certificate
	attackers := []*attacker{evil, evilHost}
	m := &remoteMetrics{t: t, cl: cl}
	coords := cl.CoordinatorAddrs()
	var servers []*actor.PID // each host's scan-server actor
	for i := 0; i < cl.Hosts(); i++ {
		servers = append(servers, actor.NewPID(cl.Host(i).Ready.Actor, "scanserver-0"))
	}

	t.Run("fake server", func(t *testing.T) {
		from := load.snapshot()
		base := m.coordinators("type")
		evil.forge.Store(true)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var beats atomic.Int64
		wg.Add(1)
		go func() { // a heartbeat every 100ms to every registry, as a scan server would on NATS
			defer wg.Done()
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				for _, c := range coords {
					_ = evil.send(actor.NewPID(c, "scanplane-registry"), nil, evil.heartbeat())
				}
				beats.Add(1)
				select {
				case <-stop:
					return
				case <-tick.C:
				}
			}
		}()
		refused := testutil.Poll(15*time.Second, func() bool { return allAbove(m.coordinators("type"), base) || evil.forged.Load() >= 3 })
		load.waitMore(t, from, 20)
		// At least 20 heartbeats (4 s of a 200 ms interval), which a
		// registry that took them would have turned into StartScans.
		testutil.Poll(15*time.Second, func() bool { return beats.Load() >= 20 })
		close(stop)
		wg.Wait()
		inView := m.serversOf("evil")
		t.Logf("fake server: %d StartScans reached it and were answered with forgeries; in the coordinators' view: %v; honest scans meanwhile: %s",
			evil.received("scanplane.internal.v1.StartScan"), inView, load.since(from))
		if !refused {
			t.Errorf("heartbeats over the remote not refused (type) by every coordinator: %v -> %v", base, m.coordinators("type"))
		}
		if n := evil.received("scanplane.internal.v1.StartScan"); n != 0 || inView {
			t.Errorf("the fake scan server got %d StartScans, in view %v; want none, not in view", n, inView)
		}
		load.check(t, from)
	})

	t.Run("direct StartScan", func(t *testing.T) {
		from := load.snapshot()
		base := m.hosts("role")
		const perServer = 4 + 64 // the default workers and queue
		for _, a := range attackers {
			for i, s := range servers {
				for k := 0; k < perServer; k++ {
					tm := meta.GetTablets()[(i*perServer+k)%len(meta.GetTablets())]
					_ = a.send(s, nil, &messages.StartScan{RequestId: fmt.Sprintf("evil-%d-%d", i, k), Attempt: 1,
						Client: &messages.Pid{Address: a.addr, Id: "sink"}, TabletActor: &messages.Pid{Address: a.addr, Id: "tablet"},
						Tablet: tm.GetRef(), Files: tm.GetFiles(), Range: &messages.KeyRange{}, BatchRows: 1, Window: 1,
						BusyTimeoutUs: time.Minute.Microseconds(), Server: s.Address + "/0"})
				}
			}
		}
		want := float64(len(attackers) * perServer)
		refused := testutil.Poll(15*time.Second, func() bool { return allAtLeast(m.hosts("role"), base, want) })
		load.waitMore(t, from, 20)
		got := 0
		for _, a := range attackers {
			got += a.received("scanplane.internal.v1.RowBatch") + a.received("scanplane.internal.v1.ScanStarted") + a.received("scanplane.internal.v1.Busy")
		}
		t.Logf("direct StartScan: %d sent per server; the attackers got %d rows in %d RowBatches and %d ScanStarted, %d Busy; honest scans meanwhile: %s",
			len(attackers)*perServer, evil.rows.Load()+evilHost.rows.Load(), evil.received("scanplane.internal.v1.RowBatch")+evilHost.received("scanplane.internal.v1.RowBatch"),
			evil.received("scanplane.internal.v1.ScanStarted")+evilHost.received("scanplane.internal.v1.ScanStarted"),
			evil.received("scanplane.internal.v1.Busy")+evilHost.received("scanplane.internal.v1.Busy"), load.since(from))
		if !refused {
			t.Errorf("StartScans not refused (role) by every scan server: %v -> %v, want +%v each", base, m.hosts("role"), want)
		}
		if got != 0 {
			t.Errorf("the attackers got %d answers to their StartScans; want none", got)
		}
		load.check(t, from)
	})

	t.Run("other attempts", func(t *testing.T) {
		from := load.snapshot()
		// A tablet's range, read 10 rows per batch, one batch in flight:
		// the stream waits for the victim's acks while it reads nothing.
		sp := meta.GetSplitPoints()
		rng := tablets.Range{Start: sp[2], End: sp[3]}
		a, b := indexOf(truth, rng.Start), indexOf(truth, rng.End)
		if w, f := clustertest.CheckScan(ctx, victim, table, truth, a, b, client.ScanOptions{}); w != nil || f != nil {
			t.Fatalf("warm-up scan: %v %v", w, f) // the victim learns the tablet actor's PID
		}
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		rows := victim.Scan(sctx, table, rng, client.ScanOptions{BatchRows: 10})
		defer rows.Close()
		if !rows.Next() {
			t.Fatalf("victim scan: no first row: %v", rows.Err())
		}
		var req, ack tapped
		if !testutil.Poll(15*time.Second, func() bool {
			var ok bool
			if req, ok = tp.lastRequest(func(r *messages.ScanRequest) bool { return r.GetBatchRows() == 10 && r.GetWindow() == 1 }); !ok {
				return false
			}
			ack, ok = tp.ackOf(req.msg.(*messages.ScanRequest).GetRequestId())
			return ok
		}) {
			t.Fatal("the tap saw no ScanRequest and BatchAck of the victim's scan")
		}
		id, attempt := req.msg.(*messages.ScanRequest).GetRequestId(), ack.msg.(*messages.BatchAck).GetAttempt()
		server, hostName := ack.target, ""
		for i := 0; i < cl.Hosts(); i++ {
			if cl.Host(i).Ready.Actor == server.Address {
				hostName = cl.Host(i).Ready.Host
			}
		}
		tabletActor := req.target
		baseAttempt, baseRole, baseServer := m.hosts("attempt"), m.coordinators("role"), m.coordinators("server")
		busy := &messages.Busy{RequestId: id, Attempt: attempt, Server: server.Address + "/0", Host: hostName}
		_ = evil.send(server, nil, &messages.BatchAck{RequestId: id, Attempt: attempt, Seq: 2})
		_ = evil.send(server, nil, &messages.Cancel{RequestId: id, Attempt: attempt, Reason: "attacker"})
		_ = evil.send(tabletActor, nil, busy)
		_ = evilHost.send(tabletActor, nil, busy)
		refused := testutil.Poll(15*time.Second, func() bool {
			return sum(m.hosts("attempt"))-sum(baseAttempt) >= 2 && sum(m.coordinators("role"))-sum(baseRole) >= 1 &&
				sum(m.coordinators("server"))-sum(baseServer) >= 1
		})
		n := 1
		var wrong error
		for i := a + 1; rows.Next(); i++ {
			r := rows.Row()
			if i >= b || !bytes.Equal(r.Key, truth[i].Key) || !bytes.Equal(r.Value, truth[i].Value) {
				wrong = fmt.Errorf("row %d is %q", i-a, r.Key)
				break
			}
			n++
		}
		st := rows.Stats()
		t.Logf("other attempts: victim request %s attempt %d on %s (tablet actor %s); after the attacks it read %d of %d rows, err %v, wrong %v, %d resumes, %d requests; honest scans meanwhile: %s",
			id, attempt, server, tabletActor, n, b-a, rows.Err(), wrong, st.Resumes, st.Requests, load.since(from))
		if !refused {
			t.Errorf("not refused: attempt %v -> %v (want +2), role %v -> %v (want +1), server %v -> %v (want +1)",
				baseAttempt, m.hosts("attempt"), baseRole, m.coordinators("role"), baseServer, m.coordinators("server"))
		}
		if rows.Err() != nil || wrong != nil || n != b-a || st.Resumes != 0 {
			t.Errorf("the victim's scan was disturbed: %d of %d rows, err %v, wrong %v, %d resumes", n, b-a, rows.Err(), wrong, st.Resumes)
		}
		load.check(t, from)
	})

	t.Run("remote Stop", func(t *testing.T) {
		from := load.snapshot()
		baseC, baseH := m.coordinators("type"), m.hosts("type")
		start := time.Now()
		for _, a := range attackers {
			for _, stop := range []protoMessage{&actor.Stop{}, &actor.PoisonPill{}} {
				for _, c := range coords {
					_ = a.send(actor.NewPID(c, wire.RouterName), nil, stop)
					_ = a.send(actor.NewPID(c, "scanplane-registry"), nil, stop)
				}
				for _, s := range servers {
					_ = a.send(s, nil, stop)
				}
			}
		}
		refused := testutil.Poll(15*time.Second, func() bool {
			return allAtLeast(m.coordinators("type"), baseC, 8) && allAtLeast(m.hosts("type"), baseH, 4)
		})
		// Every router answers, every registry takes heartbeats, every
		// scan-server actor answers a connection probe.
		var down []string
		for _, c := range coords {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if _, err := honest.StatusOf(sctx, c); err != nil {
				down = append(down, "router "+c+": "+err.Error())
			}
			cancel()
		}
		if !testutil.Poll(15*time.Second, func() bool { return m.heardSince(start.Add(time.Second)) }) {
			down = append(down, "registries: no heartbeat taken for a second after the attack")
		}
		before := evil.received("scanplane.internal.v1.Cancel")
		for _, s := range servers {
			_ = evil.send(s, evil.pid("probe"), &messages.Cancel{Reason: "connect"})
		}
		if !testutil.Poll(15*time.Second, func() bool { return evil.received("scanplane.internal.v1.Cancel") >= before+len(servers) }) {
			down = append(down, fmt.Sprintf("scan servers: %d of %d answered a connection probe", evil.received("scanplane.internal.v1.Cancel")-before, len(servers)))
		}
		load.waitMore(t, from, 20)
		t.Logf("remote Stop: down after the attack: %q; honest scans meanwhile: %s", down, load.since(from))
		if !refused {
			t.Errorf("Stop and PoisonPill not refused (type): coordinators %v -> %v (want +8 each), hosts %v -> %v (want +4 each)",
				baseC, m.coordinators("type"), baseH, m.hosts("type"))
		}
		if len(down) > 0 {
			t.Errorf("down after a remote Stop: %q", down)
		}
		load.check(t, from)
	})

	t.Run("unserved methods", func(t *testing.T) {
		for _, addr := range append(coords, servers[0].Address, servers[1].Address) {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsOf("client"))))
			if err != nil {
				t.Fatal(err)
			}
			rc := remote.NewRemotingClient(conn)
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err1 := rc.ListProcesses(cctx, &remote.ListProcessesRequest{})
			_, err2 := rc.GetProcessDiagnostics(cctx, &remote.GetProcessDiagnosticsRequest{Pid: actor.NewPID(addr, wire.RouterName)})
			cancel()
			conn.Close()
			if status.Code(err1) != codes.Unimplemented || status.Code(err2) != codes.Unimplemented {
				t.Errorf("%s: ListProcesses %v, GetProcessDiagnostics %v; want Unimplemented", addr, err1, err2)
			}
		}
	})

	load.stop()
	t.Logf("honest scans in all: %s", load.since(loadCounts{}))
	load.check(t, loadCounts{})
	for i := 0; i < cl.Coordinators(); i++ {
		if !cl.CoordinatorProc(i).Alive() {
			t.Errorf("coordinator %d exited", i)
		}
	}
}

type protoMessage = interface{ ProtoReflect() protoreflect.Message }

// indexOf is the index of the first row of truth at or after key (len
// for an empty key: the end).
func indexOf(truth []tablets.Entry, key []byte) int {
	if len(key) == 0 {
		return len(truth)
	}
	for i, e := range truth {
		if bytes.Compare(e.Key, key) >= 0 {
			return i
		}
	}
	return len(truth)
}

// honestLoad runs honest verified scans on two goroutines until stopped.
type honestLoad struct {
	done, wrong, failed atomic.Int64
	mu                  sync.Mutex
	errs                []error
	quit                chan struct{}
	wg                  sync.WaitGroup
	stopOnce            sync.Once
}

type loadCounts struct{ done, wrong, failed int64 }

func startHonestLoad(t *testing.T, c *client.Client, truth []tablets.Entry) *honestLoad {
	l := &honestLoad{quit: make(chan struct{})}
	for w := 0; w < 2; w++ {
		l.wg.Add(1)
		go func(seed uint64) {
			defer l.wg.Done()
			r := rand.New(rand.NewPCG(seed, 7))
			for {
				select {
				case <-l.quit:
					return
				default:
				}
				a, b := randomRange(r, len(truth))
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				wrong, failed := clustertest.CheckScan(ctx, c, table, truth, a, b, client.ScanOptions{})
				cancel()
				switch {
				case wrong != nil:
					l.wrong.Add(1)
				case failed != nil:
					l.failed.Add(1)
				}
				if wrong != nil || failed != nil {
					l.mu.Lock()
					if len(l.errs) < 10 {
						l.errs = append(l.errs, fmt.Errorf("wrong %v, failed %v", wrong, failed))
					}
					l.mu.Unlock()
				}
				l.done.Add(1)
			}
		}(uint64(w))
	}
	t.Cleanup(l.stop)
	return l
}

func (l *honestLoad) stop() {
	l.stopOnce.Do(func() {
		close(l.quit)
		l.wg.Wait()
	})
}

func (l *honestLoad) snapshot() loadCounts {
	return loadCounts{l.done.Load(), l.wrong.Load(), l.failed.Load()}
}

func (l *honestLoad) since(from loadCounts) string {
	now := l.snapshot()
	return fmt.Sprintf("%d scans, %d wrong, %d failed", now.done-from.done, now.wrong-from.wrong, now.failed-from.failed)
}

// waitMore waits (bounded) until n more honest scans ended than at from.
func (l *honestLoad) waitMore(t *testing.T, from loadCounts, n int64) {
	t.Helper()
	if !testutil.Poll(60*time.Second, func() bool { return l.done.Load() >= from.done+n }) {
		t.Errorf("only %d honest scans ended in 60 s", l.done.Load()-from.done)
	}
}

// check fails t if an honest scan since from was wrong or failed.
func (l *honestLoad) check(t *testing.T, from loadCounts) {
	t.Helper()
	now := l.snapshot()
	if now.wrong != from.wrong || now.failed != from.failed {
		l.mu.Lock()
		t.Errorf("honest scans: %d wrong, %d failed; first errors: %v", now.wrong-from.wrong, now.failed-from.failed, l.errs)
		l.mu.Unlock()
	}
}

// remoteMetrics reads the processes' /metrics and /status.
type remoteMetrics struct {
	t  *testing.T
	cl *localcluster.Cluster
}

// coordinators is scanplane_remote_refused_total{reason} of each
// coordinator (0 where the metric is missing).
func (m *remoteMetrics) coordinators(reason string) []float64 {
	var out []float64
	for i := 0; i < m.cl.Coordinators(); i++ {
		out = append(out, m.refused(m.cl.HTTPURL(i)+"/metrics", reason))
	}
	return out
}

// hosts is scanplane_remote_refused_total{reason} of each scan-server
// process.
func (m *remoteMetrics) hosts(reason string) []float64 {
	var out []float64
	for i := 0; i < m.cl.Hosts(); i++ {
		out = append(out, m.refused(m.cl.HTTPScheme()+"://"+m.cl.Host(i).Ready.HTTP+"/metrics", reason))
	}
	return out
}

func (m *remoteMetrics) refused(url, reason string) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		m.t.Fatal(err)
	}
	resp, err := m.cl.HTTPClient().Do(req)
	if err != nil {
		m.t.Errorf("%s: %v", url, err)
		return 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	prefix := `scanplane_remote_refused_total{reason="` + reason + `"} `
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// serversOf reports whether any coordinator's view has a server of host.
func (m *remoteMetrics) serversOf(host string) bool {
	for i := 0; i < m.cl.Coordinators(); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := m.cl.StatusOf(ctx, i)
		cancel()
		if err != nil {
			m.t.Errorf("status of coordinator %d: %v", i, err)
			continue
		}
		for _, s := range st.GetServers() {
			if s.GetHost() == host {
				return true
			}
		}
	}
	return false
}

// heardSince reports whether every coordinator took a heartbeat of every
// real scan server after at.
func (m *remoteMetrics) heardSince(at time.Time) bool {
	for i := 0; i < m.cl.Coordinators(); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := m.cl.StatusOf(ctx, i)
		cancel()
		if err != nil {
			return false
		}
		n := 0
		for _, s := range st.GetServers() {
			if s.GetHost() != "evil" && s.GetAlive() && s.GetLastHeartbeatUnixMs() > at.UnixMilli() {
				n++
			}
		}
		if n < m.cl.Hosts() {
			return false
		}
	}
	return true
}

func sum(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s
}

// allAbove: every value of now is above base's.
func allAbove(now, base []float64) bool { return allAtLeast(now, base, 1) }

// allAtLeast: every value of now is at least base's + d.
func allAtLeast(now, base []float64, d float64) bool {
	if len(now) != len(base) {
		return false
	}
	for i := range now {
		if now[i] < base[i]+d {
			return false
		}
	}
	return true
}
