package coordinator

import (
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/internal/testutil/servertest"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
)

// startTo sends req straight to pid (a client that knows, or thinks it
// knows, the tablet actor).
func (r *rig) startTo(req *messages.ScanRequest, pid *actor.PID) *rigScan {
	s := &rigScan{req: req, done: make(chan struct{})}
	r.as.Root.Send(r.client, &rigStartScan{scan: s, router: r.co.router, to: pid})
	return s
}

// learnTabletActor scans tablet idx through the router, asking for the
// tablet actor's PID, and returns it.
func (r *rig) learnTabletActor(idx int) *actor.PID {
	r.t.Helper()
	s := r.wait(r.startVia(r.request(idx), false, true))
	r.checkRows(s, idx)
	if len(s.routed) != 1 || s.routed[0].GetTabletActor() == nil {
		r.t.Fatalf("ScanRouted %v: want one, with the tablet actor", s.routed)
	}
	pid := wire.ToPID(s.routed[0].GetTabletActor())
	if s.routed[0].GetOwner() != pid.Address || !strings.HasPrefix(pid.Id, wire.RouterName+"/") {
		r.t.Fatalf("ScanRouted %v: not a tablet actor of this coordinator", s.routed[0])
	}
	return pid
}

// A client that asked learns the tablet actor's PID; its next
// request goes straight there (not through the router) and returns the
// tablet's rows; the actor sends no more ScanRouted to a request that did
// not ask.
func TestDirectScanRequest(t *testing.T) {
	r := newRig(t, rigOpts{rows: 1000, tablets: 2})
	r.addServer("h1", 0, servertest.Default(), nil)
	pid := r.learnTabletActor(0)
	if running := r.tabletPID(0); !running.Equal(pid) {
		t.Fatalf("tablet actor %v runs, ScanRouted said %v", running, pid)
	}
	for i := range 3 {
		s := r.wait(r.startVia(r.request(0), false, true))
		r.checkRows(s, 0)
		if !s.sentTo.Equal(pid) || len(s.routed) != 0 {
			t.Fatalf("scan %d went to %v with ScanRouted %v; want straight to %v, none", i, s.sentTo, s.routed, pid)
		}
	}
	if got := r.co.counters.direct.Load(); got != 3 {
		t.Fatalf("%d direct requests counted, want 3", got)
	}
	if r.co.counters.rerouted.Load() != 0 {
		t.Fatal("nothing should have been rerouted: the actor runs")
	}
}

// A direct request is validated as the router validates it, and
// one for another tablet (or a moved one) goes on to the router, which
// serves it right.
func TestDirectScanRequestChecked(t *testing.T) {
	r := newRig(t, rigOpts{rows: 1000, tablets: 2})
	r.addServer("h1", 0, servertest.Default(), nil)
	pid := r.learnTabletActor(0)

	bad := r.request(0)
	bad.Range = &messages.KeyRange{Start: []byte("b"), End: []byte("a")}
	s := r.wait(r.startTo(bad, pid))
	if s.err == nil || s.err.GetCode() != messages.ErrorCode_ERROR_CODE_BAD_REQUEST || !strings.Contains(s.err.GetMessage(), "range") {
		t.Fatalf("bad direct request: got %v, want BAD_REQUEST naming the range", s.err)
	}

	// Tablet 1's request sent to tablet 0's actor: tablet 1's rows.
	s = r.wait(r.startTo(r.request(1), pid))
	r.checkRows(s, 1)

	// A moved actor hands direct requests to the router (here nobody else
	// owns the tablet, so the router gives it back as a routed request).
	r.as.Root.Send(pid, &movedAway{})
	s = r.wait(r.startTo(r.request(0), pid))
	r.checkRows(s, 0)
	if got := r.co.counters.direct.Load(); got != 3 {
		t.Fatalf("%d direct requests counted, want 3", got)
	}
}

// A request sent to a tablet actor that has stopped reaches the
// router (a dead letter, rerouted), is served by a new actor, and the
// client learns the new actor's PID from it.
func TestDirectRequestToStoppedTabletActor(t *testing.T) {
	r := newRig(t, rigOpts{rows: 1000, tablets: 1})
	r.addServer("h1", 0, servertest.Default(), nil)
	old := r.learnTabletActor(0)
	if err := r.as.Root.StopFuture(old).Wait(); err != nil {
		t.Fatal(err)
	}
	r.waitFor("the tablet actor to be gone", func() bool { return r.co.counters.tabletActors.Load() == 0 })
	s := r.wait(r.startVia(r.request(0), false, true))
	r.checkRows(s, 0)
	if !s.sentTo.Equal(old) {
		t.Fatalf("request went to %v, want the stale %v", s.sentTo, old)
	}
	if r.co.counters.rerouted.Load() == 0 {
		t.Fatal("the request was not counted as rerouted")
	}
	if len(s.routed) != 1 || s.routed[0].GetTabletActor() == nil || wire.ToPID(s.routed[0].GetTabletActor()).Equal(old) {
		t.Fatalf("ScanRouted %v: want the new tablet actor's PID", s.routed)
	}
	// The client's ScanDone went to the stale PID too (it had not learnt
	// the new one when the scan finished, or had): nothing is left over.
	r.waitFor("no flow left", func() bool { return r.co.counters.flows.Load() == 0 })
}

// BenchmarkScanPath: one-row scans of a cached block through the
// in-process rig (one actor system, no network: the coordinator's own
// work, the scan server's and the rig client's), sent through the router
// (router) or, once the rig client learnt the tablet actor, straight to it
// (direct), alternating in blocks of 200 so both see the same machine.
// Reported per path: p50-µs and allocs/scan of the whole process.
func BenchmarkScanPath(b *testing.B) {
	r := newRig(b, rigOpts{rows: 4000, tablets: 8, noDone: true}) // as client.Client
	r.addServer("h1", 0, servertest.Default(), nil)
	key := func(i int) []byte { return r.truth[(i*7919)%len(r.truth)].Key }
	oneRow := func(i int) *messages.ScanRequest {
		k := key(i)
		req := r.request(0)
		idx := tablets.TabletFor(r.table.GetSplitPoints(), k)
		tm := r.table.GetTablets()[idx]
		req.Tablet = tm.GetRef()
		req.Range = &messages.KeyRange{Start: k, End: append(k[:len(k):len(k)], 0)}
		return req
	}
	run := func(i int, direct bool) time.Duration {
		t0 := time.Now()
		s := r.wait(r.startVia(oneRow(i), false, direct))
		if s.err != nil || s.protoErr != "" || len(s.rows) != 1 {
			b.Fatalf("scan %d: err %v %s, %d rows", i, s.err, s.protoErr, len(s.rows))
		}
		return time.Since(t0)
	}
	for i := range 400 { // warm: every tablet actor spawned and learnt, blocks cached
		run(i, i%2 == 0)
	}
	var lat [2][]time.Duration
	var allocs [2]uint64
	const block = 200
	b.ResetTimer()
	for done := 0; done < b.N; done += block {
		for p, direct := range []bool{false, true} {
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			for i := done; i < min(done+block, b.N); i++ {
				lat[p] = append(lat[p], run(i, direct))
			}
			runtime.ReadMemStats(&m1)
			allocs[p] += m1.Mallocs - m0.Mallocs
		}
	}
	b.StopTimer()
	for p, name := range []string{"router", "direct"} {
		slices.Sort(lat[p])
		b.ReportMetric(float64(lat[p][len(lat[p])/2].Nanoseconds())/1e3, name+"-p50-µs")
		b.ReportMetric(float64(allocs[p])/float64(len(lat[p])), name+"-allocs/scan")
	}
	if r.co.counters.direct.Load() < uint64(b.N) {
		b.Fatalf("%d direct requests for %d direct scans", r.co.counters.direct.Load(), b.N)
	}
}
