package coordinator

import (
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/scanserver"
	"github.com/scanplane/scanplane/selection"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
)

// A scan server answers a probe with its scans in flight (running and
// queued) and, once scans finished, a latency estimate; a bad probe gets
// no answer.
func TestScanServerAnswersProbes(t *testing.T) {
	r := newRig(t, rigOpts{rows: 400, tablets: 2})
	gate := testutil.NewGatedFetcher(tablets.StoreFetcher{Store: r.store})
	cfg := scanserver.DefaultScanServerConfig()
	cfg.Workers = 1
	var counters scanserver.ServerCounters
	srv := r.spawnServer("h1", 0, cfg, gate, &counters)
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

// spawnServer is addServer with the caller's counters.
func (r *rig) spawnServer(host string, idx int, cfg scanserver.ScanServerConfig, fetcher tablets.BlockFetcher, counters *scanserver.ServerCounters) *actor.PID {
	r.t.Helper()
	if fetcher == nil {
		fetcher = tablets.StoreFetcher{Store: r.store}
	}
	id := fmt.Sprintf("%s/%d", host, idx)
	pid, err := r.as.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor {
		return scanserver.NewScanServerActor(cfg, scanserver.ServerDeps{ID: id, Host: host, Fetcher: fetcher, System: r.as, Life: r.life, Counters: counters})
	}), fmt.Sprintf("srv-%s-%d", host, idx))
	if err != nil {
		r.t.Fatal(err)
	}
	r.servers = append(r.servers, pid)
	r.heartbeat(host, id, pid, "inc1", cfg.Workers)
	r.waitFor("server "+id+" in the view", func() bool {
		s := r.co.board.View().Server(selection.ServerID(id))
		return s != nil && s.Alive
	})
	return pid
}

// Probes are real: a coordinator with the prequal policy sends Probe
// messages to the scan servers, every server answers, the answers reach
// the pool, and routing follows them: of three servers, one reads blocks
// 30× slower; its latency estimate shows it and prequal sends it few
// scans (random would send a third). Every scan returns the tablet's rows.
func TestPrequalProbesAreReal(t *testing.T) {
	r := newRig(t, rigOpts{rows: 2000, tablets: 4, profiles: `[{"isDefault":true,"policy":"prequal",
	  "attemptPlans":[{"servers":"100%","busyTimeout":"10s"}]}]`})
	counters := make([]*scanserver.ServerCounters, 3)
	for i := range counters {
		cfg := scanserver.DefaultScanServerConfig()
		if i == 2 {
			cfg.Fault.SlowFactor, cfg.Fault.SlowFloor = 30, time.Millisecond
		}
		counters[i] = &scanserver.ServerCounters{}
		r.spawnServer(fmt.Sprintf("h%d", i), 0, cfg, nil, counters[i])
	}
	const scans = 60
	for i := 0; i < scans; i++ {
		idx := i % 4
		s := r.scan(r.request(idx))
		r.checkRows(s, idx)
	}
	st := r.co.Status()
	for i, c := range counters {
		if c.Probes.Load() == 0 {
			t.Errorf("server h%d answered no probe", i)
		}
	}
	if st.GetProbesSent() < scans || st.GetProbeReplies() == 0 || st.GetProbeReplies() > st.GetProbesSent() {
		t.Fatalf("probes sent %d, replies %d (want ≥ %d sent, some replies, no more replies than probes)", st.GetProbesSent(), st.GetProbeReplies(), scans)
	}
	var answered uint64
	for _, c := range counters {
		answered += c.Probes.Load()
	}
	if answered > st.GetProbesSent() {
		t.Fatalf("servers answered %d probes, the coordinator sent %d", answered, st.GetProbesSent())
	}
	slow := counters[2].Scans.Load()
	if slow*6 > scans {
		t.Fatalf("the slow server ran %d of %d scans (per server: %d %d %d); prequal should avoid it", slow, scans,
			counters[0].Scans.Load(), counters[1].Scans.Load(), slow)
	}
	t.Logf("probes sent %d, replies pooled %d; scans per server %d %d %d", st.GetProbesSent(), st.GetProbeReplies(),
		counters[0].Scans.Load(), counters[1].Scans.Load(), slow)
}
