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
	for k, v := range map[string]float64{"queue_length h1/0 ": 3, "queue_length h1/1 ": 0, "rows_streamed_total h1/1 ": 7,
		"workers h1/0 ": 4, "scans_finished_total h1/0 ok": 1, "scans_finished_total h1/0 storage": 1,
		"scans_finished_total h1/0 cancelled": 0, "scans_finished_total h1/0 corrupt_block": 0,
		"scans_finished_total h1/1 internal": 1, "scans_finished_total h1/1 deadline_exceeded": 0,
		"server_info h1/0 ": 1, "server_info h1/1 ": 1} {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v; all: %v", k, g, ok, v, got)
		}
	}
	if _, ok := got["scans_finished_total h1/0 internal"]; ok {
		t.Errorf("an outcome a scan server does not produce is exported at 0: %v", got)
	}
}

// TestServerLabelSurvivesRestart: a scan-server process restarted on
// another address exports the same series (server "<host>/<index>", no
// address in it); only scanplane_scanserver_server_info's address label
// tells the two processes apart.
func TestServerLabelSurvivesRestart(t *testing.T) {
	series := func(addr string) (labels map[string]bool, addrs map[string]string) {
		m := newServerMetrics("h1", 2)
		m.add(addr+"/0", &ServerCounters{})
		m.add(addr+"/1", &ServerCounters{})
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(m)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		labels, addrs = map[string]bool{}, map[string]string{}
		for _, mf := range mfs {
			for _, mt := range mf.GetMetric() {
				var ls []string
				server, address := "", ""
				for _, l := range mt.GetLabel() {
					switch l.GetName() {
					case "address":
						address = l.GetValue()
						continue
					case "server":
						server = l.GetValue()
					}
					ls = append(ls, l.GetName()+"="+l.GetValue())
				}
				labels[mf.GetName()+"{"+strings.Join(ls, ",")+"}"] = true
				if mf.GetName() == "scanplane_scanserver_server_info" {
					addrs[server] = address
				}
			}
		}
		return labels, addrs
	}
	before, addrBefore := series("127.0.0.1:34083")
	after, addrAfter := series("127.0.0.1:41557")
	for s := range before {
		if strings.Contains(s, "34083") {
			t.Errorf("series %s carries the ephemeral address", s)
		}
		if !after[s] {
			t.Errorf("series %s is gone after a restart on another address", s)
		}
	}
	if len(before) != len(after) {
		t.Errorf("%d series before the restart, %d after", len(before), len(after))
	}
	if addrBefore["h1/0"] != "127.0.0.1:34083" || addrAfter["h1/0"] != "127.0.0.1:41557" || addrAfter["h1/1"] != "127.0.0.1:41557" {
		t.Errorf("server_info addresses %v before, %v after", addrBefore, addrAfter)
	}
}
