package loadtest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var fixedStart = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func sampleReport() *Report {
	rep := &Report{Started: fixedStart.Format(time.RFC3339),
		Cluster:  ClusterInfo{Hosts: 4, ServersPerHost: 2, Zones: 1, Local: true},
		Workload: WorkloadInfo{Clients: 32, Rows: 200000, Tablets: 64, Zipf: 0.99, ScanRows: 100, DurationS: 30}}
	for i, p := range []string{"random", "adaptive"} {
		for j, f := range []string{"none", "slow-server"} {
			rec := newRecorder(fixedStart, 3*time.Second, time.Second)
			for k := 0; k < 300; k++ {
				rec.add(outcome{sched: fixedStart.Add(time.Duration(k) * 10 * time.Millisecond), latency: time.Duration(1+k%50+10*i+20*j) * time.Millisecond, rows: 10})
			}
			ph := &phase{cfg: DefaultConfig(), policy: PolicySpec{Label: p, Policy: p}, fault: f, rec: rec}
			ph.cfg.Duration = 3 * time.Second
			res := ph.result(nil, nil, 90, 10, [][2]float64{{0, 3}})
			res.DispatchesPerScan, res.Hedges = 1.01, 3
			rep.Results = append(rep.Results, *res)
		}
	}
	return rep
}

// TestReportJSON checks that report.json has every field the issue
// requires, with the right JSON types, even when figures are zero.
func TestReportJSON(t *testing.T) {
	rep := sampleReport()
	rep.Results = append(rep.Results, Result{Policy: "bookkeeper", Fault: "none"}) // all zero: fields still present
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if s, ok := doc["started"].(string); !ok {
		t.Errorf("started: %v", doc["started"])
	} else if _, err := time.Parse(time.RFC3339, s); err != nil {
		t.Errorf("started %q is not RFC 3339: %v", s, err)
	}
	requireNumbers(t, "cluster", doc["cluster"], "hosts", "servers_per_host", "zones")
	requireNumbers(t, "workload", doc["workload"], "clients", "rows", "tablets", "zipf", "scan_rows", "duration_s")
	results, ok := doc["results"].([]any)
	if !ok || len(results) != 5 {
		t.Fatalf("results: %v", doc["results"])
	}
	for i, r := range results {
		m, _ := r.(map[string]any)
		for _, k := range []string{"policy", "fault"} {
			if _, ok := m[k].(string); !ok {
				t.Errorf("results[%d].%s missing or not a string", i, k)
			}
		}
		requireNumbers(t, "results", r, "scans", "rows", "errors", "wrong", "throughput_scans_per_s", "p50_ms", "p90_ms", "p99_ms",
			"p999_ms", "max_ms", "cache_hit_ratio", "dispatches_per_scan", "busy_rejections", "hedges")
	}
	first := results[0].(map[string]any)
	if first["scans"].(float64) != 300 || first["throughput_scans_per_s"].(float64) != 100 || first["cache_hit_ratio"].(float64) != 0.9 {
		t.Errorf("figures: scans %v, throughput %v, cache hit %v", first["scans"], first["throughput_scans_per_s"], first["cache_hit_ratio"])
	}
	if p50, p99 := first["p50_ms"].(float64), first["p99_ms"].(float64); !(p50 > 20 && p50 < 30 && p99 > 45 && p99 <= 51) {
		t.Errorf("p50 %v ms, p99 %v ms from latencies 1..50 ms", p50, p99)
	}
	// A round trip keeps everything.
	back, err := ReadReportBytes(buf.Bytes())
	if err != nil || len(back.Results) != 5 || back.Results[1].P99Ms != rep.Results[1].P99Ms {
		t.Fatalf("round trip: %v %+v", err, back)
	}
}

func requireNumbers(t *testing.T, where string, v any, keys ...string) {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Errorf("%s is not an object: %v", where, v)
		return
	}
	for _, k := range keys {
		if _, ok := m[k].(float64); !ok {
			t.Errorf("%s.%s missing or not a number: %v", where, k, m[k])
		}
	}
}

// TestReportDirAndTable writes report.json and the PNG plots, prints the
// table, and combines reports into medians.
func TestReportDirAndTable(t *testing.T) {
	rep := sampleReport()
	dir := t.TempDir()
	files, err := rep.WriteDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"report.json", "latency-cdf-none.png", "latency-tail-none.png", "p99-none.png",
		"latency-cdf-slow-server.png", "latency-tail-slow-server.png", "p99-slow-server.png"}
	if len(files) != len(want) {
		t.Fatalf("wrote %v, want %v", files, want)
	}
	for i, w := range want {
		if filepath.Base(files[i]) != w {
			t.Errorf("file %d: %s, want %s", i, files[i], w)
		}
		data, err := os.ReadFile(files[i])
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(w, ".png") && !bytes.HasPrefix(data, []byte("\x89PNG")) {
			t.Errorf("%s is not a PNG", w)
		}
	}
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(buf.String()), "\n"); len(lines) != 5 || !strings.Contains(lines[0], "p99 ms") || !strings.Contains(buf.String(), "slow-server") {
		t.Errorf("table:\n%s", buf.String())
	}
	a, b, c := sampleReport(), sampleReport(), sampleReport()
	b.Results[0].P99Ms, c.Results[0].P99Ms = 1, 1000
	c.Results[1].Wrong = 2
	m, err := MedianReport([]*Report{a, b, c})
	if err != nil {
		t.Fatal(err)
	}
	if m.Results[0].P99Ms != a.Results[0].P99Ms || m.Results[1].Wrong != 2 || len(m.Results) != 4 {
		t.Errorf("median: p99 %v (want %v), wrong %d (want the max, 2)", m.Results[0].P99Ms, a.Results[0].P99Ms, m.Results[1].Wrong)
	}
}
