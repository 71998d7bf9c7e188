// Command loadtest is scanplane's load-test harness: it brings up a local
// cluster of real processes (or targets a running one), ingests a
// generated table, runs a verified scan workload for each selection policy
// under each fault, prints a comparison table and writes report.json and
// PNG plots to --out. See package loadtest.
//
//	go run ./cmd/loadtest                 # default comparison, several minutes
//	go run ./cmd/loadtest --quick         # smoke test
//	go run ./cmd/loadtest --fault none --fault hung-server --policies clickhouse-random,adaptive
//	go run ./cmd/loadtest --fault crash-coordinator,hung-coordinator   # 3 coordinators
//	go run ./cmd/loadtest --fault heterogeneous,antagonist --policies accumulo-host,adaptive
//	go run ./cmd/loadtest --median a,b,c  # combine three runs' report.json into medians
//	go run ./cmd/loadtest --cpuprofile cpu.pprof --memprofile mem.pprof  # profile the client side (go tool pprof)
//
// Exit status: 0 when every scan was right, 1 on a runtime failure or when
// any scan returned wrong rows, 2 on bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/term"

	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/loadtest"
	"github.com/scanplane/scanplane/selection"
)

func main() {
	// The antagonist fault re-executes this binary as its CPU burner.
	if loadtest.BurnArgs(os.Args[1:]) {
		os.Exit(loadtest.BurnMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// about is what --help says the command does.
const about = "Compare the selection policies under injected faults on a local cluster of real processes (or a running one, --nats)."

// version is the build version, set at link time with
// -ldflags "-X main.version=v1.2.3"; empty = what cliutil.Version finds.
var version string

// listFlag is a list flag: repeatable, each value may hold several items
// separated by commas; the first Set replaces the default.
type listFlag struct {
	p   *[]string
	set bool
}

func (l *listFlag) String() string {
	if l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

func (l *listFlag) Set(s string) error {
	if !l.set {
		*l.p, l.set = nil, true
	}
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l.p = append(*l.p, v)
		}
	}
	return nil
}

type bytesFlag struct{ p *int64 }

func (b bytesFlag) String() string {
	if b.p == nil || *b.p == 0 {
		return "auto"
	}
	return strconv.FormatInt(*b.p, 10)
}

func (b bytesFlag) Set(s string) error {
	if s == "auto" {
		*b.p = 0
		return nil
	}
	n, err := cliutil.ParseBytes(s)
	*b.p = n
	return err
}

// options are the flags that are not Config fields.
type options struct {
	out      string
	quick    bool
	median   string
	progress string
	// closedLoop: --closed-loop N (0 = not given).
	closedLoop int
	// cpuProfile, memProfile: --cpuprofile, --memprofile files ("" = none).
	cpuProfile, memProfile string
}

func define(fs *flag.FlagSet, c *loadtest.Config, o *options) {
	fs.IntVar(&c.Coordinators, "coordinators", c.Coordinators, "coordinator processes of the local cluster, each a node of an embedded NATS cluster when 2 or more (0 = 3 with a crash-coordinator or hung-coordinator fault, else 1)")
	fs.IntVar(&c.Hosts, "hosts", c.Hosts, "scanserver processes (hosts) of the local cluster")
	fs.IntVar(&c.ServersPerHost, "servers-per-host", c.ServersPerHost, "scan servers per host")
	fs.IntVar(&c.Zones, "zones", c.Zones, "zones the hosts are spread over")
	fs.StringVar(&c.NATS, "nats", c.NATS, "target a running cluster: its NATS `URLS`, comma separated (default: start a local cluster)")
	fs.StringVar(&c.Coordinator, "coordinator", c.Coordinator, "running cluster: the coordinator's actor `ADDR` (default: found on NATS)")
	fs.StringVar(&c.ProfilesFile, "profiles-file", c.ProfilesFile, "the coordinator's --profiles `FILE`, rewritten per policy (default for a local cluster: profiles.json in --data; a running cluster needs it to switch policies)")
	fs.StringVar(&c.BinDir, "bin", c.BinDir, "`DIR` with the coordinator and scanserver executables (default: find or build them)")
	fs.StringVar(&c.DataDir, "data", c.DataDir, "local cluster data `DIR` (default: a temporary directory, removed afterwards)")
	fs.Var(bytesFlag{&c.CacheSize}, "cache-size", "block cache `SIZE` per host, e.g. 8MiB (auto: 1.5 × the table / hosts)")
	fs.DurationVar(&c.Heartbeat, "heartbeat", c.Heartbeat, "scan-server heartbeat interval")
	fs.IntVar(&c.Workers, "workers", c.Workers, "concurrent scans per scan server (scanserver --workers; heterogeneous gives the fault host half)")
	fs.StringVar(&c.Table, "table", c.Table, "`TABLE` to scan (ingested unless present with the same rows and tablets)")
	fs.IntVar(&c.Rows, "rows", c.Rows, "rows of generated data")
	fs.IntVar(&c.Tablets, "tablets", c.Tablets, "tablets")
	fs.IntVar(&c.Clients, "clients", c.Clients, "concurrent clients (goroutines sharing one client library)")
	fs.Float64Var(&c.Rate, "rate", c.Rate, "open loop: total scans/s, latency from the scheduled start (0 = closed loop)")
	fs.Float64Var(&c.Zipf, "zipf", c.Zipf, "Zipfian constant of tablet popularity (0 = uniform, 0.99 = YCSB)")
	fs.IntVar(&c.ScanRows, "scan-rows", c.ScanRows, "a short scan reads 1..N rows")
	fs.Float64Var(&c.FullTablet, "full-tablet", c.FullTablet, "fraction of scans that read a whole tablet")
	fs.BoolVar(&c.Unverified, "unverified", c.Unverified, "scan the table as a new generation without block roots, unverified: same tablets and home hosts (the cost of verification: compare with a run without the flag, which restores the verified generation)")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "measurement window per policy and fault")
	fs.DurationVar(&c.Warmup, "warmup", c.Warmup, "warm-up before each measurement window (not in the figures)")
	fs.DurationVar(&c.ScanTimeout, "scan-timeout", c.ScanTimeout, "a scan not done after this long is an error")
	fs.Var(&listFlag{p: &c.Faults}, "fault", "`FAULTS` to compare, repeatable or comma separated: "+strings.Join(loadtest.FaultNames(), ", ")+
		" (combine with +). heterogeneous: the fault host runs --workers/2 per server for the whole phase; antagonist: for the fault window a"+
		" CPU-burning process runs beside the fault host's scanserver, both pinned to one CPU (Prequal's antagonist load)")
	fs.IntVar(&c.FaultHost, "fault-host", c.FaultHost, "index of the host that gets the fault")
	fs.IntVar(&c.FaultCoordinator, "fault-coordinator", c.FaultCoordinator, "index of the coordinator crash-coordinator and hung-coordinator hit (-1 = the one the load's clients talk to)")
	fs.DurationVar(&c.FaultAfter, "fault-after", c.FaultAfter, "timed faults start this long into the window (0 = duration/4)")
	fs.DurationVar(&c.FaultFor, "fault-for", c.FaultFor, "timed faults last this long (0 = duration/2)")
	fs.StringVar(&c.SlowPause, "slow-pause", c.SlowPause, "slow-server: pause DUR every EVERY (`DUR/EVERY`)")
	fs.Float64Var(&c.SlowFactor, "slow-factor", c.SlowFactor, "slow-host: block reads this many times slower")
	fs.Float64Var(&c.HotShare, "hot-share", c.HotShare, "hot-tablet: share of scans on the hot tablet")
	fs.IntVar(&c.HotTablet, "hot-tablet", c.HotTablet, "hot-tablet: the tablet (-1 = tablets/2)")
	fs.IntVar(&c.AntagonistThreads, "antagonist-threads", c.AntagonistThreads, "antagonist: busy threads of the CPU burner (all on its one CPU)")
	fs.IntVar(&c.AntagonistCPU, "antagonist-cpu", c.AntagonistCPU, "antagonist: the CPU the burner and the fault host's scanserver are pinned to (-1 = the scanserver's lowest)")
	fs.Var(&listFlag{p: &c.Policies}, "policies", "`POLICIES` to compare, repeatable or comma separated ("+strings.Join(selection.PolicyNames(), ", ")+
		"; suffix :hedge or :nohedge, or profile options :name=value[+name=value]; clickhouse-* hedge unless :nohedge; \"current\" = a running cluster's own profiles)")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "workload seed")
	fs.StringVar(&o.out, "out", o.out, "`DIR` for report.json and the plots (\"\" = none)")
	fs.BoolVar(&o.quick, "quick", o.quick, "smoke test of about 20 s: accumulo-host and adaptive under slow-server, smaller cluster, table and phases (explicit flags still apply)")
	fs.StringVar(&o.median, "median", o.median, "no run: combine these report `DIRS` (comma separated) into medians, print and write them to --out")
	fs.StringVar(&o.progress, "progress", "auto", "live progress line on stderr, `WHEN`: auto (when a terminal), on, off")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (the clients, the ingest, the harness) over the whole run to this `FILE` (go tool pprof)")
	fs.StringVar(&o.memProfile, "memprofile", "", "write an allocation profile of this process (alloc_space/alloc_objects since the start, and in use at the end) to this `FILE` when the run ends (go tool pprof)")
	fs.IntVar(&o.closedLoop, "closed-loop", 0, "saturation run: N clients scanning back to back, no think time (sets --clients N --rate 0); the report adds scans/s and the CPU each process kind used")
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := loadtest.DefaultConfig()
	opts := options{out: "loadtest-out"}
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	define(fs, &cfg, &opts)
	showVersion := fs.Bool("version", false, cliutil.VersionUsage)
	if err := cliutil.ParseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			cliutil.PrintHelp(stdout, "loadtest [flags]", about, fs)
			return 0
		}
		fmt.Fprintf(stderr, "loadtest: %v\nrun 'loadtest --help'\n", err)
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, "loadtest", cliutil.Version(version))
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "loadtest: unexpected arguments %q\n", fs.Args())
		return 2
	}
	explicit := map[string]string{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = f.Value.String() })
	if opts.quick {
		// Start again from the quick config and re-apply the explicit flags.
		cfg = loadtest.QuickConfig()
		fs2 := flag.NewFlagSet("loadtest", flag.ContinueOnError)
		fs2.SetOutput(io.Discard)
		define(fs2, &cfg, &opts)
		for name, v := range explicit {
			if err := fs2.Set(name, v); err != nil {
				fmt.Fprintf(stderr, "loadtest: --%s: %v\n", name, err)
				return 2
			}
		}
	}
	if opts.closedLoop != 0 {
		if opts.closedLoop < 1 || opts.closedLoop > 4096 {
			fmt.Fprintf(stderr, "loadtest: --closed-loop %d must be in [1, 4096] clients\n", opts.closedLoop)
			return 2
		}
		if _, ok := explicit["rate"]; ok {
			fmt.Fprintln(stderr, "loadtest: --closed-loop and --rate exclude each other (a closed loop has no rate)")
			return 2
		}
		cfg.Clients, cfg.Rate = opts.closedLoop, 0
	}
	if _, ok := explicit["policies"]; !ok && cfg.NATS != "" && cfg.ProfilesFile == "" {
		cfg.Policies = []string{loadtest.PolicyCurrent}
	}
	if opts.median != "" {
		return median(strings.Split(opts.median, ","), opts.out, stdout, stderr)
	}
	cfg.Log = stderr
	switch opts.progress {
	case "on":
		cfg.Progress = stderr
	case "off":
	case "auto":
		if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			cfg.Progress = stderr
		}
	default:
		fmt.Fprintf(stderr, "loadtest: --progress %q: want auto, on or off\n", opts.progress)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	stopProfiles, err := startProfiles(opts.cpuProfile, opts.memProfile)
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 2
	}
	rep, err := loadtest.Run(ctx, cfg)
	code := 0
	if perr := stopProfiles(); perr != nil {
		fmt.Fprintln(stderr, "loadtest:", perr)
		code = 1
	}
	if rep != nil && len(rep.Results) > 0 {
		fmt.Fprintln(stdout)
		_ = rep.WriteTable(stdout)
		if opts.out != "" {
			files, werr := rep.WriteDir(opts.out)
			for _, f := range files {
				fmt.Fprintln(stderr, "wrote", f)
			}
			if werr != nil {
				fmt.Fprintln(stderr, "loadtest: writing results:", werr)
				code = 1
			}
		}
		if n := rep.TotalWrong(); n > 0 {
			fmt.Fprintf(stderr, "loadtest: %d scans returned WRONG rows\n", n)
			code = 1
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 1
	}
	return code
}

// startProfiles starts a CPU profile into cpuFile (if not empty) and
// returns a function that stops it and writes the allocation profile
// ("allocs": every allocation sampled since the start, and what is in
// use after a GC) into memFile (if not empty). Both files are created
// here, so that a path that cannot be written fails before the run.
func startProfiles(cpuFile, memFile string) (stop func() error, err error) {
	var cpu, mem *os.File
	if memFile != "" {
		if mem, err = os.Create(memFile); err != nil {
			return nil, fmt.Errorf("--memprofile: %w", err)
		}
	}
	if cpuFile != "" {
		if cpu, err = os.Create(cpuFile); err == nil {
			if err = pprof.StartCPUProfile(cpu); err != nil {
				cpu.Close()
			}
		}
		if err != nil {
			if mem != nil {
				mem.Close()
			}
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
	}
	return func() error {
		var errs []error
		if cpu != nil {
			pprof.StopCPUProfile()
			if err := cpu.Close(); err != nil {
				errs = append(errs, fmt.Errorf("--cpuprofile: %w", err))
			}
		}
		if mem != nil {
			runtime.GC() // the in-use figures as of the end of the run
			if err := pprof.Lookup("allocs").WriteTo(mem, 0); err != nil {
				errs = append(errs, fmt.Errorf("--memprofile: %w", err))
			}
			if err := mem.Close(); err != nil {
				errs = append(errs, fmt.Errorf("--memprofile: %w", err))
			}
		}
		return errors.Join(errs...)
	}, nil
}

func median(dirs []string, out string, stdout, stderr io.Writer) int {
	var reps []*loadtest.Report
	for _, d := range dirs {
		path := d
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			path = filepath.Join(d, "report.json")
		}
		r, err := loadtest.ReadReport(path)
		if err != nil {
			fmt.Fprintln(stderr, "loadtest:", err)
			return 1
		}
		reps = append(reps, r)
	}
	m, err := loadtest.MedianReport(reps)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	_ = m.WriteTable(stdout)
	if out != "" {
		files, err := m.WriteDir(out)
		for _, f := range files {
			fmt.Fprintln(stderr, "wrote", f)
		}
		if err != nil {
			fmt.Fprintln(stderr, "loadtest:", err)
			return 1
		}
	}
	return 0
}
