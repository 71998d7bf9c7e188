package coordinator_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/wire"
)

// scrape reads http://addr/metrics in the given exposition format.
func scrape(t *testing.T, addr string, format expfmt.Format) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+addr+"/metrics", nil)
	req.Header.Set("Accept", string(format))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(res.Body)
		t.Fatalf("GET /metrics: %s: %s", res.Status, body)
	}
	fams := map[string]*dto.MetricFamily{}
	dec := expfmt.NewDecoder(res.Body, expfmt.ResponseFormat(res.Header))
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decoding /metrics (%s): %v", res.Header.Get("Content-Type"), err)
		}
		fams[mf.GetName()] = &mf
	}
	return fams
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// value is a counter's or gauge's value.
func value(m *dto.Metric) float64 {
	if m.Counter != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// TestScanServerMetrics: scanserver --http 127.0.0.1:0 reports its address
// in the ready file and serves /metrics: per-server gauges and counters
// labelled by server and host that add up to what the scans streamed, the
// block fetch histogram by source with native buckets, the block cache's
// counters, and the Go runtime and process collectors.
func TestScanServerMetrics(t *testing.T) {
	tc := startCluster(t, clusterOpts{hosts: 2, servers: 2, rows: 6000, tablets: 3,
		hostArgs: func(int) []string { return []string{"--http", "127.0.0.1:0"} }})
	c := tc.client(nil)
	tc.check(c, 0, len(tc.truth), client.ScanOptions{})
	tc.check(c, 0, len(tc.truth), client.ScanOptions{}) // served from the host caches where the same host is chosen
	var wantBytes float64
	for _, e := range tc.truth {
		wantBytes += float64(len(e.Key) + len(e.Value))
	}

	var rows, bytes, ok, scans, fetchStore, fetchCache, hits, misses, queued, firstBatch float64
	for i := 0; i < tc.cl.Hosts(); i++ {
		p := tc.cl.Host(i)
		if p.Ready.HTTP == "" {
			t.Fatalf("host %d: ready file has no http address: %+v", i, p.Ready)
		}
		fams := scrape(t, p.Ready.HTTP, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, name := range []string{"go_goroutines", "process_cpu_seconds_total", "scanplane_cache_hits_total", "scanplane_cache_misses_total",
			"scanplane_cache_evictions_total", "scanplane_cache_bytes", "scanplane_scanserver_busy_total", "scanplane_scanserver_scans_total",
			"scanplane_scanserver_workers", "scanplane_scanserver_block_fetch_seconds"} {
			if fams[name] == nil {
				t.Fatalf("host %d: /metrics lacks %s", i, name)
			}
		}
		for _, name := range []string{"scanplane_scanserver_queue_length", "scanplane_scanserver_running_scans", "scanplane_scanserver_rows_streamed_total"} {
			var servers []string
			for _, m := range fams[name].GetMetric() {
				if label(m, "host") != p.Ready.Host {
					t.Errorf("host %d: %s has host=%q, want %q", i, name, label(m, "host"), p.Ready.Host)
				}
				servers = append(servers, label(m, "server"))
			}
			sort.Strings(servers)
			var want []string
			for _, id := range p.Ready.Servers {
				want = append(want, wire.ServerLabel(p.Ready.Host, id))
			}
			if fmt.Sprint(servers) != fmt.Sprint(want) {
				t.Errorf("host %d: %s for servers %v, want %v (of %v)", i, name, servers, want, p.Ready.Servers)
			}
		}
		hits += value(fams["scanplane_cache_hits_total"].GetMetric()[0])
		misses += value(fams["scanplane_cache_misses_total"].GetMetric()[0])
		for _, m := range fams["scanplane_scanserver_rows_streamed_total"].GetMetric() {
			rows += value(m)
		}
		for _, m := range fams["scanplane_scanserver_bytes_streamed_total"].GetMetric() {
			bytes += value(m)
		}
		for _, m := range fams["scanplane_scanserver_scans_finished_total"].GetMetric() {
			if label(m, "outcome") == "ok" {
				ok += value(m)
			}
			scans += value(m)
		}
		for _, m := range fams["scanplane_scanserver_block_fetch_seconds"].GetMetric() {
			switch label(m, "source") {
			case "jetstream":
				fetchStore += float64(m.GetHistogram().GetSampleCount())
			case "cache":
				fetchCache += float64(m.GetHistogram().GetSampleCount())
			default:
				t.Errorf("host %d: block fetch source %q", i, label(m, "source"))
			}
			if len(m.GetHistogram().GetBucket()) == 0 {
				t.Errorf("host %d: block fetch histogram has no classic buckets", i)
			}
		}
		for _, m := range fams["scanplane_scanserver_scan_stage_seconds"].GetMetric() {
			switch label(m, "stage") {
			case "queued":
				queued += float64(m.GetHistogram().GetSampleCount())
			case "first_batch":
				firstBatch += float64(m.GetHistogram().GetSampleCount())
			default:
				t.Errorf("host %d: scan stage %q", i, label(m, "stage"))
			}
		}
		// The protobuf exposition carries the native buckets.
		pb := scrape(t, p.Ready.HTTP, expfmt.NewFormat(expfmt.TypeProtoDelim))
		if len(pb["scanplane_scanserver_block_fetch_seconds"].GetMetric()) == 0 {
			t.Errorf("host %d: protobuf /metrics lacks scanplane_scanserver_block_fetch_seconds", i)
		}
		for _, m := range pb["scanplane_scanserver_block_fetch_seconds"].GetMetric() {
			if h := m.GetHistogram(); h.GetSampleCount() > 0 && (h.Schema == nil || len(h.GetPositiveSpan()) == 0) {
				t.Errorf("host %d: block fetch histogram (%s) has no native buckets: %v", i, label(m, "source"), h)
			}
		}
	}
	// Every row was streamed at least once per full scan (a hedged or
	// retried attempt may stream some twice).
	if rows < 2*float64(len(tc.truth)) || bytes < 2*wantBytes {
		t.Errorf("streamed %v rows and %v bytes, want at least %d and %v", rows, bytes, 2*len(tc.truth), 2*wantBytes)
	}
	if ok < 2*float64(len(tc.table.Tablets)) {
		t.Errorf("%v scans finished ok, want at least %d", ok, 2*len(tc.table.Tablets))
	}
	// Every scan that ran got a worker; every one that succeeded sent a
	// first batch (each tablet has rows).
	if firstBatch < ok || queued < firstBatch || queued > scans {
		t.Errorf("scan stages: %v queued, %v first batches; %v scans finished, %v ok", queued, firstBatch, scans, ok)
	}
	if fetchStore == 0 {
		t.Error("no block fetch from jetstream observed")
	}
	// Every fetch looks in the cache once: hits are the fetches from the
	// cache, misses those from the store. The histogram counts successful
	// fetches only, and a scan's context ends its fetches in flight: a
	// cancelled hedge's, and the read-ahead (at most readAheadBlocks past
	// the block being read) of any scan. So a miss may have no store
	// fetch, at most 1+readAheadBlocks per scan; a store fetch never
	// lacks its miss.
	const readAheadBlocks = 2 // scanserver.ReadAhead
	if fetchCache != hits || fetchStore > misses || misses-fetchStore > (1+readAheadBlocks)*scans {
		t.Errorf("block fetches: %v from cache, %v from jetstream; cache hits %v, misses %v (%v scans)", fetchCache, fetchStore, hits, misses, scans)
	}
}
