package client

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
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

// The fake coordinator: this test binary run again with fakeCoordEnv set
// (see TestMain) is a process with its own actor remote that announces a
// coordinator lease and answers scan requests at its router, playing the
// scan server too. Client tests cannot import actors; a process of its
// own gives it its own remote (one per process) and lets a test stop its
// lease while its endpoint stays up, so only the lease tells the client.
//
// Environment: fakeCoordEnv = "serve" (answer every request with the rows
// of fakeRows in its range) or "hold" (print it and never answer);
// FAKE_NATS, FAKE_MEMBER, FAKE_NODE (the lease's nats_node). It prints
// "ready <address>" once announced and "request <id> <tablet>" per
// ScanRequest. Commands on stdin: "leave" withdraws the lease, "quiet"
// closes its NATS connection (the lease expires, as a hung or partitioned
// coordinator's would); EOF ends it.
const fakeCoordEnv = "SCANPLANE_TEST_FAKE_COORDINATOR"

// fakeRows is the table the fake serves: k0000..k0099 = v0..v99.
const fakeRows = 100

func fakeRowKey(i int) []byte { return fmt.Appendf(nil, "k%04d", i) }

func fakeCoordinatorMain(mode string) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "fake coordinator:", err); return 1 }
	quiet := slog.New(slog.DiscardHandler)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	rc := remote.Configure("127.0.0.1", 0)
	rc.MaxRetryCount = 1
	rem := remote.NewRemote(sys, rc)
	if err := remoting.StartRemote(rem); err != nil {
		return fail(err)
	}
	defer rem.Shutdown(false)
	var outMu sync.Mutex
	say := func(format string, a ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Printf(format+"\n", a...)
	}
	self := &messages.Pid{Address: sys.Address(), Id: wire.RouterName}
	router := func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *messages.StatusRequest:
			ctx.Respond(&messages.StatusReply{TabletActors: 1})
		case *messages.ScanRequest:
			say("request %s tablet %d after %q at %s", m.GetRequestId(), m.GetTablet().GetIndex(), m.GetResumeAfter(),
				time.Now().Format("15:04:05.000"))
			if mode == "serve" {
				serveFake(ctx, m, self)
			}
		}
	}
	if _, err := sys.Root.SpawnNamed(actor.PropsFromFunc(router), wire.RouterName); err != nil {
		return fail(err)
	}
	ctx := context.Background()
	bc := bus.DefaultConfig()
	bc.URL = os.Getenv("FAKE_NATS")
	conn, err := bus.Connect(ctx, bc)
	if err != nil {
		return fail(err)
	}
	defer conn.Close()
	store, err := conn.Leases(ctx, bus.DefaultLeaseConfig())
	if err != nil {
		return fail(err)
	}
	member := os.Getenv("FAKE_MEMBER")
	lease, err := store.Announce(ctx, &messages.ClusterInfo{MemberId: member, CoordinatorAddress: sys.Address(),
		RouterId: wire.RouterName, Incarnation: member, StartedUnixMs: time.Now().UnixMilli(), NatsNode: os.Getenv("FAKE_NODE")})
	if err != nil {
		return fail(err)
	}
	say("ready %s", sys.Address())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "leave":
			if err := lease.Close(); err != nil {
				return fail(err)
			}
		case "quiet":
			conn.Close()
		}
		say("done %s", in.Text())
	}
	_ = lease.Close()
	return 0
}

// serveFake answers a scan request as a scan server would: the rows of
// the request's range after resume_after, in verified batches of 10, then
// ScanFinished.
func serveFake(ctx actor.Context, m *messages.ScanRequest, self *messages.Pid) {
	to := actor.NewPID(m.GetClient().GetAddress(), m.GetClient().GetId())
	rng := tablets.Range{Start: m.GetRange().GetStart(), End: m.GetRange().GetEnd()}
	var d tablets.RowDigest
	var seq uint64
	var batch []*messages.Row
	flush := func() {
		seq++
		ctx.Send(to, &messages.RowBatch{RequestId: m.GetRequestId(), Attempt: 1, Seq: seq, Rows: batch, Server: "fake",
			ServerPid: self, RowCount: d.Rows(), Checksum: d.Sum()})
		batch = nil
	}
	for i := range fakeRows {
		k, v := fakeRowKey(i), fmt.Appendf(nil, "v%d", i)
		if !rng.Contains(k) || (len(m.GetResumeAfter()) > 0 && bytes.Compare(k, m.GetResumeAfter()) <= 0) {
			continue
		}
		d.Add(k, v)
		batch = append(batch, &messages.Row{Key: k, Value: v})
		if len(batch) == 10 {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
	ctx.Send(to, &messages.ScanFinished{RequestId: m.GetRequestId(), Attempt: 1, Server: "fake", Rows: d.Rows(),
		Batches: seq, Checksum: d.Sum()})
}

// fakeCoord is a running fake coordinator process.
type fakeCoord struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addr  string
	mu    sync.Mutex
	lines []string
}

func startFakeCoord(t *testing.T, mode, natsURL, member, node string) *fakeCoord {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fakeCoordEnv+"="+mode, "FAKE_NATS="+natsURL, "FAKE_MEMBER="+member, "FAKE_NODE="+node)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f := &fakeCoord{t: t, cmd: cmd, stdin: stdin}
	t.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f.mu.Lock()
			f.lines = append(f.lines, sc.Text())
			f.mu.Unlock()
		}
	}()
	ready := f.waitLine("ready ")
	f.addr = strings.TrimPrefix(ready, "ready ")
	return f
}

// waitLine waits up to 30s for a line starting with prefix and returns it.
func (f *fakeCoord) waitLine(prefix string) string {
	f.t.Helper()
	var line string
	testutil.EventuallyErr(f.t, 30*time.Second, fmt.Sprintf("a line %q of the fake coordinator", prefix), func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, l := range f.lines {
			if strings.HasPrefix(l, prefix) {
				line = l
				return nil
			}
		}
		return fmt.Errorf("lines: %q", f.lines)
	})
	return line
}

// requestLines returns the fake's request lines, whole.
func (f *fakeCoord) requestLines() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, l := range f.lines {
		if strings.HasPrefix(l, "request ") {
			out = append(out, l)
		}
	}
	return out
}

// requests returns the request ids the fake received.
func (f *fakeCoord) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for _, l := range f.lines {
		if rest, ok := strings.CutPrefix(l, "request "); ok {
			ids = append(ids, strings.Fields(rest)[0])
		}
	}
	return ids
}

func (f *fakeCoord) command(cmd string) {
	f.t.Helper()
	if _, err := fmt.Fprintln(f.stdin, cmd); err != nil {
		f.t.Fatal(err)
	}
	f.waitLine("done " + cmd)
}

// TestLeaseLossMovesRequests: two coordinators with leases; the client
// prefers the one on its NATS node, which takes the first tablet's
// request and never answers. When that coordinator's lease goes — it
// leaves (lease deleted) or goes quiet (lease expires) while its actor
// endpoint stays up, so only the lease can tell — the waiting request is
// sent again, under a new request id, to the other coordinator, the rest
// of the scan goes there, and the scan yields exactly the table's rows.
func TestLeaseLossMovesRequests(t *testing.T) {
	for _, how := range []string{"leave", "quiet"} {
		t.Run(how, func(t *testing.T) {
			sc := natsserver.DefaultServerConfig()
			sc.Port, sc.StoreDir, sc.Name = -1, t.TempDir(), "node-1"
			srv, err := natsserver.StartServer(sc)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Close)
			natsURL := srv.ClientURL()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			// The lease bucket with a 1s TTL (the fakes and the client
			// adopt it), and the table: 4 tablets split at k0025, k0050,
			// k0075.
			bc := bus.DefaultConfig()
			bc.URL = natsURL
			admin, err := bus.Connect(ctx, bc)
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			lc := bus.DefaultLeaseConfig()
			lc.TTL, lc.Renew = time.Second, 200*time.Millisecond
			if _, err := admin.Leases(ctx, lc); err != nil {
				t.Fatal(err)
			}
			meta, err := admin.MetaStore(ctx)
			if err != nil {
				t.Fatal(err)
			}
			tm := &messages.TableMeta{Name: "t", Generation: 1}
			splits := [][]byte{fakeRowKey(25), fakeRowKey(50), fakeRowKey(75)}
			tm.SplitPoints = splits
			for i := range 4 {
				ref := &messages.TabletRef{Table: "t", Generation: 1, Index: uint32(i)}
				if i > 0 {
					ref.PrevEndRow = splits[i-1]
				}
				if i < 3 {
					ref.EndRow = splits[i]
				}
				// A file without block roots: the fake serves rows
				// without proofs, so the scans allow unverified tables.
				tm.Tablets = append(tm.Tablets, &messages.TabletMeta{Ref: ref, Files: []*messages.FileRef{{Id: fmt.Sprintf("f%d", i), Blocks: 1}}})
			}
			if err := meta.Publish(ctx, tm, 0); err != nil {
				t.Fatal(err)
			}

			held := startFakeCoord(t, "hold", natsURL, "held", "node-1")
			serving := startFakeCoord(t, "serve", natsURL, "serving", "")
			cfg := DefaultConfig()
			cfg.NATSURL, cfg.CoordinatorWait = natsURL, time.Minute
			c, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Start(clientsys.WithSystem(ctx, sharedSystem(t))); err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if addrs, _ := c.Coordinators(); !slices.Equal(addrs, []string{held.addr, serving.addr}) {
				t.Fatalf("coordinators %v, want the one on the client's NATS node first: %v", addrs, []string{held.addr, serving.addr})
			}

			type result struct {
				rows  []Row
				err   error
				stats ScanStats
			}
			res := make(chan result, 1)
			go func() {
				var out []Row
				// One tablet at a time: the held coordinator gets one request.
				rows := c.Scan(ctx, "t", tablets.Range{}, ScanOptions{AllowUnverified: true, Parallel: 1})
				defer rows.Close()
				for rows.Next() {
					out = append(out, rows.Row())
				}
				res <- result{out, rows.Err(), rows.Stats()}
			}()
			held.waitLine("request ")
			start := time.Now()
			held.command(how)
			var r result
			select {
			case r = <-res:
			case <-ctx.Done():
				t.Fatalf("scan did not end after the coordinator's lease went (%s)", how)
			}
			t.Logf("%s: scan done %v after the held coordinator's lease went (lease TTL %v)", how, time.Since(start).Round(time.Millisecond), lc.TTL)
			if r.err != nil {
				t.Fatal(r.err)
			}
			if len(r.rows) != fakeRows {
				t.Fatalf("%d rows, want %d", len(r.rows), fakeRows)
			}
			for i, row := range r.rows {
				if !bytes.Equal(row.Key, fakeRowKey(i)) || string(row.Value) != fmt.Sprintf("v%d", i) {
					t.Fatalf("row %d is %s=%s", i, row.Key, row.Value)
				}
			}
			// The fakes' lines are read asynchronously: the scan can end
			// before the serving fake's last "request" line is in.
			testutil.Poll(10*time.Second, func() bool { return len(serving.requests()) >= 4 })
			heldIDs, servedIDs := held.requests(), serving.requests()
			if len(heldIDs) != 1 || len(servedIDs) != 4 || slices.Contains(servedIDs, heldIDs[0]) {
				// The fakes' lines name each request's tablet, resume key and
				// time, and the stats count resumes: together they tell a
				// request the lease moved from one a timeout sent again.
				t.Fatalf("held coordinator got %v, serving one %v; want 1 and 4 requests, the resent one under a new id\n"+
					"lease went at %s; scan %+v\nheld: %q\nserving: %q", heldIDs, servedIDs, start.Format("15:04:05.000"), r.stats,
					held.requestLines(), serving.requestLines())
			}
			if addrs, _ := c.Coordinators(); !slices.Equal(addrs, []string{serving.addr}) {
				t.Fatalf("coordinators after the lease went: %v", addrs)
			}
		})
	}
}
