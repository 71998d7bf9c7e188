package coordinator

import (
	"fmt"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil/servertest"
)

// Probes are real: a coordinator with the prequal policy sends Probe
// messages to the scan servers, every server answers, the answers reach
// the pool, and routing follows them: of three servers, one reads blocks
// 30× slower; its latency estimate shows it and prequal sends it few
// scans (random would send a third). Every scan returns the tablet's rows.
func TestPrequalProbesAreReal(t *testing.T) {
	r := newRig(t, rigOpts{rows: 2000, tablets: 4, profiles: `[{"isDefault":true,"policy":"prequal",
	  "attemptPlans":[{"servers":"100%","busyTimeout":"10s"}]}]`})
	counters := make([]*servertest.Counts, 3)
	for i := range counters {
		cfg := servertest.Default()
		if i == 2 {
			cfg.SlowFactor, cfg.SlowFloor = 30, time.Millisecond
		}
		counters[i] = &servertest.Counts{}
		r.spawnServer(fmt.Sprintf("h%d", i), 0, cfg, servertest.Deps{Counts: counters[i]})
	}
	const scans = 60
	for i := 0; i < scans; i++ {
		idx := i % 4
		s := r.scan(r.request(idx))
		r.checkRows(s, idx)
	}
	st := r.co.Status()
	for i, c := range counters {
		if c.Probes() == 0 {
			t.Errorf("server h%d answered no probe", i)
		}
	}
	if st.GetProbesSent() < scans || st.GetProbeReplies() == 0 || st.GetProbeReplies() > st.GetProbesSent() {
		t.Fatalf("probes sent %d, replies %d (want ≥ %d sent, some replies, no more replies than probes)", st.GetProbesSent(), st.GetProbeReplies(), scans)
	}
	var answered uint64
	for _, c := range counters {
		answered += c.Probes()
	}
	if answered > st.GetProbesSent() {
		t.Fatalf("servers answered %d probes, the coordinator sent %d", answered, st.GetProbesSent())
	}
	slow := counters[2].Scans()
	if slow*6 > scans {
		t.Fatalf("the slow server ran %d of %d scans (per server: %d %d %d); prequal should avoid it", slow, scans,
			counters[0].Scans(), counters[1].Scans(), slow)
	}
	t.Logf("probes sent %d, replies pooled %d; scans per server %d %d %d", st.GetProbesSent(), st.GetProbeReplies(),
		counters[0].Scans(), counters[1].Scans(), slow)
}
