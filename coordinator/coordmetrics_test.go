package coordinator

import (
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/servertest"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// gathered is one registry's metrics by name.
type gathered map[string]*dto.MetricFamily

func gatherCoord(t *testing.T, co *Coordinator) gathered {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(co.metrics)
	reg.MustRegister(CoordinatorCollectors(func() *Coordinator { return co })...)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	g := gathered{}
	for _, f := range fams {
		g[f.GetName()] = f
	}
	return g
}

// series returns the metrics of name whose labels include want.
func (g gathered) series(name string, want map[string]string) []*dto.Metric {
	var out []*dto.Metric
	f := g[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		for k, v := range want {
			if metricLabel(m, k) != v {
				continue next
			}
		}
		out = append(out, m)
	}
	return out
}

// sum adds the counter or gauge values of the matching series.
func (g gathered) sum(name string, want map[string]string) float64 {
	s := 0.0
	for _, m := range g.series(name, want) {
		if m.Counter != nil {
			s += m.GetCounter().GetValue()
		} else {
			s += m.GetGauge().GetValue()
		}
	}
	return s
}

// hist returns the sample count and sum of the one matching histogram.
func (g gathered) hist(t *testing.T, name string, want map[string]string) (uint64, float64) {
	t.Helper()
	ms := g.series(name, want)
	switch len(ms) {
	case 0:
		return 0, 0
	case 1:
		h := ms[0].GetHistogram()
		if len(h.GetBucket()) == 0 {
			t.Errorf("%s%v: no classic buckets", name, want)
		}
		if h.GetSchema() == 0 && h.GetZeroThreshold() == 0 {
			t.Errorf("%s%v: not a native histogram (schema %d, zero threshold %v)", name, want, h.GetSchema(), h.GetZeroThreshold())
		}
		return h.GetSampleCount(), h.GetSampleSum()
	}
	t.Fatalf("%s%v: %d series", name, want, len(ms))
	return 0, 0
}

func metricLabel(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// The scan histograms count every request that reached a tablet actor
// once, under its profile, policy and outcome, with durations bounded by
// what the client timed; the per-server series add up to the
// coordinator's own counters, carry host and zone, and go once the server
// is forgotten.
func TestCoordMetricsObserveScans(t *testing.T) {
	r := newRig(t, rigOpts{rows: 3000, tablets: 2, profiles: strings.Replace(batchProfiles, "%WAIT%", `"timeToWaitForScanServers": "0s",`, 1),
		coord: func(c *CoordinatorConfig) { c.HostForget = 300 * time.Millisecond }})
	r.addServer("h1", 0, servertest.Default(), nil)
	r.addServer("h2", 0, servertest.Default(), nil)
	def := r.co.Profiles().ForHints(nil)

	const okScans, failedScans = 6, 2
	var clientTotal time.Duration
	for i := range okScans {
		start := time.Now()
		s := r.scan(r.request(i % 2))
		// The flow ends when the server's ScanFinished reaches the tablet
		// actor, which may be after the client has it.
		r.waitFor("the flow to end", func() bool { return r.co.counters.flows.Load() == 0 })
		clientTotal += time.Since(start)
		r.checkRows(s, i%2)
	}
	for range failedScans {
		req := r.request(0)
		req.Hints = map[string]string{"scan_type": "batch"}
		start := time.Now()
		s := r.scan(req)
		r.waitFor("the flow to end", func() bool { return r.co.counters.flows.Load() == 0 })
		clientTotal += time.Since(start)
		if s.err.GetCode() != messages.ErrorCode_ERROR_CODE_NO_SERVERS {
			t.Fatalf("batch scan: %v, want NO_SERVERS", s.err)
		}
	}
	r.waitFor("every flow to end", func() bool { return r.co.counters.flows.Load() == 0 })
	r.waitFor("no attempt in flight in the status", func() bool {
		n := uint32(0)
		for _, s := range r.co.Status().GetServers() {
			n += s.GetInFlight()
		}
		return n == 0
	})

	g := gatherCoord(t, r.co)
	okLabels := map[string]string{"profile": def.Name, "policy": "adaptive", "outcome": OutcomeOK}
	n, scanSum := g.hist(t, "scanplane_coordinator_scan_seconds", okLabels)
	if n != okScans {
		t.Errorf("scan_seconds%v: %d samples, want %d", okLabels, n, okScans)
	}
	fn, firstSum := g.hist(t, "scanplane_coordinator_scan_first_row_seconds", okLabels)
	if fn != okScans {
		t.Errorf("scan_first_row_seconds%v: %d samples, want %d", okLabels, fn, okScans)
	}
	if !(firstSum > 0 && firstSum <= scanSum) {
		t.Errorf("first row sum %v, scan sum %v: want 0 < first row <= scan", firstSum, scanSum)
	}
	failLabels := map[string]string{"profile": "batch", "policy": "clickhouse-random", "outcome": "no_servers"}
	n, failSum := g.hist(t, "scanplane_coordinator_scan_seconds", failLabels)
	if n != failedScans {
		t.Errorf("scan_seconds%v: %d samples, want %d", failLabels, n, failedScans)
	}
	if got := scanSum + failSum; got > clientTotal.Seconds() {
		t.Errorf("scan_seconds add up to %v, more than the %v from the client's requests to the flows' ends", got, clientTotal)
	}
	if ms := g.series("scanplane_coordinator_scan_first_row_seconds", map[string]string{"outcome": "no_servers"}); len(ms) != 0 {
		t.Errorf("requests that delivered nothing have a first-row sample: %v", ms)
	}
	if got := len(g.series("scanplane_coordinator_scan_seconds", nil)); got != 2 {
		t.Errorf("scan_seconds: %d series, want 2 (ok and no_servers)", got)
	}

	// Selection: one decision per dispatch of the adaptive profile (no
	// hedge was declined: adaptive hedges only slow attempts), one per
	// failed batch request.
	dispatches := float64(r.co.counters.dispatches.Load())
	if n, _ := g.hist(t, "scanplane_coordinator_selection_seconds", map[string]string{"policy": "adaptive"}); float64(n) < dispatches || n == 0 {
		t.Errorf("selection_seconds{adaptive}: %d decisions for %v dispatches", n, dispatches)
	}
	if n, _ := g.hist(t, "scanplane_coordinator_selection_seconds", map[string]string{"policy": "clickhouse-random"}); n != failedScans {
		t.Errorf("selection_seconds{clickhouse-random}: %d decisions, want %d", n, failedScans)
	}

	// Per server: the sums are the coordinator's own counters.
	for name, want := range map[string]float64{
		"scanplane_coordinator_server_dispatches_total": dispatches,
		"scanplane_coordinator_server_hedges_total":     float64(r.co.counters.hedges.Load()),
		"scanplane_coordinator_server_busy_total":       float64(r.co.counters.busy.Load()),
		"scanplane_coordinator_server_timeouts_total":   float64(r.co.counters.timeouts.Load()),
		"scanplane_coordinator_server_in_flight":        0,
		"scanplane_coordinator_server_alive":            2,
	} {
		if got := g.sum(name, nil); got != want {
			t.Errorf("%s adds up to %v, want %v", name, got, want)
		}
	}
	if dispatches < okScans {
		t.Errorf("%v dispatches for %d scans", dispatches, okScans)
	}
	for _, host := range []string{"h1", "h2"} {
		ms := g.series("scanplane_coordinator_server_dispatches_total", map[string]string{"server": host + "/0", "host": host, "zone": "z"})
		if len(ms) != 1 {
			t.Errorf("server %s/0: %d dispatch series with host %s zone z", host, len(ms), host)
		}
	}
	if lat := g.sum("scanplane_coordinator_server_start_latency_seconds", nil); !(lat > 0) {
		t.Errorf("start latency estimates add up to %v, want > 0 after %d scans", lat, okScans)
	}
	rebuilds := g.sum("scanplane_coordinator_load_view_rebuilds_total", nil)
	if n, _ := g.hist(t, "scanplane_coordinator_load_view_rebuild_seconds", nil); rebuilds < 1 || float64(n) != rebuilds {
		t.Errorf("%v rebuilds, %d rebuild times", rebuilds, n)
	}
	for _, op := range natsOps {
		if ms := g.series("scanplane_coordinator_nats_errors_total", map[string]string{"op": op}); len(ms) != 1 || ms[0].GetCounter().GetValue() != 0 {
			t.Errorf("nats_errors_total{op=%q}: %v, want one series at 0", op, ms)
		}
	}

	// h2's server leaves: alive 0, then its series go once forgotten.
	r.as.Root.Send(r.co.registry, &messages.Heartbeat{Host: "h2", Server: "h2/0", Leaving: true})
	r.waitFor("h2/0 alive 0", func() bool {
		ms := gatherCoord(t, r.co).series("scanplane_coordinator_server_alive", map[string]string{"server": "h2/0"})
		return len(ms) == 1 && ms[0].GetGauge().GetValue() == 0
	})
	r.waitFor("h2/0's series to go (HostForget)", func() bool {
		g := gatherCoord(t, r.co)
		return len(g.series("scanplane_coordinator_server_dispatches_total", map[string]string{"server": "h2/0"})) == 0 &&
			len(g.series("scanplane_coordinator_server_dispatches_total", map[string]string{"server": "h1/0"})) == 1
	})
}

// Busy answers are counted against the server that gave them, and add up
// to the coordinator's busy counter.
func TestCoordMetricsServerBusy(t *testing.T) {
	r := newRig(t, rigOpts{rows: 2000, tablets: 2})
	gate := testutil.NewGatedFetcher(tablets.StoreFetcher{Store: r.store})
	cfg := servertest.Default()
	cfg.Workers, cfg.MaxQueue = 1, 0
	r.addServer("h1", 0, cfg, gate)
	a := r.start(r.request(0), false)
	r.waitFor("the first scan to hold the worker", func() bool { return r.co.counters.dispatches.Load() >= 1 })
	b := r.start(r.request(1), false)
	r.waitFor("a busy answer", func() bool { return r.co.counters.busy.Load() >= 1 })
	close(gate.Open)
	for i, s := range []*rigScan{a, b} {
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("scan %d: no end", i)
		}
		r.checkRows(s, i)
	}
	r.waitFor("every flow to end", func() bool { return r.co.counters.flows.Load() == 0 })
	r.waitFor("the busy answers in the status", func() bool {
		return gatherCoord(t, r.co).sum("scanplane_coordinator_server_busy_total", map[string]string{"server": "h1/0", "host": "h1"}) ==
			float64(r.co.counters.busy.Load())
	})
	g := gatherCoord(t, r.co)
	if d, busy := g.sum("scanplane_coordinator_server_dispatches_total", nil), g.sum("scanplane_coordinator_server_busy_total", nil); d < busy+2 {
		t.Errorf("%v dispatches, %v busy: want at least busy + 2", d, busy)
	}
	if n, _ := g.hist(t, "scanplane_coordinator_scan_seconds", map[string]string{"outcome": OutcomeOK}); n != 2 {
		t.Errorf("scan_seconds{ok}: %d samples, want 2", n)
	}
}

func TestErrorOutcome(t *testing.T) {
	for code, want := range map[messages.ErrorCode]string{
		messages.ErrorCode_ERROR_CODE_NO_SERVERS:        "no_servers",
		messages.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED: "deadline_exceeded",
		messages.ErrorCode_ERROR_CODE_SHUTTING_DOWN:     "shutting_down",
		messages.ErrorCode_ERROR_CODE_UNSPECIFIED:       "internal",
		messages.ErrorCode(999):                         "internal",
	} {
		if got := errorOutcome(code); got != want {
			t.Errorf("errorOutcome(%v) = %q, want %q", code, got, want)
		}
	}
}

// TestNATSErrorsCountedOnce: a failed NATS operation is counted in one
// series only, scanplane_coordinator_nats_errors_total{op}: no other
// family of the coordinator counts the errors of an op.
func TestNATSErrorsCountedOnce(t *testing.T) {
	names := map[string]bool{}
	collectors := append(CoordinatorCollectors(func() *Coordinator { return nil }), NewCoordMetrics())
	for _, c := range collectors {
		ch := make(chan *prometheus.Desc, 64)
		go func() {
			c.Describe(ch)
			close(ch)
		}()
		for d := range ch {
			s := d.String()
			if i := strings.Index(s, `fqName: "`); i >= 0 {
				rest := s[i+len(`fqName: "`):]
				names[rest[:strings.Index(rest, `"`)]] = true
			}
		}
	}
	if !names[coordPrefix+"nats_errors_total"] {
		t.Fatalf("no %snats_errors_total among %d families", coordPrefix, len(names))
	}
	for _, op := range natsOps {
		for name := range names {
			if strings.HasPrefix(name, coordPrefix) && strings.Contains(name, op+"_errors") {
				t.Errorf("%s counts what nats_errors_total{op=%q} counts", name, op)
			}
		}
	}
}

// TestServerSeriesSurviveRestart: the per-server series name a scan
// server "<host>/<index>", not by its id (which holds the process's
// ephemeral actor address), so a server restarted on another address
// keeps its series; while its predecessor is still in the view (left,
// not yet forgotten) the series show the live one, once, and
// server_info gives the live one's address.
func TestServerSeriesSurviveRestart(t *testing.T) {
	r := newRig(t, rigOpts{rows: 100, tablets: 1})
	old, cur := "127.0.0.1:34083", "127.0.0.1:41557"
	r.heartbeat("h3", old+"/0", actor.NewPID(old, "scanserver-0"), "incA", 2)
	r.waitFor("the first incarnation in the view", func() bool { return len(r.co.Status().GetServers()) == 1 })
	before := gatherCoord(t, r.co)
	if ms := before.series("scanplane_coordinator_server_alive", map[string]string{"server": "h3/0", "host": "h3"}); len(ms) != 1 {
		t.Fatalf("server_alive{server=h3/0}: %v", ms)
	}
	r.as.Root.Send(r.co.registry, &messages.Heartbeat{Host: "h3", Server: old + "/0", Leaving: true})
	r.heartbeat("h3", cur+"/0", actor.NewPID(cur, "scanserver-0"), "incB", 2)
	r.waitFor("the second incarnation in the view", func() bool {
		for _, s := range r.co.Status().GetServers() {
			if s.GetId() == cur+"/0" && s.GetAlive() {
				return true
			}
		}
		return false
	})
	g := gatherCoord(t, r.co) // a pedantic registry: two series with one label set fail here
	for name, f := range g {
		if !strings.HasPrefix(name, "scanplane_coordinator_server_") {
			continue
		}
		for _, m := range f.GetMetric() {
			if s := metricLabel(m, "server"); s != "h3/0" {
				t.Errorf("%s{server=%q}, want h3/0", name, s)
			}
		}
		if len(f.GetMetric()) != 1 {
			t.Errorf("%s: %d series, want 1", name, len(f.GetMetric()))
		}
	}
	if ms := g.series("scanplane_coordinator_server_alive", map[string]string{"server": "h3/0"}); len(ms) != 1 || ms[0].GetGauge().GetValue() != 1 {
		t.Errorf("server_alive after the restart: %v, want the live incarnation's 1", ms)
	}
	if ms := g.series("scanplane_coordinator_server_info", map[string]string{"server": "h3/0", "address": cur}); len(ms) != 1 {
		t.Errorf("server_info: %v, want address %s", g["scanplane_coordinator_server_info"].GetMetric(), cur)
	}
}
