package coordinator

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/scanplane/scanplane/internal/metrics"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
	"github.com/scanplane/scanplane/wire"
)

// Coordinator metrics beyond the plain counters of CoordinatorCollectors
// (docs/operations.md, "Metrics"). Names and labels are part of the operations
// interface: deploy/prometheus/alerts.yml and the Grafana dashboard use
// them, and deploy/deploytest fails when one of their names is missing.
//
// Cardinality. The scan histograms are labelled by profile and policy (as
// many as the profiles file has) and outcome (ok, cancelled, or one of the
// scan error codes in lower case: at most numOutcomes values). The
// selection histogram is labelled by policy. The per-server series
// (scanplane_coordinator_server_*) carry server (the stable
// "<host>/<index>", wire.ServerLabel; server_info maps it to the server's
// current actor address), host and zone and exist
// for the servers in this coordinator's view: a server that leaves the
// view keeps its series (alive 0) until its host actor forgets it,
// CoordinatorConfig.HostForget (1m) later, and then they go; at most
// MaxHosts host actors exist. So the series of a cluster are its live
// servers plus those that left in the last HostForget; a server restarted
// on another address while its predecessor is still in the view shares
// its predecessor's series, which show the live one (else the latest
// heartbeat). The NATS error
// counter is labelled by op (natsOps).
const coordPrefix = "scanplane_coordinator_"

// NATS operations of scanplane_coordinator_nats_errors_total{op}.
const (
	NATSOpPublish    = "publish"    // publishing a load signal
	NATSOpMetaRead   = "meta_read"  // reading table metadata from JetStream (not found is no error)
	NATSOpMetaWatch  = "meta_watch" // starting the watch of current table generations
	NATSOpAsync      = "async"      // an asynchronous NATS error (slow consumer, permissions)
	NATSOpDisconnect = "disconnect" // the connection to NATS was lost (it reconnects by itself)
)

var natsOps = []string{NATSOpPublish, NATSOpMetaRead, NATSOpMetaWatch, NATSOpAsync, NATSOpDisconnect}

// Outcomes of a scan request that is not an error (scan histograms).
const (
	OutcomeOK        = "ok"
	OutcomeCancelled = "cancelled" // the client abandoned the scan
)

// CoordMetrics holds the coordinator's latency histograms and error
// counters. They outlive one Coordinator: cmd/coordinator makes one,
// registers it, and passes it (CoordinatorConfig.Metrics) to every
// coordinator it starts, so rejoining the cluster as a new member does not
// reset them. The actors only observe into it. Safe for concurrent use.
type CoordMetrics struct {
	firstRow, scan *prometheus.HistogramVec // profile, policy, outcome
	selection      *prometheus.HistogramVec // policy
	rebuild        prometheus.Histogram
	rebuilds       prometheus.Counter
	natsErrors     *prometheus.CounterVec // op
}

// NewCoordMetrics returns unregistered coordinator metrics.
func NewCoordMetrics() *CoordMetrics {
	scanLabels := []string{"profile", "policy", "outcome"}
	m := &CoordMetrics{
		firstRow: prometheus.NewHistogramVec(metrics.SecondsHistogramOpts(coordPrefix+"scan_first_row_seconds",
			"Time from a scan request reaching its tablet actor (the first dispatch) to the first attempt known to deliver data (retries and hedges included), observed when the request ends, by profile, policy and the request's outcome; requests that delivered nothing are not observed."),
			scanLabels),
		scan: prometheus.NewHistogramVec(metrics.SecondsHistogramOpts(coordPrefix+"scan_seconds",
			"Time from a scan request reaching its tablet actor to its end (the server finished, the client said done, or an error was sent), by profile, policy and outcome: ok, cancelled (the client abandoned it) or the error code sent (no_servers, deadline_exceeded, storage, shutting_down, ...)."),
			scanLabels),
		selection: prometheus.NewHistogramVec(microsHistogramOpts(coordPrefix+"selection_seconds",
			"Time the selection policy took to choose a server for one dispatch (hedges included), by policy."), []string{"policy"}),
		rebuild: prometheus.NewHistogram(microsHistogramOpts(coordPrefix+"load_view_rebuild_seconds",
			"Time to rebuild the load view (the snapshot of every server's load the policies read).")),
		rebuilds: prometheus.NewCounter(prometheus.CounterOpts{Name: coordPrefix + "load_view_rebuilds_total",
			Help: "Load view rebuilds (at most every max(1ms, 2 × the last rebuild's cost) while servers' loads change, and every 100ms)."}),
		natsErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: coordPrefix + "nats_errors_total",
			Help: "NATS and JetStream errors, by op: publish (load signals), meta_read (table metadata), meta_watch (watching table generations), async (slow consumer, permissions), disconnect (connection lost; it reconnects)."},
			[]string{"op"}),
	}
	for _, op := range natsOps {
		m.natsErrors.WithLabelValues(op) // exported from the start, so rate() works before the first error
	}
	return m
}

// microsHistogramOpts is SecondsHistogramOpts with classic buckets from
// 1µs to 100ms, for work done in memory.
func microsHistogramOpts(name, help string) prometheus.HistogramOpts {
	o := metrics.SecondsHistogramOpts(name, help)
	o.Buckets = []float64{1e-6, 2.5e-6, 5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 100e-3}
	return o
}

// Describe implements prometheus.Collector.
func (m *CoordMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *CoordMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

func (m *CoordMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.firstRow, m.scan, m.selection, m.rebuild, m.rebuilds, m.natsErrors}
}

// NATSError counts one failed NATS or JetStream operation (op: one of the
// NATSOp constants).
func (m *CoordMetrics) NATSError(op string) { m.natsErrors.WithLabelValues(op).Inc() }

// policyLabel is the policy label of a profile ("" is the default policy).
func policyLabel(p *selection.Profile) string {
	if p.Policy == "" {
		return selection.PolicyAccumulo
	}
	return p.Policy
}

// selectionObserver returns the observer of profile p's selection times.
func (m *CoordMetrics) selectionObserver(p *selection.Profile) prometheus.Observer {
	return m.selection.WithLabelValues(policyLabel(p))
}

// rebuilt observes one load view rebuild that took d.
func (m *CoordMetrics) rebuilt(d time.Duration) {
	m.rebuilds.Inc()
	m.rebuild.Observe(d.Seconds())
}

// scanEnded observes a scan request of profile p that reached its tablet
// actor at start and ended at end with outcome; firstRow is when an
// attempt was first known to deliver data (zero: none did).
func (m *CoordMetrics) scanEnded(p *selection.Profile, outcome string, start, firstRow, end time.Time) {
	name, policy := p.Name, policyLabel(p)
	m.scan.WithLabelValues(name, policy, outcome).Observe(end.Sub(start).Seconds())
	if !firstRow.IsZero() {
		m.firstRow.WithLabelValues(name, policy, outcome).Observe(firstRow.Sub(start).Seconds())
	}
}

// errorOutcome is the outcome label of a scan request answered with code.
func errorOutcome(code messages.ErrorCode) string {
	if code == messages.ErrorCode_ERROR_CODE_UNSPECIFIED || int(code) < 0 || int(code) >= len(metrics.OutcomeLabels) {
		return metrics.OutcomeLabels[messages.ErrorCode_ERROR_CODE_INTERNAL]
	}
	return metrics.OutcomeLabels[code]
}

// serverCollector exports the per-server series of the coordinator get
// returns, read from its status at scrape time (see the cardinality note
// above).
type serverCollector struct {
	get                                                       func() *Coordinator
	dispatches, hedges, busy, timeouts, errors, inFlight, lat *prometheus.Desc
	alive, info                                               *prometheus.Desc
}

func newServerCollector(get func() *Coordinator) *serverCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(coordPrefix+"server_"+name, help, []string{"server", "host", "zone"}, nil)
	}
	return &serverCollector{get: get,
		dispatches: d("dispatches_total", "StartScan messages this coordinator sent to the server (hedges included)."),
		hedges:     d("hedges_total", "Hedged dispatches this coordinator sent to the server."),
		busy:       d("busy_total", "This coordinator's attempts the server answered busy."),
		timeouts:   d("timeouts_total", "This coordinator's attempts on the server that timed out (no answer within the busy timeout)."),
		errors:     d("errors_total", "This coordinator's attempts on the server that ended in an error, a stall or the server's loss."),
		inFlight:   d("in_flight", "This coordinator's attempts running on the server."),
		lat:        d("start_latency_seconds", "This coordinator's estimate of the server's dispatch → first data latency (an EWMA of its samples; 0 before the first)."),
		alive:      d("alive", "1 while the server is in the view (heartbeating), 0 after it left, until it is forgotten."),
		info: prometheus.NewDesc(coordPrefix+"server_info", "Always 1: maps a scan server's stable name (server, host/index) to the actor address (address) of the incarnation the other per-server series show.",
			[]string{"server", "host", "zone", "address"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (s *serverCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{s.dispatches, s.hedges, s.busy, s.timeouts, s.errors, s.inFlight, s.lat, s.alive, s.info} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (s *serverCollector) Collect(ch chan<- prometheus.Metric) {
	c := s.get()
	if c == nil {
		return
	}
	// One server per label set: the live one, else the latest heartbeat.
	type labels struct{ server, host, zone string }
	shown := map[labels]*messages.ServerStatus{}
	c.status.Range(func(_, v any) bool {
		for _, st := range v.(*hostStatus).messages() {
			k := labels{wire.ServerLabel(st.GetHost(), st.GetId()), st.GetHost(), st.GetZone()}
			if o := shown[k]; o == nil || st.GetAlive() && !o.GetAlive() ||
				st.GetAlive() == o.GetAlive() && st.GetLastHeartbeatUnixMs() > o.GetLastHeartbeatUnixMs() {
				shown[k] = st
			}
		}
		return true
	})
	for k, st := range shown {
		lv := []string{k.server, k.host, k.zone}
		ch <- prometheus.MustNewConstMetric(s.info, prometheus.GaugeValue, 1, k.server, k.host, k.zone, wire.ServerAddress(st.GetId()))
		n := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lv...)
		}
		g := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
		}
		n(s.dispatches, st.GetDispatched())
		n(s.hedges, st.GetHedges())
		n(s.busy, st.GetAttemptsBusy())
		n(s.timeouts, st.GetAttemptsTimedOut())
		n(s.errors, st.GetAttemptsFailed())
		g(s.inFlight, float64(st.GetInFlight()))
		g(s.lat, (time.Duration(st.GetStartLatencyUs()) * time.Microsecond).Seconds())
		alive := 0.0
		if st.GetAlive() {
			alive = 1
		}
		g(s.alive, alive)
	}
}
