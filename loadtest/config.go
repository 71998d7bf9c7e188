package loadtest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scanplane/scanplane/selection"
	"github.com/scanplane/scanplane/tablets"
)

// ErrBadConfig: a Config field is out of range; the message names it.
var ErrBadConfig = errors.New("loadtest: bad config")

// Fault kinds. A fault spec is one kind or several joined by "+"
// ("slow-server+hot-tablet"); each spec is one column of the comparison.
const (
	// FaultNone: no fault, the baseline.
	FaultNone = "none"
	// FaultSlowServer: one scan server of the fault host stops serving for
	// SlowPause's DUR every EVERY (a GC pause), through the scanserver's
	// --fault-pause and --fault-server 0 flags.
	FaultSlowServer = "slow-server"
	// FaultSlowHost: every block read on the fault host is SlowFactor×
	// slower (--fault-slow).
	FaultSlowHost = "slow-host"
	// FaultHungServer: the fault host's scanserver process is SIGSTOPped
	// for the fault window, then SIGCONTed.
	FaultHungServer = "hung-server"
	// FaultCrashHost: the fault host's process is SIGKILLed at the start of
	// the fault window and restarted at its end.
	FaultCrashHost = "crash-host"
	// FaultHotTablet: during the fault window HotShare of the scans go to
	// one tablet (the 100-clients-one-tablet case).
	FaultHotTablet = "hot-tablet"
	// FaultCrashCoordinator: the fault coordinator (FaultCoordinator) is
	// SIGKILLed at the start of the fault window and restarted, with the
	// same name, ports and data directory, at its end. Needs
	// Coordinators >= 2.
	FaultCrashCoordinator = "crash-coordinator"
	// FaultHungCoordinator: the fault coordinator's process (with its NATS
	// node) is SIGSTOPped for the fault window (3.5 s with the default
	// Duration), then SIGCONTed. Needs Coordinators >= 2.
	FaultHungCoordinator = "hung-coordinator"
	// FaultHeterogeneous: the fault host's scan servers run half the
	// workers of the others' (scanserver --workers Workers/2 against
	// Workers), from the host's (re)start before the phase to its end: a
	// host of a smaller machine type.
	FaultHeterogeneous = "heterogeneous"
	// FaultAntagonist: Prequal's antagonist load. For the fault window a
	// CPU-burning child process (AntagonistThreads busy threads) runs
	// beside the fault host's scanserver, both pinned to one CPU
	// (AntagonistCPU); then the antagonist is killed and the scanserver
	// gets its own CPU affinity back. See antagonist.go.
	FaultAntagonist = "antagonist"
)

// FaultNames lists the fault kinds.
func FaultNames() []string {
	return []string{FaultNone, FaultSlowServer, FaultSlowHost, FaultHungServer, FaultCrashHost, FaultHotTablet,
		FaultCrashCoordinator, FaultHungCoordinator, FaultHeterogeneous, FaultAntagonist}
}

// flagFaults are injected with scanserver flags: active from the fault
// host's (re)start before the phase's warm-up until the phase ends.
var flagFaults = []string{FaultSlowServer, FaultSlowHost, FaultHeterogeneous}

// timedFaults are injected by the harness during the fault window.
var timedFaults = []string{FaultHungServer, FaultCrashHost, FaultHotTablet, FaultCrashCoordinator, FaultHungCoordinator, FaultAntagonist}

// processFaults need control over the cluster's processes.
var processFaults = []string{FaultSlowServer, FaultSlowHost, FaultHungServer, FaultCrashHost, FaultCrashCoordinator, FaultHungCoordinator,
	FaultHeterogeneous, FaultAntagonist}

// coordinatorFaults hit a coordinator; they need several.
var coordinatorFaults = []string{FaultCrashCoordinator, FaultHungCoordinator}

// ParseFault splits a fault spec into its kinds (sorted, deduplicated);
// "none" combined with others is dropped.
func ParseFault(spec string) ([]string, error) {
	var kinds []string
	for _, k := range strings.Split(spec, "+") {
		k = strings.TrimSpace(k)
		if !slices.Contains(FaultNames(), k) {
			return nil, fmt.Errorf("%w: Faults: unknown fault %q in %q (known: %s; combine with +)", ErrBadConfig, k, spec, strings.Join(FaultNames(), ", "))
		}
		if !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) > 1 {
		kinds = slices.DeleteFunc(kinds, func(k string) bool { return k == FaultNone })
	}
	slices.Sort(kinds)
	return kinds, nil
}

// PolicySpec is one entry of Config.Policies: a selection policy name
// (selection.PolicyNames()) with an optional ":hedge" or ":nohedge"
// suffix, or a suffix of profile options ":name=value+name=value", as
// policysim's -policies takes them ("adaptive:cacheAffinity=false").
// clickhouse-* policies hedge by default in the load test (ClickHouse's
// use_hedged_requests defaults to 1) and adaptive always has its own
// budgeted hedging; ":nohedge" turns hedging off.
type PolicySpec struct {
	Label  string // as written; the name in the report
	Policy string // selection policy
	Hedge  bool   // the profile's "hedge" option (only for policies that have it)
	// Options: profile options, "name=value" joined by "+"; a value is
	// JSON, else a string. An option the policy does not read is refused.
	Options string
}

// hedgeable reports whether a policy has the "hedge" option.
func hedgeable(policy string) bool {
	return strings.HasPrefix(policy, "clickhouse-") || policy == selection.PolicyAdaptive
}

// PolicyCurrent is the Policies entry that leaves a running cluster's
// profiles as they are.
const PolicyCurrent = "current"

// ParsePolicy parses one Config.Policies entry.
func ParsePolicy(s string) (PolicySpec, error) {
	if strings.TrimSpace(s) == PolicyCurrent {
		return PolicySpec{Label: PolicyCurrent}, nil
	}
	name, suffix, hasSuffix := strings.Cut(strings.TrimSpace(s), ":")
	if !slices.Contains(selection.PolicyNames(), name) {
		return PolicySpec{}, fmt.Errorf("%w: Policies: unknown policy %q (known: %s)", ErrBadConfig, name, strings.Join(selection.PolicyNames(), ", "))
	}
	ps := PolicySpec{Label: strings.TrimSpace(s), Policy: name, Hedge: hedgeable(name)}
	if hasSuffix {
		switch {
		case suffix == "hedge" || suffix == "nohedge":
			if !hedgeable(name) {
				return PolicySpec{}, fmt.Errorf("%w: Policies: %q: policy %s has no hedge option", ErrBadConfig, s, name)
			}
			ps.Hedge = suffix == "hedge"
		case strings.Contains(suffix, "="):
			ps.Options = suffix
			if _, err := ProfilesJSON(ps, 1); err != nil {
				return PolicySpec{}, fmt.Errorf("%w: Policies: %q: %w", ErrBadConfig, s, err)
			}
		default:
			return PolicySpec{}, fmt.Errorf("%w: Policies: %q: suffix must be :hedge, :nohedge or options :name=value[+name=value]", ErrBadConfig, s)
		}
	}
	return ps, nil
}

// Config configures a load test. Start from DefaultConfig (or
// QuickConfig); every field documents its unit and default.
type Config struct {
	// Coordinators: coordinator processes of the local cluster (each
	// embeds one node of a NATS cluster when 2 or more, see localcluster);
	// 0 (default) = 3 when a fault spec has crash-coordinator or
	// hung-coordinator, else 1 (a policy comparison is not disturbed by
	// idle coordinators). At most 9.
	Coordinators int
	// Hosts: scanserver processes of the local cluster; default 4.
	Hosts int
	// ServersPerHost: scan servers per host; default 2.
	ServersPerHost int
	// Zones: hosts spread round-robin over this many zones; default 1.
	Zones int
	// NATS and Coordinator target a running cluster instead of starting a
	// local one: its NATS URL, and optionally the coordinator's actor
	// address (default: found on NATS). Default "" (local cluster).
	// Against a running cluster only the none and hot-tablet faults are
	// possible, and caches are not reset between policies.
	NATS        string
	Coordinator string
	// ProfilesFile: the coordinator's --profiles file, rewritten for every
	// policy before a reload. Local cluster: default DataDir/profiles.json.
	// Running cluster: required to compare policies; without it Policies
	// must be just "current" (PolicyCurrent: the cluster's own profiles).
	ProfilesFile string
	// BinDir holds the coordinator and scanserver executables; "" = find
	// or build them (localcluster.FindBinaries).
	BinDir string
	// DataDir for the local cluster; "" = a temporary directory removed at
	// the end.
	DataDir string
	// CacheSize: block cache bytes per host; 0 (default) = auto: 1.5 ×
	// (table bytes / Hosts), at least 1 MiB, so a host holds its own share
	// of the tablets but not the whole table and affinity matters.
	CacheSize int64
	// Heartbeat: scan-server heartbeat interval; default 1s.
	Heartbeat time.Duration
	// Workers: concurrent scans per scan server (scanserver --workers,
	// passed to every host); default 4, the scanserver's own default. The
	// heterogeneous fault gives the fault host Workers/2.
	Workers int

	// Table to scan; default "loadtest". Reused when it exists with Rows
	// rows and Tablets tablets of generated data (tablets.GenerateRows).
	Table string
	// Rows of generated data; default 200000.
	Rows int
	// Tablets the table is split into; default 64.
	Tablets int

	// Clients: concurrent scanning goroutines (one shared client
	// library instance); default 32.
	Clients int
	// Rate: open loop at this many scans/s in total, latency counted from
	// each scan's scheduled start; 0 = closed loop. Default 250.
	Rate float64
	// Zipf: Zipfian constant of tablet popularity; 0 = uniform. Default
	// 0.99 (YCSB).
	Zipf float64
	// ScanRows: a short scan reads 1..ScanRows rows (uniform); default 100
	// (YCSB workload E).
	ScanRows int
	// Unverified publishes, as Table's next generation, a copy of its
	// verified generation that names the same files without block roots,
	// and scans it with client.ScanOptions.AllowUnverified: no proofs
	// sent, none checked. The table name and tablet rows are unchanged,
	// so every tablet has the same home hosts as in a verified run, and a
	// run with it beside one without gives what verification costs. A
	// run without it never scans such a generation: it makes the verified
	// one current again.
	Unverified bool
	// FullTablet: fraction of scans that read a whole tablet; default
	// 0.001 (a whole tablet is ~30× a short scan: at 1% these scans alone
	// would set the p99).
	FullTablet float64
	// Duration: measurement window per policy and fault; default 7s.
	Duration time.Duration
	// Warmup before each measurement window (excluded from the figures, but
	// its wrong rows and errors are reported); default 3s.
	Warmup time.Duration
	// ScanTimeout: a scan not finished after this long is an error;
	// default 30s.
	ScanTimeout time.Duration
	// Drain: after the window, scans still due may start this late before
	// they are counted as missed (open loop overload); default 5s.
	Drain time.Duration

	// Faults: fault specs compared side by side (see FaultNames; kinds
	// combine with "+"). Default DefaultFaults.
	Faults []string
	// FaultHost: index of the host that gets the fault; default 0.
	FaultHost int
	// FaultCoordinator: index of the coordinator crash-coordinator and
	// hung-coordinator hit; -1 (default) = the one the load's clients
	// send their requests to at the fault's start (client.Coordinator).
	FaultCoordinator int
	// FaultAfter: timed faults (hung-server, crash-host, hot-tablet,
	// antagonist, the coordinator faults) start this long into the
	// measurement window; 0 = Duration/4.
	FaultAfter time.Duration
	// FaultFor: how long timed faults last; 0 = Duration/2.
	FaultFor time.Duration
	// SlowPause: slow-server's pause "DUR/EVERY"; default "150ms/1s".
	SlowPause string
	// SlowFactor: slow-host's block read slowdown; default 10.
	SlowFactor float64
	// HotShare: share of scans on the hot tablet during hot-tablet;
	// default 0.8.
	HotShare float64
	// HotTablet: the hot tablet's index; -1 (default) = Tablets/2.
	HotTablet int
	// AntagonistThreads: busy threads of the antagonist process; default
	// 1. They share its one CPU, so more threads take a larger share of
	// it from the scanserver, never more than the one CPU.
	AntagonistThreads int
	// AntagonistCPU: the CPU the antagonist and the fault host's
	// scanserver are pinned to during the fault window; -1 (default) =
	// the lowest-numbered CPU the scanserver may run on.
	AntagonistCPU int

	// Policies compared, in order (see ParsePolicy). Default
	// DefaultPolicies.
	Policies []string

	// Seed of the workload; default 1.
	Seed uint64
	// Progress receives a live progress line (\r-terminated, every
	// ProgressEvery); nil = none.
	Progress io.Writer
	// ProgressEvery: progress line interval; default 500ms.
	ProgressEvery time.Duration
	// Log receives one line per step; nil = none.
	Log io.Writer
}

// policyPrequal is Prequal's policy name; the default comparison
// includes it when selection has it.
const policyPrequal = "prequal"

// DefaultPolicies are the policies of the default comparison: the seeds'
// (random, accumulo-host, bookkeeper, clickhouse-random hedged,
// ribbon-zone), the modern ones (peak-ewma, c3, and prequal when
// selection.PolicyNames has it) and adaptive, last.
func DefaultPolicies() []string {
	out := []string{selection.PolicyRandom, selection.PolicyAccumuloHost, selection.PolicyBookKeeper, selection.PolicyClickHouseRand,
		selection.PolicyRibbonZone, selection.PolicyPeakEWMA, selection.PolicyC3}
	if slices.Contains(selection.PolicyNames(), policyPrequal) {
		out = append(out, policyPrequal)
	}
	return append(out, selection.PolicyAdaptive)
}

// DefaultFaults are the faults of the default comparison.
func DefaultFaults() []string {
	return []string{FaultNone, FaultSlowServer, FaultHungServer, FaultSlowHost, FaultAntagonist, FaultHeterogeneous}
}

// DefaultConfig is the default comparison: DefaultPolicies under
// DefaultFaults, one phase of 3s warm-up + 7s of measurement (plus host
// restarts) per pair: 54 phases.
func DefaultConfig() Config {
	return Config{
		Hosts: 4, ServersPerHost: 2, Zones: 1, Heartbeat: time.Second, Workers: 4,
		Table: "loadtest", Rows: 200000, Tablets: 64,
		Clients: 32, Rate: 250, Zipf: 0.99, ScanRows: 100, FullTablet: 0.001,
		Duration: 7 * time.Second, Warmup: 3 * time.Second, ScanTimeout: 30 * time.Second, Drain: 5 * time.Second,
		Faults: DefaultFaults(), FaultCoordinator: -1, SlowPause: "150ms/1s", SlowFactor: 10, HotShare: 0.8, HotTablet: -1,
		AntagonistThreads: 1, AntagonistCPU: -1,
		Policies: DefaultPolicies(), Seed: 1, ProgressEvery: 500 * time.Millisecond,
	}
}

// QuickConfig is a smoke test: a smaller cluster and table, two policies
// under one fault (slow-server), short phases.
func QuickConfig() Config {
	c := DefaultConfig()
	c.Hosts, c.Rows, c.Tablets, c.Clients, c.Rate = 3, 20000, 16, 8, 100
	c.Duration, c.Warmup = 3*time.Second, time.Second
	c.Policies = []string{selection.PolicyAccumuloHost, selection.PolicyAdaptive}
	c.Faults = []string{FaultSlowServer}
	return c
}

// Local reports whether the harness starts its own cluster.
func (c Config) Local() bool { return c.NATS == "" }

// Validate names the first bad field; errors wrap ErrBadConfig.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, a...)...)
	}
	switch {
	case c.Local() && c.Coordinator != "":
		return bad("Coordinator %q needs NATS too (the running cluster's NATS URL)", c.Coordinator)
	case c.Local() && (c.Hosts < 1 || c.Hosts > 64):
		return bad("Hosts %d must be in [1, 64]", c.Hosts)
	case c.Local() && (c.ServersPerHost < 1 || c.ServersPerHost > 64):
		return bad("ServersPerHost %d must be in [1, 64]", c.ServersPerHost)
	case c.Local() && (c.Zones < 1 || c.Zones > c.Hosts):
		return bad("Zones %d must be in [1, Hosts=%d]", c.Zones, c.Hosts)
	case c.CacheSize < 0:
		return bad("CacheSize %d must be >= 0 (0 = auto)", c.CacheSize)
	case c.Heartbeat <= 0:
		return bad("Heartbeat %v must be > 0", c.Heartbeat)
	case c.Local() && (c.Workers < 1 || c.Workers > 1024):
		return bad("Workers %d must be in [1, 1024]", c.Workers)
	case tablets.ValidateTableName(c.Table) != nil:
		return bad("Table: %v", tablets.ValidateTableName(c.Table))
	case c.Rows < 1 || c.Rows > 100_000_000:
		return bad("Rows %d must be in [1, 1e8]", c.Rows)
	case c.Tablets < 1 || c.Tablets > tablets.MaxTablets || c.Tablets > c.Rows:
		return bad("Tablets %d must be in [1, min(Rows=%d, %d)]", c.Tablets, c.Rows, tablets.MaxTablets)
	case c.Clients < 1 || c.Clients > 10000:
		return bad("Clients %d must be in [1, 10000]", c.Clients)
	case c.Rate < 0 || c.Rate > 1e6:
		return bad("Rate %v must be in [0, 1e6] scans/s (0 = closed loop)", c.Rate)
	case c.Zipf < 0 || c.Zipf >= 1:
		return bad("Zipf %v must be in [0, 1) (0 = uniform, 0.99 = YCSB)", c.Zipf)
	case c.ScanRows < 1:
		return bad("ScanRows %d must be >= 1", c.ScanRows)
	case c.FullTablet < 0 || c.FullTablet > 1:
		return bad("FullTablet %v must be in [0, 1]", c.FullTablet)
	case c.Duration <= 0:
		return bad("Duration %v must be > 0", c.Duration)
	case c.Warmup < 0:
		return bad("Warmup %v must be >= 0", c.Warmup)
	case c.ScanTimeout <= 0:
		return bad("ScanTimeout %v must be > 0", c.ScanTimeout)
	case c.Drain < 0:
		return bad("Drain %v must be >= 0", c.Drain)
	case len(c.Faults) == 0:
		return bad("Faults is empty (use %q for a run without faults)", FaultNone)
	case c.Local() && (c.FaultHost < 0 || c.FaultHost >= c.Hosts):
		return bad("FaultHost %d must be in [0, Hosts=%d)", c.FaultHost, c.Hosts)
	case c.Coordinators < 0 || c.Coordinators > 9:
		return bad("Coordinators %d must be in [0, 9] (0 = auto)", c.Coordinators)
	case !c.Local() && c.Coordinators != 0:
		return bad("Coordinators %d applies to a local cluster only (NATS is set)", c.Coordinators)
	case c.FaultCoordinator < -1 || c.FaultCoordinator >= c.coordinators():
		return bad("FaultCoordinator %d must be -1 (the clients' coordinator) or in [0, Coordinators=%d)", c.FaultCoordinator, c.coordinators())
	case c.FaultAfter < 0 || c.FaultFor < 0:
		return bad("FaultAfter %v and FaultFor %v must be >= 0", c.FaultAfter, c.FaultFor)
	case c.faultAfter()+c.faultFor() > c.Duration:
		return bad("FaultAfter %v + FaultFor %v exceed Duration %v", c.faultAfter(), c.faultFor(), c.Duration)
	case c.SlowFactor < 1:
		return bad("SlowFactor %v must be >= 1", c.SlowFactor)
	case c.HotShare < 0 || c.HotShare > 1:
		return bad("HotShare %v must be in [0, 1]", c.HotShare)
	case c.HotTablet < -1 || c.HotTablet >= c.Tablets:
		return bad("HotTablet %d must be -1 (auto) or in [0, Tablets=%d)", c.HotTablet, c.Tablets)
	case c.AntagonistThreads < 1 || c.AntagonistThreads > 64:
		return bad("AntagonistThreads %d must be in [1, 64]", c.AntagonistThreads)
	case c.AntagonistCPU < -1 || c.AntagonistCPU >= 1024:
		return bad("AntagonistCPU %d must be -1 (the scanserver's lowest CPU) or a CPU number in [0, 1024)", c.AntagonistCPU)
	case len(c.Policies) == 0:
		return bad("Policies is empty")
	case c.ProgressEvery < 0:
		return bad("ProgressEvery %v must be >= 0", c.ProgressEvery)
	}
	if _, _, err := parsePause(c.SlowPause); err != nil {
		return bad("SlowPause: %v", err)
	}
	if c.Coordinator != "" {
		if _, _, err := net.SplitHostPort(c.Coordinator); err != nil {
			return bad("Coordinator %q: %v", c.Coordinator, err)
		}
	}
	seenF := map[string]bool{}
	for _, f := range c.Faults {
		kinds, err := ParseFault(f)
		if err != nil {
			return err
		}
		key := strings.Join(kinds, "+")
		if seenF[key] {
			return bad("Faults: %q listed twice", f)
		}
		seenF[key] = true
		for _, k := range kinds {
			if !c.Local() && slices.Contains(processFaults, k) {
				return bad("Faults: %q needs process control; against a running cluster only %s and %s are possible", k, FaultNone, FaultHotTablet)
			}
			if k == FaultAntagonist && c.AntagonistCPU >= 0 {
				var own unix.CPUSet
				if err := unix.SchedGetaffinity(0, &own); err == nil && !own.IsSet(c.AntagonistCPU) {
					return bad("AntagonistCPU %d is not one this process (and so the scanservers it starts) may run on: %s", c.AntagonistCPU, formatCPUSet(own))
				}
			}
			if k == FaultHeterogeneous && c.Workers < 2 {
				return bad("Faults: %q gives the fault host Workers/2 workers: needs Workers >= 2 (have %d)", k, c.Workers)
			}
			if slices.Contains(coordinatorFaults, k) && c.coordinators() < 2 {
				return bad("Faults: %q needs Coordinators >= 2 (have %d; 0 = auto gives 3)", k, c.Coordinators)
			}
		}
	}
	seenP := map[string]bool{}
	for _, p := range c.Policies {
		ps, err := ParsePolicy(p)
		if err != nil {
			return err
		}
		if ps.Label == PolicyCurrent && c.Local() {
			return bad("Policies: %q only applies to a running cluster (NATS set)", PolicyCurrent)
		}
		if ps.Label != PolicyCurrent && !c.Local() && c.ProfilesFile == "" {
			return bad("ProfilesFile is empty: switching a running cluster to policy %q needs the coordinator's --profiles file (or use Policies = [%q])", ps.Label, PolicyCurrent)
		}
		if seenP[ps.Label] {
			return bad("Policies: %q listed twice", p)
		}
		seenP[ps.Label] = true
	}
	return nil
}

// coordinators is Coordinators with the auto default applied (an unknown
// fault counts as none: Validate reports it).
func (c Config) coordinators() int {
	if c.Coordinators > 0 {
		return c.Coordinators
	}
	for _, f := range c.Faults {
		kinds, _ := ParseFault(f)
		for _, k := range kinds {
			if slices.Contains(coordinatorFaults, k) {
				return 3
			}
		}
	}
	return 1
}

func (c Config) faultAfter() time.Duration {
	if c.FaultAfter > 0 {
		return c.FaultAfter
	}
	return c.Duration / 4
}

func (c Config) faultFor() time.Duration {
	if c.FaultFor > 0 {
		return c.FaultFor
	}
	return c.Duration / 2
}

func (c Config) hotTablet() int {
	if c.HotTablet >= 0 {
		return c.HotTablet
	}
	return c.Tablets / 2
}

// parsePause parses "DUR/EVERY" with 0 < DUR < EVERY.
func parsePause(s string) (pause, every time.Duration, err error) {
	a, b, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want DUR/EVERY, e.g. 150ms/1s", s)
	}
	if pause, err = time.ParseDuration(a); err == nil {
		every, err = time.ParseDuration(b)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("%q: %v", s, err)
	}
	if pause <= 0 || every <= pause {
		return 0, 0, fmt.Errorf("%q: want 0 < DUR < EVERY", s)
	}
	return pause, every, nil
}
