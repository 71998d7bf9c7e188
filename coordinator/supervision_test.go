package coordinator

import (
	"errors"
	"strings"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/internal/actorenv"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/servertest"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
	"github.com/scanplane/scanplane/tablets"
)

// inFlight is the coordinator's in-flight count of server id.
func (r *rig) inFlight(id string) int {
	if s := r.co.board.View().Server(selection.ServerID(id)); s != nil {
		return s.InFlight
	}
	return -1
}

// tabletPID is tablet idx's running actor.
func (r *rig) tabletPID(idx int) *actor.PID {
	r.t.Helper()
	pid := r.tablets.pid(tabletActorName("t", r.table.Generation, uint32(idx)))
	if pid == nil {
		r.t.Fatalf("no actor runs for tablet %d", idx)
	}
	return pid
}

// TestTabletActorPanicLosesNoScan: a tablet actor panics while a scan of
// its tablet waits on a server. The actor restarts clean; the scan is
// served by the new incarnation and returns every row; the host's
// in-flight count and the flows gauge come back to zero; the failure is
// counted.
func TestTabletActorPanicLosesNoScan(t *testing.T) {
	r := newRig(t, rigOpts{rows: 200, tablets: 1})
	gate := testutil.NewGatedFetcher(tablets.StoreFetcher{Store: r.store})
	r.addServer("h1", 0, servertest.Default(), gate)
	s := r.start(r.request(0), false)
	r.waitFor("the scan in flight on h1/0", func() bool { return r.inFlight("h1/0") == 1 })
	pid := r.tabletPID(0)
	r.as.Root.Send(pid, &actorenv.Panic{Why: "test: tablet actor panic"})
	r.waitFor("the failure handled", func() bool { return r.co.counters.actorFailures.Load() == 1 })
	close(gate.Open)
	r.checkRows(r.wait(s), 0)
	if got := r.tabletPID(0); !got.Equal(pid) {
		t.Fatalf("tablet actor %v after its restart, want the same PID %v", got, pid)
	}
	r.waitFor("in-flight and flows back to zero", func() bool {
		return r.inFlight("h1/0") == 0 && r.co.counters.flows.Load() == 0
	})
	if n := r.co.counters.tabletActors.Load(); n != 1 {
		t.Fatalf("tablet actors gauge %d, want 1", n)
	}
	// It serves on.
	r.checkRows(r.scan(r.request(0)), 0)
}

// TestRouterPanicLosesNoScan: the router panics while one request waits
// for its table's metadata and another waits on a server in a tablet
// actor. The router restarts; both scans complete with every row; the
// counters are exact.
func TestRouterPanicLosesNoScan(t *testing.T) {
	var gm *gatedMeta
	r := newRig(t, rigOpts{rows: 200, tablets: 2,
		meta: func(m MetaSource) MetaSource { gm = &gatedMeta{MetaSource: m, open: make(chan struct{})}; return gm }})
	gate := testutil.NewGatedFetcher(tablets.StoreFetcher{Store: r.store})
	r.addServer("h1", 0, servertest.Default(), gate)
	close(gm.open) // the first request loads the metadata
	flowing := r.start(r.request(0), false)
	r.waitFor("the first scan in flight", func() bool { return r.inFlight("h1/0") == 1 })
	gm.open = make(chan struct{})
	r.co.meta.forget("t", r.table.Generation+1) // the next request waits for a load
	waiting := r.start(r.request(1), false)
	r.waitFor("a metadata load running", func() bool { return gm.running.Load() == 1 })

	r.as.Root.Send(r.co.router, &actorenv.Panic{Why: "test: router panic"})
	r.waitFor("the failure handled", func() bool { return r.co.counters.actorFailures.Load() == 1 })
	close(gm.open)
	close(gate.Open)
	r.checkRows(r.wait(flowing), 0)
	r.checkRows(r.wait(waiting), 1)
	r.waitFor("in-flight and flows back to zero", func() bool {
		return r.inFlight("h1/0") == 0 && r.co.counters.flows.Load() == 0
	})
	for i := range 2 {
		r.checkRows(r.scan(r.request(i)), i)
	}
	if st := r.co.Status(); st.GetScansFailed() != 0 {
		t.Fatalf("status scans failed %d, want 0", st.GetScansFailed())
	}
}

// TestSecondFailureAnswersInternal: a request whose actor fails twice
// while holding it is answered INTERNAL, naming why, instead of going
// round for ever.
func TestSecondFailureAnswersInternal(t *testing.T) {
	r := newRig(t, rigOpts{rows: 100, tablets: 1})
	gate := testutil.NewGatedFetcher(tablets.StoreFetcher{Store: r.store})
	r.addServer("h1", 0, servertest.Default(), gate)
	defer close(gate.Open)
	s := r.start(r.request(0), false)
	for n := uint64(1); n <= 2; n++ {
		// The n-th incarnation holds the request: its flow is the n-th
		// (the failure is counted before the actor restarts, so the old
		// flow alone does not tell).
		r.waitFor("the scan in flight", func() bool {
			return r.inFlight("h1/0") >= 1 && r.co.counters.scans.Load() == n && r.co.counters.flows.Load() == 1
		})
		r.as.Root.Send(r.tabletPID(0), &actorenv.Panic{Why: "test"})
		r.waitFor("the failure handled", func() bool { return r.co.counters.actorFailures.Load() == n })
	}
	r.wait(s)
	if s.err == nil || s.err.GetCode() != messages.ErrorCode_ERROR_CODE_INTERNAL {
		t.Fatalf("scan after two failures: %v, want INTERNAL", s.err)
	}
}

// TestAnswerFromAnotherServerIgnored: a Busy for an attempt, sent by a
// server the attempt did not go to, is refused (counted as a bad
// message) and leaves the scan alone.
func TestAnswerFromAnotherServerIgnored(t *testing.T) {
	r := newRig(t, rigOpts{rows: 100, tablets: 1})
	gate := testutil.NewGatedFetcher(tablets.StoreFetcher{Store: r.store})
	r.addServer("h1", 0, servertest.Default(), gate)
	s := r.start(r.request(0), false)
	r.waitFor("the scan in flight", func() bool { return r.inFlight("h1/0") == 1 })
	bad := r.co.counters.badMessages.Load()
	r.as.Root.Send(r.tabletPID(0), &messages.Busy{RequestId: s.req.RequestId, Attempt: 1, Server: "h9/0", Host: "h9"})
	r.waitFor("the forged Busy refused", func() bool { return r.co.counters.badMessages.Load() == bad+1 })
	close(gate.Open)
	r.checkRows(r.wait(s), 0)
	if n := r.co.counters.busy.Load(); n != 0 {
		t.Fatalf("busy %d after a forged Busy, want 0", n)
	}
}

// TestRouterGivenUpFailsCoordinator: a router that fails more often than
// supervision restarts it stops for good; the coordinator then reports
// itself failed (so that its process gives up its lease and exits)
// instead of holding a lease with nothing behind it.
func TestRouterGivenUpFailsCoordinator(t *testing.T) {
	r := newRig(t, rigOpts{rows: 10, tablets: 1})
	for n := uint64(1); n <= maxRestarts+1; n++ {
		r.as.Root.Send(r.co.router, &actorenv.Panic{Why: "test: router panic"})
		r.waitFor("the failure handled", func() bool { return r.co.counters.actorFailures.Load() == n })
	}
	r.waitFor("the coordinator failed", func() bool {
		select {
		case <-r.co.Failed():
			return true
		default:
			return false
		}
	})
	if err := r.co.Err(); !errors.Is(err, ErrActorStopped) || !strings.Contains(err.Error(), "router") {
		t.Fatalf("Err = %v, want ErrActorStopped naming the router", err)
	}
}

// TestCloseIsNotAFailure: stopping the actors by closing the
// coordinator leaves Failed open.
func TestCloseIsNotAFailure(t *testing.T) {
	r := newRig(t, rigOpts{rows: 10, tablets: 1})
	r.co.Close()
	if err := r.co.Err(); err != nil {
		t.Fatalf("Err after Close = %v, want nil", err)
	}
}
