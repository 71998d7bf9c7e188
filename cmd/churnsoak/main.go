// Command churnsoak is a soak test of the coordinator under membership
// churn (not a CI test: it runs for minutes). It starts a local cluster of
// real processes, ingests a table, and for --duration keeps joining and
// leaving fake scan servers — identities that only exist as heartbeats on
// NATS, --fake-servers of them cycling through, at most --fake-live at a
// time, each leaving with a `leaving` heartbeat or by falling silent —
// while --scanners goroutines run verified range scans through the client.
// It reads the coordinator's goroutines and heap (/metrics) and its actor
// and flow counts (/status) at the start and, after the churn stops and
// the coordinator has had --settle to reap, at the end; they must come
// back to the baseline within the stated tolerance.
//
//	go run ./cmd/churnsoak                     # 2 minutes of churn, 1000 fake servers
//	go run ./cmd/churnsoak --duration 10m --fake-live 400
//
// Tolerance: goroutines end <= start×1.1 + 20; heap end <= start×1.5 +
// 16 MiB (heap = the live heap at the last collection,
// go_memstats_next_gc_bytes ÷ (1 + GOGC/100), so garbage not yet collected
// does not count); tablet actors, host actors, flows, known servers and
// live servers end <= start. Each figure is the lowest of a few samples a
// second apart.
//
// Exit status: 0 when every scan was exact and every figure came back to
// its baseline, 1 otherwise (or on a runtime failure), 2 on bad flags.
//
// It is a command rather than part of cmd/loadtest because it measures
// the coordinator's resources rather than scan latency under policies, and
// shares none of loadtest's workload or report.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/scanplane/scanplane/internal/cliutil"
)

// version is the build version, set at link time with
// -ldflags "-X main.version=v1.2.3"; empty = what cliutil.Version finds.
var version string

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the command's flags.
type options struct {
	duration      time.Duration
	settle        time.Duration
	fakeServers   int
	fakePerHost   int
	fakeLive      int
	fakeGroup     string
	fakeHeartbeat time.Duration
	fakeLifeMin   time.Duration
	fakeLifeMax   time.Duration
	hosts         int
	servers       int
	rows          int
	tablets       int
	scanners      int
	data          string
	logLevel      string
	seed          uint64
}

func (o options) validate() error {
	switch {
	case o.duration <= 0:
		return fmt.Errorf("--duration %v must be > 0", o.duration)
	case o.settle <= 0:
		return fmt.Errorf("--settle %v must be > 0", o.settle)
	case o.fakeServers < 1:
		return fmt.Errorf("--fake-servers %d must be >= 1", o.fakeServers)
	case o.fakePerHost < 1 || o.fakePerHost > o.fakeServers:
		return fmt.Errorf("--fake-per-host %d must be in [1, --fake-servers=%d]", o.fakePerHost, o.fakeServers)
	case o.fakeLive < 1 || o.fakeLive > o.fakeServers:
		return fmt.Errorf("--fake-live %d must be in [1, --fake-servers=%d]", o.fakeLive, o.fakeServers)
	case o.fakeGroup == "":
		return fmt.Errorf("--fake-group is empty")
	case o.fakeHeartbeat < 10*time.Millisecond:
		return fmt.Errorf("--fake-heartbeat %v must be >= 10ms", o.fakeHeartbeat)
	case o.fakeLifeMin <= 0 || o.fakeLifeMax < o.fakeLifeMin:
		return fmt.Errorf("--fake-life %v..%v: want 0 < min <= max", o.fakeLifeMin, o.fakeLifeMax)
	case o.hosts < 1 || o.servers < 1:
		return fmt.Errorf("--hosts %d and --servers-per-host %d must be >= 1", o.hosts, o.servers)
	case o.rows < 1 || o.tablets < 1 || o.tablets > o.rows:
		return fmt.Errorf("--rows %d and --tablets %d: want 1 <= tablets <= rows", o.rows, o.tablets)
	case o.scanners < 1:
		return fmt.Errorf("--scanners %d must be >= 1", o.scanners)
	}
	return nil
}

func run(ctx context.Context, args []string, out, errOut io.Writer) int {
	var o options
	fs := flag.NewFlagSet("churnsoak", flag.ContinueOnError)
	fs.DurationVar(&o.duration, "duration", 2*time.Minute, "how long fake servers churn while scans run")
	fs.DurationVar(&o.settle, "settle", 3*time.Minute, "how long the coordinator may take afterwards to come back to its baseline")
	fs.IntVar(&o.fakeServers, "fake-servers", 1000, "distinct fake scan-server identities that join and leave (each may rejoin as a new incarnation)")
	fs.IntVar(&o.fakePerHost, "fake-per-host", 4, "fake servers per fake host")
	fs.IntVar(&o.fakeLive, "fake-live", 200, "fake servers alive at any one time")
	fs.StringVar(&o.fakeGroup, "fake-group", "churn", "resource `GROUP` of the fake servers; the real servers' group lets real scans be dispatched to them")
	fs.DurationVar(&o.fakeHeartbeat, "fake-heartbeat", time.Second, "heartbeat interval of a fake server")
	fs.DurationVar(&o.fakeLifeMin, "fake-life-min", 2*time.Second, "shortest life of a fake server")
	fs.DurationVar(&o.fakeLifeMax, "fake-life-max", 10*time.Second, "longest life of a fake server")
	fs.IntVar(&o.hosts, "hosts", 2, "real scanserver processes")
	fs.IntVar(&o.servers, "servers-per-host", 2, "scan servers per real host")
	fs.IntVar(&o.rows, "rows", 20000, "rows in the scanned table")
	fs.IntVar(&o.tablets, "tablets", 8, "tablets of the scanned table")
	fs.IntVar(&o.scanners, "scanners", 2, "goroutines running verified scans")
	fs.StringVar(&o.data, "data", "", "cluster data `DIR` (default: a temporary one, removed at the end)")
	fs.StringVar(&o.logLevel, "log-level", "warn", "log `LEVEL` of this command and the cluster's processes")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the scan ranges and fake-server lives")
	showVersion := fs.Bool("version", false, cliutil.VersionUsage)
	if err := cliutil.ParseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			cliutil.PrintHelp(out, "churnsoak [flags]", "Soak the coordinator under scan-server membership churn and check that its resources come back to their baseline.", fs)
			return 0
		}
		fmt.Fprintf(errOut, "churnsoak: %v\nrun 'churnsoak --help'\n", err)
		return 2
	}
	if *showVersion {
		fmt.Fprintln(out, "churnsoak", cliutil.Version(version))
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(errOut, "churnsoak: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if err := o.validate(); err != nil {
		fmt.Fprintln(errOut, "churnsoak:", err)
		return 2
	}
	ok, err := soak(ctx, o, out)
	if err != nil {
		fmt.Fprintln(errOut, "churnsoak:", err)
		return 1
	}
	if !ok {
		return 1
	}
	return 0
}
