package actors

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
	"github.com/scanplane/scanplane/tablets"
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

func TestValidateProbe(t *testing.T) {
	long := strings.Repeat("x", MaxNameLen+1)
	good := &messages.Probe{Id: 1, ReplyTo: &messages.Pid{Address: "nonhost", Id: "a"}, Server: "h:1/0"}
	if err := ValidateProbe(good); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		m     *messages.Probe
		field string
	}{
		{&messages.Probe{Id: 1, Server: "h:1/0"}, "reply_to"},
		{&messages.Probe{Id: 1, ReplyTo: &messages.Pid{Address: long, Id: "a"}}, "reply_to.address"},
		{&messages.Probe{Id: 1, ReplyTo: &messages.Pid{Address: "a", Id: "b"}, Server: long}, "server"},
	} {
		err := ValidateProbe(c.m)
		if err == nil || !strings.Contains(err.Error(), c.field) || !errors.Is(err, ErrBadMessage) {
			t.Errorf("%v: error %v does not name %s", c.m, err, c.field)
		}
	}
	// Unknown fields (a newer prober) are ignored.
	b, err := proto.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	b = protowire.AppendTag(b, 99, protowire.VarintType)
	b = protowire.AppendVarint(b, 7)
	var got messages.Probe
	if err := proto.Unmarshal(b, &got); err != nil || ValidateProbe(&got) != nil || got.GetId() != 1 {
		t.Fatalf("probe with an unknown field: %v %v %+v", err, ValidateProbe(&got), &got)
	}
	for _, c := range []struct {
		m     *messages.ProbeReply
		field string
	}{
		{&messages.ProbeReply{Server: "s"}, "id"},
		{&messages.ProbeReply{Id: 1, Rif: MaxQueueLen + MaxWorkers + 1}, "rif"},
		{&messages.ProbeReply{Id: 1, LatencyUs: -1}, "latency_us"},
		{&messages.ProbeReply{Id: 1, Server: long}, "server"},
	} {
		if err := ValidateProbeReply(c.m); err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%v: error %v does not name %s", c.m, err, c.field)
		}
	}
}

// A scan server answers a probe with its scans in flight (running and
// queued) and, once scans finished, a latency estimate; a bad probe gets
// no answer.
func TestScanServerAnswersProbes(t *testing.T) {
	r := newRig(t, rigOpts{rows: 400, tablets: 2})
	gate := &gatedFetcher{inner: tablets.StoreFetcher{Store: r.store}, open: make(chan struct{})}
	cfg := DefaultScanServerConfig()
	cfg.Workers = 1
	var counters ServerCounters
	srv := r.spawnServer("h1", 0, cfg, gate, &counters)
	rec := r.newProbe()
	isReply := func(id uint64) func(any) bool {
		return func(m any) bool { p, ok := m.(*messages.ProbeReply); return ok && p.GetId() == id }
	}
	r.as.Root.Send(srv, &messages.Probe{Id: 1, ReplyTo: FromPID(rec.pid), Server: "h1/0"})
	p := rec.wait(r, "probe reply 1", isReply(1)).(*messages.ProbeReply)
	if p.GetRif() != 0 || p.GetLatencyUs() != 0 || p.GetServer() != "h1/0" {
		t.Fatalf("idle server answered %+v, want RIF 0, no estimate", p)
	}
	// One scan running (blocked on the gate), two queued.
	for i := 0; i < 3; i++ {
		r.startScan(rec, srv, fmt.Sprintf("q%d", i), 0, 4)
	}
	r.waitFor("one running, two queued", func() bool { return counters.Active.Load() == 1 && counters.QueueLen.Load() == 2 })
	r.as.Root.Send(srv, &messages.Probe{Id: 2, ReplyTo: FromPID(rec.pid)})
	if p := rec.wait(r, "probe reply 2", isReply(2)).(*messages.ProbeReply); p.GetRif() != 3 {
		t.Fatalf("busy server answered RIF %d, want 3", p.GetRif())
	}
	// A bad probe (no reply_to) is dropped, and the server still answers.
	r.as.Root.Send(srv, &messages.Probe{Id: 3})
	close(gate.open)
	for i := 0; i < 3; i++ {
		rec.wait(r, "scan end", isFinished(fmt.Sprintf("q%d", i)))
	}
	r.as.Root.Send(srv, &messages.Probe{Id: 4, ReplyTo: FromPID(rec.pid)})
	if p := rec.wait(r, "probe reply 4", isReply(4)).(*messages.ProbeReply); p.GetRif() != 0 || p.GetLatencyUs() <= 0 {
		t.Fatalf("after three scans answered %+v, want RIF 0 and a latency estimate", p)
	}
	if n := counters.Probes.Load(); n != 3 {
		t.Fatalf("probes answered %d, want 3 (the bad one is not)", n)
	}
}

// spawnServer is addServer with the caller's counters.
func (r *rig) spawnServer(host string, idx int, cfg ScanServerConfig, fetcher tablets.BlockFetcher, counters *ServerCounters) *actor.PID {
	r.t.Helper()
	if fetcher == nil {
		fetcher = tablets.StoreFetcher{Store: r.store}
	}
	id := fmt.Sprintf("%s/%d", host, idx)
	pid, err := r.as.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor {
		return newScanServerActor(r.life, id, host, cfg, fetcher, r.as, counters, nil, DiscardLogger())
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
	counters := make([]*ServerCounters, 3)
	for i := range counters {
		cfg := DefaultScanServerConfig()
		if i == 2 {
			cfg.Fault.SlowFactor, cfg.Fault.SlowFloor = 30, time.Millisecond
		}
		counters[i] = &ServerCounters{}
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
