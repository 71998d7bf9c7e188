package scanserver

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/scanplane/scanplane/messages"
)

// TestServerMetricsCollect: the collector reports each server's counters
// under its server and host labels, outcomes by code name, and the
// outcomes a scan server produces before any happened.
func TestServerMetricsCollect(t *testing.T) {
	m := newServerMetrics("h1", 4)
	a, b := &ServerCounters{}, &ServerCounters{}
	m.add("addr/0", a)
	m.add("addr/1", b)
	a.QueueLen.Store(3)
	b.Rows.Add(7)
	a.countFinished(messages.ErrorCode_ERROR_CODE_STORAGE)
	a.countFinished(messages.ErrorCode_ERROR_CODE_UNSPECIFIED)
	b.countFinished(messages.ErrorCode(99)) // beyond the table: internal
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			var server, outcome string
			for _, l := range mt.GetLabel() {
				switch l.GetName() {
				case "server":
					server = l.GetValue()
				case "outcome":
					outcome = l.GetValue()
				}
			}
			v := mt.GetCounter().GetValue() + mt.GetGauge().GetValue()
			got[strings.TrimPrefix(mf.GetName(), "scanplane_scanserver_")+" "+server+" "+outcome] = v
		}
	}
	for k, v := range map[string]float64{"queue_length addr/0 ": 3, "queue_length addr/1 ": 0, "rows_streamed_total addr/1 ": 7,
		"workers addr/0 ": 4, "scans_finished_total addr/0 ok": 1, "scans_finished_total addr/0 storage": 1,
		"scans_finished_total addr/0 cancelled": 0, "scans_finished_total addr/0 corrupt_block": 0,
		"scans_finished_total addr/1 internal": 1, "scans_finished_total addr/1 deadline_exceeded": 0} {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v; all: %v", k, g, ok, v, got)
		}
	}
	if _, ok := got["scans_finished_total addr/0 internal"]; ok {
		t.Errorf("an outcome a scan server does not produce is exported at 0: %v", got)
	}
}
