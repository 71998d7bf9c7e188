package scanserver

import (
	"fmt"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
)

func TestLatencyEstimator(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var e latencyEstimator
	if got := e.estimate(t0, 3); got != 0 {
		t.Fatalf("no sample: %v, want 0", got)
	}
	ms := time.Millisecond
	for i := 0; i < 8; i++ {
		e.add(t0, 0, time.Duration(10+i)*ms) // 10..17 ms at RIF 0
		e.add(t0, 5, time.Duration(100+i)*ms)
	}
	for _, c := range []struct {
		rif  int
		want time.Duration
	}{
		{0, 13500 * time.Microsecond}, // median of 10..17
		{1, 13500 * time.Microsecond}, // RIF 0 is nearest
		{4, 103500 * time.Microsecond},
		{5, 103500 * time.Microsecond},
		{50, 103500 * time.Microsecond},
	} {
		if got := e.estimate(t0, c.rif); got != c.want {
			t.Errorf("estimate(%d) = %v, want %v", c.rif, got, c.want)
		}
	}
	e.add(t0, 2, 50*ms)
	e.add(t0, 2, 60*ms)
	e.add(t0, 2, 70*ms)
	// Nearest 8 to RIF 2: the three at 2, then five at distance 2 (RIF 0,
	// newest first: 17, 16, 15, 14, 13 ms) — RIF 5 is 3 away.
	if got, want := e.estimate(t0, 2), 16500*time.Microsecond; got != want {
		t.Errorf("estimate(2) = %v, want %v (median of 13..17, 50, 60, 70 ms)", got, want)
	}
	// Old samples leave: after probeSamples newer ones only those count.
	for i := 0; i < probeSamples; i++ {
		e.add(t0, 9, time.Second)
	}
	if got := e.estimate(t0, 0); got != time.Second {
		t.Errorf("after %d new samples estimate(0) = %v, want 1s", probeSamples, got)
	}
	// Samples older than probeSampleAge do not count: an idle server
	// forgets its slow scans and reports no estimate.
	e.add(t0.Add(probeSampleAge), 0, 5*ms)
	if got := e.estimate(t0.Add(probeSampleAge), 0); got != time.Second {
		t.Errorf("all samples young: %v, want 1s (8 nearest: the 1s ones)", got)
	}
	if got := e.estimate(t0.Add(probeSampleAge+time.Millisecond), 0); got != 5*ms {
		t.Errorf("only the newest sample young: %v, want 5ms", got)
	}
	if got := e.estimate(t0.Add(3*probeSampleAge), 0); got != 0 {
		t.Errorf("no young sample: %v, want 0", got)
	}
}

// A scan server answers a probe with its scans in flight (running and
// queued) and, once scans finished, a latency estimate; a bad probe gets
// no answer.
func TestScanServerAnswersProbes(t *testing.T) {
	r := newRig(t, rigOpts{rows: 400, tablets: 2})
	gate := testutil.NewGatedFetcher(tablets.StoreFetcher{Store: r.store})
	cfg := DefaultScanServerConfig()
	cfg.Workers = 1
	var counters ServerCounters
	srv := r.addServerCounting("h1", 0, cfg, gate, &counters)
	rec := r.newProbe()
	isReply := func(id uint64) func(any) bool {
		return func(m any) bool { p, ok := m.(*messages.ProbeReply); return ok && p.GetId() == id }
	}
	r.as.Root.Send(srv, &messages.Probe{Id: 1, ReplyTo: wire.FromPID(rec.pid), Server: "h1/0"})
	p := rec.wait(r, "probe reply 1", isReply(1)).(*messages.ProbeReply)
	if p.GetRif() != 0 || p.GetLatencyUs() != 0 || p.GetServer() != "h1/0" {
		t.Fatalf("idle server answered %+v, want RIF 0, no estimate", p)
	}
	// One scan running (blocked on the gate), two queued. The probe
	// acknowledges no batch: a window of MaxWindow lets every scan end.
	for i := 0; i < 3; i++ {
		r.startScan(rec, srv, fmt.Sprintf("q%d", i), 0, wire.MaxWindow)
	}
	r.waitFor("one running, two queued", func() bool { return counters.Active.Load() == 1 && counters.QueueLen.Load() == 2 })
	r.as.Root.Send(srv, &messages.Probe{Id: 2, ReplyTo: wire.FromPID(rec.pid)})
	if p := rec.wait(r, "probe reply 2", isReply(2)).(*messages.ProbeReply); p.GetRif() != 3 {
		t.Fatalf("busy server answered RIF %d, want 3", p.GetRif())
	}
	// A bad probe (no reply_to) is dropped, and the server still answers.
	r.as.Root.Send(srv, &messages.Probe{Id: 3})
	close(gate.Open)
	for i := 0; i < 3; i++ {
		rec.wait(r, "scan end", isFinished(fmt.Sprintf("q%d", i)))
	}
	r.as.Root.Send(srv, &messages.Probe{Id: 4, ReplyTo: wire.FromPID(rec.pid)})
	if p := rec.wait(r, "probe reply 4", isReply(4)).(*messages.ProbeReply); p.GetRif() != 0 || p.GetLatencyUs() <= 0 {
		t.Fatalf("after three scans answered %+v, want RIF 0 and a latency estimate", p)
	}
	if n := counters.Probes.Load(); n != 3 {
		t.Fatalf("probes answered %d, want 3 (the bad one is not)", n)
	}
}
