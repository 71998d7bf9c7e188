package scanserver

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/cache"
	"github.com/scanplane/scanplane/internal/metrics"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
)

// Scan-server metrics (a host agent's Collectors): every series of one
// scan server carries the labels server (its stable name
// "<host>/<index>", wire.ServerLabel, the same after a restart on another
// port) and host; scanplane_scanserver_server_info (always 1) maps that
// name to the server's current actor address. A process has
// HostAgentConfig.Servers (at most 256) servers, so a process exports at
// most that many values per label set. The block
// fetch histogram is labelled only by source. Names and labels are part of
// the operations interface: deploy/prometheus/alerts.yml and the Grafana
// dashboard use them, and a test fails when one of their names is missing.
const scanServerPrefix = "scanplane_scanserver_"

// Block fetch sources, the values of the source label of
// scanplane_scanserver_block_fetch_seconds.
const (
	SourceCache     = "cache"     // served from the host block cache
	SourceJetStream = "jetstream" // read from the JetStream block bucket
	SourceDir       = "dir"       // read from a shared directory (--blocks-dir)
	SourceStore     = "store"     // read from another tablets.BlockStore
)

// blockSource names where store reads of store come from.
func blockSource(store tablets.BlockStore) string {
	switch store.(type) {
	case *bus.BlockStore:
		return SourceJetStream
	case *tablets.DirStore:
		return SourceDir
	}
	return SourceStore
}

// alwaysOutcomes are the outcomes a scan server exports from its start, so
// that rate() over them works before the first failure: the ones a scan
// server produces itself.
var alwaysOutcomes = []messages.ErrorCode{messages.ErrorCode_ERROR_CODE_UNSPECIFIED,
	messages.ErrorCode_ERROR_CODE_BAD_REQUEST, messages.ErrorCode_ERROR_CODE_STALE_GENERATION,
	messages.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED, messages.ErrorCode_ERROR_CODE_STORAGE,
	messages.ErrorCode_ERROR_CODE_CORRUPT_BLOCK, messages.ErrorCode_ERROR_CODE_CANCELLED}

// serverSeries is one scan server's counters with its labels.
type serverSeries struct {
	id       string
	counters *ServerCounters
}

// serverMetrics is a prometheus.Collector over a host agent's scan
// servers (their ServerCounters, read at scrape time) plus the block fetch
// histogram. Safe for concurrent use.
type serverMetrics struct {
	host    string
	workers int
	fetch   *prometheus.HistogramVec
	// stages: the time from a StartScan's arrival to points of its scan
	// (StageQueued, StageFirstBatch).
	stages *prometheus.HistogramVec

	mu      sync.Mutex
	servers []serverSeries

	queueLen, running, workersDesc, scans, finished, busy, rows, bytes, probes, readAhead, info *prometheus.Desc
}

func newServerMetrics(host string, workers int) *serverMetrics {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(scanServerPrefix+name, help, append([]string{"server", "host"}, labels...), nil)
	}
	return &serverMetrics{host: host, workers: workers,
		fetch: prometheus.NewHistogramVec(metrics.SecondsHistogramOpts(scanServerPrefix+"block_fetch_seconds",
			"Time to fetch one tablet-file block or index for a scan, by source: cache (a host cache hit), jetstream or dir (a store read; concurrent misses of one block share it)."),
			[]string{"source"}),
		stages: prometheus.NewHistogramVec(metrics.SecondsHistogramOpts(scanServerPrefix+"scan_stage_seconds",
			"Time from a StartScan's arrival at a scan server to a stage of its scan: queued (it got a worker) or first_batch (its first row batch was handed to the transport); together with the client's latency it splits a short scan's time between the scan server and the rest."),
			[]string{"stage"}),
		queueLen:    d("queue_length", "Scans waiting for a worker."),
		running:     d("running_scans", "Scans running (holding a worker)."),
		workersDesc: d("workers", "Scans a server runs at once (--workers)."),
		scans:       d("scans_total", "Scans started (an attempt that got a worker)."),
		finished:    d("scans_finished_total", "Scans ended, by outcome: ok, cancelled (hedge losers, clients gone) or an error code (storage, corrupt_block, deadline_exceeded, stale_generation, bad_request).", "outcome"),
		busy:        d("busy_total", "Attempts answered busy (no worker within the busy timeout, or queue full)."),
		rows:        d("rows_streamed_total", "Rows sent to clients in row batches."),
		bytes:       d("bytes_streamed_total", "Key and value bytes sent to clients in row batches."),
		probes:      d("probes_answered_total", "Prequal probes answered (requests in flight and a latency estimate)."),
		readAhead:   d("readahead_blocks_total", "Blocks read ahead of scans, several to a store request, after a scan missed a block in the host cache."),
		info:        d("server_info", "Always 1: maps a scan server's stable name (server, host/index) to its current actor address (address; it changes at a restart).", "address"),
	}
}

func (m *serverMetrics) add(id string, c *ServerCounters) {
	m.mu.Lock()
	m.servers = append(m.servers, serverSeries{id: id, counters: c})
	m.mu.Unlock()
}

// timed wraps f so every successful fetch is observed in the histogram
// under SourceCache or store. Two clock reads and one histogram update per
// block (a block holds hundreds of rows).
func (m *serverMetrics) timed(f tablets.BlockFetcher, store string) tablets.BlockFetcher {
	t := &timedFetcher{inner: f, cache: m.fetch.WithLabelValues(SourceCache), store: m.fetch.WithLabelValues(store)}
	if p, ok := f.(cache.Prefetcher); ok {
		return timedPrefetcher{t, p}
	}
	return t
}

// timedPrefetcher is a timedFetcher over a fetcher that reads ahead in
// batches (cache.Prefetcher), which it passes through untimed: the
// fetches that find the blocks are timed.
type timedPrefetcher struct {
	*timedFetcher
	cache.Prefetcher
}

// Describe implements prometheus.Collector.
func (m *serverMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.queueLen, m.running, m.workersDesc, m.scans, m.finished, m.busy, m.rows, m.bytes, m.probes, m.readAhead, m.info} {
		ch <- d
	}
	m.fetch.Describe(ch)
	m.stages.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *serverMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	servers := append([]serverSeries(nil), m.servers...)
	m.mu.Unlock()
	for _, s := range servers {
		c := s.counters
		label := wire.ServerLabel(m.host, s.id)
		g := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, label, m.host)
		}
		n := func(d *prometheus.Desc, v uint64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{label, m.host}, extra...)...)
		}
		ch <- prometheus.MustNewConstMetric(m.info, prometheus.GaugeValue, 1, label, m.host, wire.ServerAddress(s.id))
		g(m.queueLen, float64(c.QueueLen.Load()))
		g(m.running, float64(c.Active.Load()))
		g(m.workersDesc, float64(m.workers))
		n(m.scans, c.Scans.Load())
		n(m.busy, c.Busy.Load())
		n(m.rows, c.Rows.Load())
		n(m.bytes, c.Bytes.Load())
		n(m.probes, c.Probes.Load())
		n(m.readAhead, c.ReadAhead.Load())
		var always [len(c.Finished)]bool
		for _, code := range alwaysOutcomes {
			always[code] = true
		}
		for code := range c.Finished {
			if v := c.Finished[code].Load(); v > 0 || always[code] {
				n(m.finished, v, metrics.OutcomeLabels[code])
			}
		}
	}
	m.fetch.Collect(ch)
	m.stages.Collect(ch)
}

// Stages of a scan, the values of the stage label of
// scanplane_scanserver_scan_stage_seconds.
const (
	StageQueued     = "queued"
	StageFirstBatch = "first_batch"
)

// stageObservers observe the stages of a server's scans; nil observers
// observe nothing.
type stageObservers struct{ queued, firstBatch prometheus.Observer }

// stageObservers returns the observers of m's stage histogram.
func (m *serverMetrics) stageObservers() stageObservers {
	return stageObservers{queued: m.stages.WithLabelValues(StageQueued), firstBatch: m.stages.WithLabelValues(StageFirstBatch)}
}

// observe records job's stages that happened.
func (o stageObservers) observe(job *scanJob) {
	if o.queued != nil && !job.started.IsZero() {
		o.queued.Observe(job.started.Sub(job.received).Seconds())
	}
	if o.firstBatch != nil && !job.firstSent.IsZero() {
		o.firstBatch.Observe(job.firstSent.Sub(job.received).Seconds())
	}
}

// countFinished counts a scan's end under its error code (0 = ok).
func (c *ServerCounters) countFinished(code messages.ErrorCode) {
	if int(code) < 0 || int(code) >= len(c.Finished) {
		code = messages.ErrorCode_ERROR_CODE_INTERNAL
	}
	c.Finished[code].Add(1)
}

// timedFetcher observes the duration of every successful block fetch.
type timedFetcher struct {
	inner        tablets.BlockFetcher
	cache, store prometheus.Observer
}

// FetchBlock implements tablets.BlockFetcher.
func (f *timedFetcher) FetchBlock(ctx context.Context, key string) ([]byte, bool, error) {
	start := time.Now()
	data, cached, err := f.inner.FetchBlock(ctx, key)
	if err == nil {
		f.observe(start, cached)
	}
	return data, cached, err
}

// observe records a successful fetch that began at start, by source.
func (f *timedFetcher) observe(start time.Time, cached bool) {
	d := time.Since(start).Seconds()
	if cached {
		f.cache.Observe(d)
	} else {
		f.store.Observe(d)
	}
}

// FetchDecoded implements tablets.DecodingFetcher (timed as FetchBlock):
// it passes the host cache's decoded values through.
func (f *timedFetcher) FetchDecoded(ctx context.Context, key string, decode func([]byte) (any, int64, error)) (any, bool, error) {
	start := time.Now()
	v, cached, err := tablets.FetchDecoded(ctx, f.inner, key, decode)
	if err == nil {
		f.observe(start, cached)
	}
	return v, cached, err
}
