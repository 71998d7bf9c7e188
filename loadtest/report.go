package loadtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// loadAvg is the 1-minute load average (Linux), 0 if unknown.
func loadAvg() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _, _ := bytes.Cut(data, []byte(" "))
	v, _ := strconv.ParseFloat(string(f), 64)
	return v
}

// Report is the outcome of a load test; it marshals to report.json.
type Report struct {
	// Started and Finished: RFC 3339.
	Started  string       `json:"started"`
	Finished string       `json:"finished,omitempty"`
	ElapsedS float64      `json:"elapsed_s,omitempty"`
	Cluster  ClusterInfo  `json:"cluster"`
	Workload WorkloadInfo `json:"workload"`
	// Machine: where the harness ran (a local cluster shares its CPUs).
	Machine MachineInfo `json:"machine"`
	Results []Result    `json:"results"`
	// Notes: anything the reader must know (missed schedule slots, scans
	// with wrong rows during warm-up, medians of several runs).
	Notes []string `json:"notes,omitempty"`
}

// ClusterInfo describes the cluster under test.
type ClusterInfo struct {
	Coordinators   int    `json:"coordinators,omitempty"`
	Hosts          int    `json:"hosts"`
	ServersPerHost int    `json:"servers_per_host"`
	Zones          int    `json:"zones"`
	Local          bool   `json:"local"`
	CacheBytes     int64  `json:"cache_bytes_per_host,omitempty"`
	TableBytes     uint64 `json:"table_bytes,omitempty"`
}

// MachineInfo describes the machine of the harness: other work on it
// disturbs a local cluster's latencies, so the load is recorded.
type MachineInfo struct {
	CPUs int `json:"cpus"`
	// LoadAvgStart and LoadAvgEnd: 1-minute load average (Linux; 0
	// elsewhere) at the start and the end of the run.
	LoadAvgStart float64 `json:"loadavg_start"`
	LoadAvgEnd   float64 `json:"loadavg_end"`
}

// WorkloadInfo describes the workload.
type WorkloadInfo struct {
	Clients    int     `json:"clients"`
	Rows       int     `json:"rows"`
	Tablets    int     `json:"tablets"`
	Zipf       float64 `json:"zipf"`
	ScanRows   int     `json:"scan_rows"`
	DurationS  float64 `json:"duration_s"`
	WarmupS    float64 `json:"warmup_s"`
	RateScansS float64 `json:"rate_scans_per_s"` // 0 = closed loop
	Loop       string  `json:"loop"`             // "open" or "closed"
	FullTablet float64 `json:"full_tablet"`
	Seed       uint64  `json:"seed"`
	Table      string  `json:"table"`
	Unverified bool    `json:"unverified,omitempty"` // scans of Table's generation without block roots
	FaultHost  string  `json:"fault_host,omitempty"`
	SlowPause  string  `json:"slow_pause,omitempty"`
	SlowFactor float64 `json:"slow_factor,omitempty"`
	HotTablet  int     `json:"hot_tablet"`
	HotShare   float64 `json:"hot_share,omitempty"`
	// Workers: concurrent scans per scan server; FaultHostWorkers: the
	// fault host's under the heterogeneous fault (Workers/2).
	Workers          int `json:"workers,omitempty"`
	FaultHostWorkers int `json:"fault_host_workers,omitempty"`
	// AntagonistThreads: the antagonist's busy threads (antagonist fault).
	AntagonistThreads int `json:"antagonist_threads,omitempty"`
}

// AntagonistInfo is what the antagonist fault did in a phase.
type AntagonistInfo struct {
	PID       int    `json:"pid"`
	ServerPID int    `json:"server_pid"` // the fault host's scanserver
	CPUs      string `json:"cpus"`       // both were pinned to these
	Threads   int    `json:"threads"`
	// CPUS: CPU seconds the antagonist used; WallS: seconds it ran.
	CPUS  float64 `json:"cpu_s"`
	WallS float64 `json:"wall_s"`
}

// Result is one policy under one fault.
type Result struct {
	Policy              string  `json:"policy"`
	Fault               string  `json:"fault"`
	Scans               int64   `json:"scans"`
	Rows                int64   `json:"rows"`
	Errors              int64   `json:"errors"`
	Wrong               int64   `json:"wrong"`
	ThroughputScansPerS float64 `json:"throughput_scans_per_s"`
	P50Ms               float64 `json:"p50_ms"`
	P90Ms               float64 `json:"p90_ms"`
	P99Ms               float64 `json:"p99_ms"`
	P999Ms              float64 `json:"p999_ms"`
	MaxMs               float64 `json:"max_ms"`
	CacheHitRatio       float64 `json:"cache_hit_ratio"`
	DispatchesPerScan   float64 `json:"dispatches_per_scan"`
	BusyRejections      uint64  `json:"busy_rejections"`
	Hedges              uint64  `json:"hedges"`
	// LongestGapMs: the longest stretch of the measurement window in which
	// no scan completed with the right rows (the window's edges count as
	// bounds); LongestGapAtS: where it began, seconds into the window.
	// Under load a healthy cluster completes a scan every few ms; a
	// fault that stops every scan shows here.
	LongestGapMs  float64 `json:"longest_gap_ms"`
	LongestGapAtS float64 `json:"longest_gap_at_s"`
	// FaultCoordinator: the coordinator crash-coordinator or
	// hung-coordinator hit (e.g. coordinator1).
	FaultCoordinator string `json:"fault_coordinator,omitempty"`
	// Antagonist: the antagonist fault's process and what it burned.
	Antagonist *AntagonistInfo `json:"antagonist,omitempty"`

	// Extra fields.
	SelectionPolicy string        `json:"selection_policy"`
	Hedge           bool          `json:"hedge"`
	MeanMs          float64       `json:"mean_ms"`
	Dispatches      uint64        `json:"dispatches"`
	Timeouts        uint64        `json:"busy_timeouts"`
	CoordScans      uint64        `json:"coordinator_scans"`
	CacheHits       uint64        `json:"cache_hits"`
	CacheMisses     uint64        `json:"cache_misses"`
	Missed          int64         `json:"missed,omitempty"`
	WarmupScans     int64         `json:"warmup_scans"`
	WarmupErrors    int64         `json:"warmup_errors"`
	WarmupWrong     int64         `json:"warmup_wrong"`
	ErrorSamples    []ErrorSample `json:"error_samples,omitempty"`
	WrongSamples    []string      `json:"wrong_samples,omitempty"`
	// ServerDispatches: StartScans per server (host/index) in the window.
	ServerDispatches map[string]uint64 `json:"server_dispatches,omitempty"`
	// Servers: the coordinator's view of each server at the window's end
	// (decayed errors, and totals since the server started).
	Servers map[string]ServerHealth `json:"servers,omitempty"`
	// FullTabletScans and their latency (they are in the figures above
	// too).
	FullTabletScans int64   `json:"full_tablet_scans"`
	FullTabletP50Ms float64 `json:"full_tablet_p50_ms"`
	FullTabletP99Ms float64 `json:"full_tablet_p99_ms"`
	// FaultWindowsS: [from, to) seconds into the measurement window during
	// which the fault was active.
	FaultWindowsS [][2]float64 `json:"fault_windows_s,omitempty"`
	// P99OverTimeMs: p99 of the scans due in each second of the window
	// (0 = none).
	P99OverTimeMs []float64 `json:"p99_over_time_ms"`
	// SetupS: seconds spent restarting hosts and loading the profiles;
	// CollectS: seconds from the window's end to the result (drain,
	// snapshots).
	SetupS   float64 `json:"setup_s"`
	CollectS float64 `json:"collect_s"`
	// LoadAvg: the machine's 1-minute load average at the window's end.
	LoadAvg float64 `json:"loadavg"`
	// CPUSeconds: CPU time (user + system) each process kind used from the
	// measurement window's start until its scans ended (CPUWindowS seconds):
	// coordinator, scanserver (all hosts), client (this process). Divided
	// by CPUWindowS it is the cores a kind kept busy, which names the
	// component that saturates first in a closed-loop run.
	CPUSeconds map[string]float64 `json:"cpu_s,omitempty"`
	CPUWindowS float64            `json:"cpu_window_s,omitempty"`
	// CDF: latency distribution, ascending.
	CDF []CDFPoint `json:"cdf,omitempty"`
}

// ServerHealth is what the coordinator knows of a server's failures.
type ServerHealth struct {
	Errors    float64 `json:"errors"`
	Timeouts  uint64  `json:"timeouts"`
	Busy      uint64  `json:"busy"`
	Slowdowns uint32  `json:"slowdowns"`
	// InFlight: this coordinator's scans in flight on the server;
	// QueueLen: the server's last reported queue.
	InFlight uint32 `json:"in_flight"`
	QueueLen uint32 `json:"queue_len"`
}

// ErrorSample is one distinct error message and how often it occurred.
type ErrorSample struct {
	Message string `json:"message"`
	Count   int64  `json:"count"`
}

// CDFPoint: fraction Q of scans took at most Ms.
type CDFPoint struct {
	Q  float64 `json:"q"`
	Ms float64 `json:"ms"`
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadReport reads a report.json.
func ReadReport(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r, err := ReadReportBytes(data)
	if err != nil {
		return nil, fmt.Errorf("loadtest: %s: %w", path, err)
	}
	return r, nil
}

// ReadReportBytes decodes a report.json.
func ReadReportBytes(data []byte) (*Report, error) {
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// WriteDir writes report.json and the plots into dir (created if needed).
func (r *Report) WriteDir(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "report.json")
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := r.WriteJSON(f); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	plots, err := r.WritePlots(dir)
	return append([]string{path}, plots...), err
}

// Faults lists the report's faults in order of first appearance.
func (r *Report) Faults() []string {
	var out []string
	for _, res := range r.Results {
		if !slices.Contains(out, res.Fault) {
			out = append(out, res.Fault)
		}
	}
	return out
}

// WriteTable prints the comparison, one line per fault and policy.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fault\tpolicy\tscans\tscans/s\tp50 ms\tp90 ms\tp99 ms\tp99.9 ms\tmax ms\tgap ms\terrors\twrong\tcache hit\tdisp/scan\tbusy\thedges\t")
	for _, f := range r.Faults() {
		for _, res := range r.Results {
			if res.Fault != f {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.0f\t%d\t%d\t%.1f%%\t%.3f\t%d\t%d\t\n",
				res.Fault, res.Policy, res.Scans, res.ThroughputScansPerS, res.P50Ms, res.P90Ms, res.P99Ms, res.P999Ms, res.MaxMs, res.LongestGapMs,
				res.Errors, res.Wrong, 100*res.CacheHitRatio, res.DispatchesPerScan, res.BusyRejections, res.Hedges)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, res := range r.Results {
		if res.CPUWindowS > 0 {
			fmt.Fprintf(w, "  %s/%s cpu: %s\n", res.Policy, res.Fault, cpuLine(res))
		}
	}
	for _, res := range r.Results {
		for _, e := range res.ErrorSamples {
			fmt.Fprintf(w, "  %s/%s error ×%d: %s\n", res.Policy, res.Fault, e.Count, e.Message)
		}
		for _, m := range res.WrongSamples {
			fmt.Fprintf(w, "  %s/%s WRONG: %s\n", res.Policy, res.Fault, m)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	return nil
}

// cpuLine says how many cores each process kind kept busy, the busiest
// first, and the CPU time per scan.
func cpuLine(res Result) string {
	kinds := []string{KindCoordinator, KindScanServer, KindClient}
	sort.SliceStable(kinds, func(i, j int) bool { return res.CPUSeconds[kinds[i]] > res.CPUSeconds[kinds[j]] })
	var parts []string
	for _, k := range kinds {
		s, ok := res.CPUSeconds[k]
		if !ok {
			continue
		}
		per := ""
		if res.Scans > 0 {
			per = fmt.Sprintf(", %.0f µs/scan", s*1e6/float64(res.Scans))
		}
		parts = append(parts, fmt.Sprintf("%s %.2f cores (%.2f s%s)", k, s/res.CPUWindowS, s, per))
	}
	return strings.Join(parts, "; ")
}

// TotalWrong is the number of scans with wrong rows, warm-up included.
func (r *Report) TotalWrong() int64 {
	var n int64
	for _, res := range r.Results {
		n += res.Wrong + res.WarmupWrong
	}
	return n
}

// MedianReport combines reports of the same comparison: every numeric
// figure of a (policy, fault) result is the median over the reports that
// have it (counts of wrong rows and errors are the maximum, so that no
// wrong row is hidden). Plots of the result use the run with the median p99.
func MedianReport(reports []*Report) (*Report, error) {
	if len(reports) == 0 {
		return nil, fmt.Errorf("loadtest: no reports to combine")
	}
	out := *reports[0]
	out.Results = nil
	out.Notes = []string{fmt.Sprintf("medians of %d runs (errors and wrong: maximum)", len(reports))}
	type key struct{ p, f string }
	var order []key
	by := map[key][]Result{}
	for _, r := range reports {
		for _, res := range r.Results {
			k := key{res.Policy, res.Fault}
			if _, ok := by[k]; !ok {
				order = append(order, k)
			}
			by[k] = append(by[k], res)
		}
	}
	for _, k := range order {
		rs := by[k]
		med := func(f func(Result) float64) float64 {
			v := make([]float64, len(rs))
			for i, r := range rs {
				v[i] = f(r)
			}
			sort.Float64s(v)
			if len(v)%2 == 1 {
				return v[len(v)/2]
			}
			return (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
		maxI := func(f func(Result) int64) int64 {
			m := int64(0)
			for _, r := range rs {
				m = max(m, f(r))
			}
			return m
		}
		// The run with the median p99 supplies the curves.
		sorted := slices.Clone(rs)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i].P99Ms < sorted[j].P99Ms })
		m := sorted[len(sorted)/2]
		m.Scans = int64(med(func(r Result) float64 { return float64(r.Scans) }))
		m.Rows = int64(med(func(r Result) float64 { return float64(r.Rows) }))
		m.Errors = maxI(func(r Result) int64 { return r.Errors })
		m.Wrong = maxI(func(r Result) int64 { return r.Wrong })
		m.WarmupErrors = maxI(func(r Result) int64 { return r.WarmupErrors })
		m.WarmupWrong = maxI(func(r Result) int64 { return r.WarmupWrong })
		m.Missed = maxI(func(r Result) int64 { return r.Missed })
		m.ThroughputScansPerS = med(func(r Result) float64 { return r.ThroughputScansPerS })
		m.P50Ms = med(func(r Result) float64 { return r.P50Ms })
		m.P90Ms = med(func(r Result) float64 { return r.P90Ms })
		m.P99Ms = med(func(r Result) float64 { return r.P99Ms })
		m.P999Ms = med(func(r Result) float64 { return r.P999Ms })
		m.MaxMs = med(func(r Result) float64 { return r.MaxMs })
		m.LongestGapMs = med(func(r Result) float64 { return r.LongestGapMs })
		m.MeanMs = med(func(r Result) float64 { return r.MeanMs })
		m.CacheHitRatio = med(func(r Result) float64 { return r.CacheHitRatio })
		m.DispatchesPerScan = med(func(r Result) float64 { return r.DispatchesPerScan })
		m.BusyRejections = uint64(med(func(r Result) float64 { return float64(r.BusyRejections) }))
		m.Hedges = uint64(med(func(r Result) float64 { return float64(r.Hedges) }))
		m.ErrorSamples, m.WrongSamples = nil, nil
		for _, r := range rs {
			m.ErrorSamples = append(m.ErrorSamples, r.ErrorSamples...)
			m.WrongSamples = append(m.WrongSamples, r.WrongSamples...)
		}
		out.Results = append(out.Results, m)
	}
	return &out, nil
}
