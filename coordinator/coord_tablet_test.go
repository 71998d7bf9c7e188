package coordinator

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/servertest"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
)

// The client dies after the winner streamed; its server cancels the
// attempt after its ack timeout. The flow ends and the tablet actor idles
// out.
func TestTabletActorIdlesOutAfterClientDied(t *testing.T) {
	r := newRig(t, rigOpts{rows: 2000, tablets: 1, coord: func(c *CoordinatorConfig) { c.TabletIdle = 50 * time.Millisecond }})
	cfg := servertest.Default()
	cfg.AckTimeout = 100 * time.Millisecond
	cfg.Window = 1
	r.addServer("h1", 0, cfg, nil)
	req := r.request(0)
	s := &rigScan{req: req, dead: true, done: make(chan struct{})}
	r.as.Root.Send(r.client, &rigStartScan{scan: s, router: r.co.router})
	r.waitFor("the tablet actor to start (in Status)", func() bool { return r.co.Status().GetTabletActors() == 1 })
	r.waitFor("the flow to end", func() bool { return r.co.counters.flows.Load() == 0 })
	r.waitFor("the tablet actor to idle out (in Status)", func() bool { return r.co.Status().GetTabletActors() == 0 })
	// The tablet is served again after that. The server takes a client
	// that acknowledges nothing for AckTimeout as gone, and the rig's
	// client does not resume a stream its server ended: this scan's
	// window holds every batch, so that its server never waits for an
	// ack and a slow one cannot cut the scan short.
	req = r.request(0)
	req.Window = wire.MaxWindow
	if batches := len(r.truthOf(0))/int(req.BatchRows) + 1; batches > wire.MaxWindow {
		t.Fatalf("%d batches do not fit in one window", batches)
	}
	r.checkRows(r.scan(req), 0)
}

// A ScanRequest that reaches a tablet actor while it stops
// for idleness must not be lost. Tiny TabletIdle, scans on every tablet
// with pauses around the idle time, so that requests keep arriving at the
// idle boundary; every scan must end with its rows. The same holds
// with requests and ScanDones sent straight to the tablet actors (the
// client learnt their PIDs), which then meet actors that stopped or are
// stopping; the gated mailbox and the dead-letter reroute keep them.
func TestTabletIdleStopLosesNoRequest(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(map[bool]string{false: "router", true: "direct"}[direct], func(t *testing.T) {
			idleStopLosesNoRequest(t, direct)
		})
	}
}

func idleStopLosesNoRequest(t *testing.T, direct bool) {
	const tabletsN, scansPer = 16, 100
	r := newRig(t, rigOpts{rows: 4 * 40, tablets: tabletsN, coord: func(c *CoordinatorConfig) { c.TabletIdle = 1 * time.Millisecond }})
	r.addServer("h1", 0, servertest.Default(), nil)
	errs := make(chan error, tabletsN)
	for idx := range tabletsN {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(idx), 1))
			for i := range scansPer {
				s := r.startVia(r.request(idx), false, direct)
				select {
				case <-s.done:
				case <-time.After(15 * time.Second):
					errs <- fmt.Errorf("tablet %d scan %d (%s): no answer within 15s: the request was lost", idx, i, s.req.RequestId)
					return
				}
				if s.err != nil || s.protoErr != "" || len(s.rows) != len(r.truthOf(idx)) {
					errs <- fmt.Errorf("tablet %d scan %d: err %v %s, %d rows", idx, i, s.err, s.protoErr, len(s.rows))
					return
				}
				time.Sleep(time.Duration(800+rng.IntN(700)) * time.Microsecond)
			}
			errs <- nil
		}()
	}
	for range tabletsN {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	r.waitFor("every tablet actor to idle out", func() bool { return r.co.counters.tabletActors.Load() == 0 })
	t.Logf("%d scans, %d tablet actor starts, %d direct requests, %d rerouted", tabletsN*scansPer, r.co.counters.tabletStarts.Load(),
		r.co.counters.direct.Load(), r.co.counters.rerouted.Load())
	if direct && r.co.counters.direct.Load() == 0 {
		t.Fatal("no request reached a tablet actor directly")
	}
}

// An attempt on a server that left the view (it said it
// leaves, or came back as a new incarnation) never sends ScanFinished; the
// tablet actor's periodic check ends it as an error and, since it
// delivered no data, retries elsewhere.
func TestTabletRetriesAttemptOnServerThatLeft(t *testing.T) {
	for _, how := range []string{"leaving", "new incarnation"} {
		t.Run(how, func(t *testing.T) {
			// StartStall would retry the stuck attempt too, after a while,
			// and so would the busy timeout when the stuck server's accept
			// notice comes later than the timeout and its slack (a loaded
			// machine; the retry then goes to the same server, the only one
			// yet): make both long, so that only the check can.
			r := newRig(t, rigOpts{rows: 500, tablets: 1, profiles: longBusyTimeoutProfile,
				coord: func(c *CoordinatorConfig) { c.Flow.StartStall = time.Hour }})
			gate := testutil.NewGatedFetcher(tablets.StoreFetcher{Store: r.store})
			t.Cleanup(func() { close(gate.Open) })
			a := r.addServer("ha", 0, servertest.Default(), gate)
			s := r.start(r.request(0), false)
			r.waitFor("the attempt on the stuck server", func() bool {
				v := r.co.board.View().Server("ha/0")
				return v != nil && v.InFlight == 1
			})
			r.addServer("hb", 0, servertest.Default(), nil)
			if how == "leaving" {
				r.as.Root.Send(r.co.registry, &messages.Heartbeat{Host: "ha", Server: "ha/0", Leaving: true, IntervalMs: 1000})
			} else {
				r.heartbeat("ha", "ha/0", a, "inc2", 4)
			}
			select {
			case <-s.done:
			case <-time.After(20 * time.Second):
				t.Fatal("the scan did not move off the server that left")
			}
			r.checkRows(s, 0)
			if s.accepted != 2 {
				t.Fatalf("rows came from attempt %d, want the retry (2)", s.accepted)
			}
			if how == "new incarnation" {
				// The restarted server starts clean: the lost attempt of
				// its previous incarnation is not held against it.
				v := r.co.board.View().Server("ha/0")
				if v == nil || v.InFlight != 0 || v.ConsecutiveFailures != 0 || len(v.RecentFailures) != 0 {
					t.Fatalf("new incarnation charged with the old one's attempt: %+v", v)
				}
			}
		})
	}
}

// longBusyTimeoutProfile is the default policy with a busy timeout no
// test waits out: an attempt that got no answer yet never times out.
const longBusyTimeoutProfile = `[{"isDefault":true,"policy":"accumulo-host","maxBusyTimeout":"1h",
  "attemptPlans":[{"servers":"100%","busyTimeout":"1h"}]}]`

// A ScanRequest's proofs_checked goes on to the scan server in the
// StartScan: the batches of a table with block roots come with their
// row counts and no checksum (the client checks the proofs instead).
func TestProofsCheckedReachesServer(t *testing.T) {
	r := newRig(t, rigOpts{rows: 2000, tablets: 1})
	r.addServer("h1", 0, servertest.Default(), nil)
	req := r.request(0)
	req.ProofsChecked = true
	s := r.scan(req)
	if s.err != nil || s.fin == nil || len(s.batches) < 2 {
		t.Fatalf("scan: err %v, %d batches", s.err, len(s.batches))
	}
	proofs := 0
	for _, b := range s.batches {
		if b.GetChecksum() != 0 {
			t.Fatalf("batch %d: checksum %x, want none", b.GetSeq(), b.GetChecksum())
		}
		proofs += len(b.GetProofs())
	}
	if proofs == 0 {
		t.Fatal("no proofs")
	}
	if want := r.truthOf(0); len(s.rows) != len(want) || s.fin.GetRows() != uint64(len(want)) {
		t.Fatalf("%d rows, finished with %d, want %d", len(s.rows), s.fin.GetRows(), len(want))
	}
}

// A tablet actor's StartScans carry its files without their block roots
// (32 bytes a block), and say that they were left out
// (tablets.DispatchFiles); TestProofsCheckedReachesServer shows the scan
// server still proves the rows.
func TestStartScanLeavesRootsOut(t *testing.T) {
	r := newRig(t, rigOpts{rows: 2000, tablets: 1})
	meta := r.table.GetTablets()[0]
	if len(meta.GetFiles()) == 0 || len(meta.GetFiles()[0].GetBlockRoots()) == 0 {
		t.Fatal("the rig's tablet has no files with block roots")
	}
	ta := newTabletActor(&tabletDeps{now: time.Now}, r.table, meta)
	if !ta.rootsLeftOut || len(ta.files) != len(meta.GetFiles()) {
		t.Fatalf("files %v, roots left out %v", ta.files, ta.rootsLeftOut)
	}
	for i, f := range ta.files {
		if len(f.GetBlockRoots()) != 0 || f.GetId() != meta.GetFiles()[i].GetId() || f.GetBlocks() != meta.GetFiles()[i].GetBlocks() {
			t.Fatalf("file %d dispatched as %v, recorded as %v", i, f, meta.GetFiles()[i])
		}
	}
}
