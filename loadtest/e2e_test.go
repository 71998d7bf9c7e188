package loadtest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestQuickEndToEnd runs a --quick-sized comparison on a local cluster of
// real processes (coordinator with embedded NATS, scanserver processes;
// built from this tree if needed) and checks the report's structure and
// that no scan returned a wrong row. It asserts nothing about speed.
func TestQuickEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes; skipped with -short")
	}
	cfg := QuickConfig()
	cfg.DataDir = t.TempDir()
	cfg.Duration = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("run took %v", time.Since(start).Round(time.Millisecond))
	if len(rep.Results) != len(cfg.Faults)*len(cfg.Policies) {
		t.Fatalf("%d results, want %d", len(rep.Results), len(cfg.Faults)*len(cfg.Policies))
	}
	if rep.Cluster.Hosts != cfg.Hosts || rep.Workload.Rows != cfg.Rows || rep.Cluster.TableBytes == 0 || rep.Cluster.CacheBytes == 0 {
		t.Errorf("cluster %+v, workload %+v", rep.Cluster, rep.Workload)
	}
	i := 0
	for _, f := range cfg.Faults {
		for _, p := range cfg.Policies {
			r := rep.Results[i]
			i++
			if r.Policy != p || r.Fault != f {
				t.Errorf("result %d is %s/%s, want %s/%s", i, r.Policy, r.Fault, p, f)
			}
			if r.Wrong != 0 || r.WarmupWrong != 0 {
				t.Errorf("%s/%s: %d wrong scans (%d in warm-up): %q", p, f, r.Wrong, r.WarmupWrong, r.WrongSamples)
			}
			if r.Errors != 0 {
				t.Errorf("%s/%s: %d errors: %+v", p, f, r.Errors, r.ErrorSamples)
			}
			if r.Scans == 0 || r.Rows < r.Scans || r.ThroughputScansPerS <= 0 || r.WarmupScans == 0 {
				t.Errorf("%s/%s: scans %d, rows %d, throughput %v, warm-up scans %d", p, f, r.Scans, r.Rows, r.ThroughputScansPerS, r.WarmupScans)
			}
			if !(0 < r.P50Ms && r.P50Ms <= r.P90Ms && r.P90Ms <= r.P99Ms && r.P99Ms <= r.P999Ms && r.P999Ms <= r.MaxMs) {
				t.Errorf("%s/%s: percentiles not ordered: %v %v %v %v %v", p, f, r.P50Ms, r.P90Ms, r.P99Ms, r.P999Ms, r.MaxMs)
			}
			if r.CacheHits+r.CacheMisses == 0 || r.CacheHitRatio <= 0 || r.CacheHitRatio > 1 {
				t.Errorf("%s/%s: cache hits %d misses %d ratio %v", p, f, r.CacheHits, r.CacheMisses, r.CacheHitRatio)
			}
			if r.Dispatches == 0 || r.DispatchesPerScan <= 0 {
				t.Errorf("%s/%s: dispatches %d (%v per scan)", p, f, r.Dispatches, r.DispatchesPerScan)
			}
			if len(r.P99OverTimeMs) != int(cfg.Duration/time.Second) || len(r.CDF) == 0 {
				t.Errorf("%s/%s: %d p99-over-time points, %d CDF points", p, f, len(r.P99OverTimeMs), len(r.CDF))
			}
			if len(r.ServerDispatches) != cfg.Hosts*cfg.ServersPerHost || len(r.Servers) != cfg.Hosts*cfg.ServersPerHost {
				t.Errorf("%s/%s: per-server dispatches %v, health %v", p, f, r.ServerDispatches, r.Servers)
			}
			if (f == FaultSlowServer) != (len(r.FaultWindowsS) == 1) {
				t.Errorf("%s/%s: fault windows %v", p, f, r.FaultWindowsS)
			}
		}
	}
	dir := t.TempDir()
	files, err := rep.WriteDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1+3*len(cfg.Faults) {
		t.Errorf("wrote %v", files)
	}
	if _, err := os.Stat(filepath.Join(dir, "report.json")); err != nil {
		t.Error(err)
	}
}
