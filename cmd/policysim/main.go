// Command policysim runs the discrete-event simulation of replica
// selection (package policysim) over the selection package's policies and
// prints each policy's latency quantiles per setting (docs/policysim.md).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/scanplane/scanplane/policysim"
)

func main() {
	if os.Getenv("GOGC") == "" {
		// A run's heap is mostly long-lived state (every coordinator's
		// counters, views and tablet states): collecting it a quarter as
		// often costs memory, never a result.
		debug.SetGCPercent(400)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("policysim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	preset := fs.String("preset", "c3", "settings to run: c3, scale, faults, loadtest, small or all")
	policies := fs.String("policies", strings.Join(policysim.DefaultPolicies, ","), "comma-separated policies")
	asJSON := fs.Bool("json", false, "print one JSON object per setting and policy instead of tables")
	requests := fs.Int("requests", 0, "measured requests per run (0: the preset's)")
	warmup := fs.Duration("warmup", -1, "unmeasured time before the measurement (negative: the preset's)")
	heartbeat := fs.Duration("heartbeat", 0, "period of the servers' load reports (0: the preset's, 1s)")
	seed := fs.Uint64("seed", 1, "random seed of every run")
	serviceSeed := fs.Uint64("service-seed", 0, "seed of the service times alone (0: -seed): the same workload with other service times")
	only := fs.String("setting", "", "run only the preset's settings of this name")
	onlyU := fs.Float64("utilization", 0, "run only the preset's settings at this utilization (0: all)")
	plots := fs.String("plot", "", "directory to write a latency CDF plot per setting into (empty: none)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the runs to this file (empty: none)")
	memProfile := fs.String("memprofile", "", "write an allocation profile of the runs to this file at the end (empty: none)")
	diagnose := fs.Bool("diag", false, "also print per run one JSON line of what the policy saw when it chose (policysim.Diag)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "policysim: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfgs, err := policysim.Presets(*preset)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	names := strings.Split(*policies, ",")
	for _, p := range names {
		if !policysim.KnownPolicy(p) {
			fmt.Fprintf(stderr, "policysim: unknown policy %q\n", p)
			return 2
		}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "policysim:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "policysim:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		defer func() {
			if err := writeHeapProfile(*memProfile); err != nil {
				fmt.Fprintln(stderr, "policysim:", err)
			}
		}()
	}
	var all []*policysim.Result
	for _, cfg := range cfgs {
		if (*only != "" && cfg.Setting != *only) || (*onlyU != 0 && cfg.Utilization != *onlyU) {
			continue
		}
		cfg.Seed, cfg.ServiceSeed = *seed, *serviceSeed
		cfg.Diagnose = *diagnose
		if *requests > 0 {
			cfg.Requests = *requests
		}
		if *heartbeat > 0 {
			cfg.Heartbeat = *heartbeat
		}
		if *warmup >= 0 {
			cfg.Warmup = *warmup
		}
		var rs []*policysim.Result
		for _, p := range names {
			doc, err := policysim.ProfilesJSON(p, cfg)
			if err != nil {
				fmt.Fprintln(stderr, err)
				return 1
			}
			start := time.Now()
			r, err := policysim.Run(cfg, p, doc)
			if err != nil {
				fmt.Fprintln(stderr, err)
				return 1
			}
			fmt.Fprintf(stderr, "policysim: %s utilization %.2f %s: %d requests, %d events in %v\n", cfg.Setting, cfg.Utilization, p,
				r.Requests, r.Events, time.Since(start).Round(time.Millisecond))
			if *asJSON {
				if err := r.WriteJSON(stdout); err != nil {
					fmt.Fprintln(stderr, err)
					return 1
				}
			}
			if r.Diag != nil {
				if err := writeDiag(stdout, r); err != nil {
					fmt.Fprintln(stderr, err)
					return 1
				}
			}
			rs = append(rs, r)
		}
		if *plots != "" {
			path, err := policysim.WritePlot(*plots, rs)
			if err != nil {
				fmt.Fprintln(stderr, err)
				return 1
			}
			fmt.Fprintf(stderr, "policysim: wrote %s\n", path)
		}
		all = append(all, rs...)
	}
	if !*asJSON {
		if err := policysim.WriteTable(stdout, all); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	return 0
}

// writeDiag writes r's Diag as one JSON object and a newline.
func writeDiag(w io.Writer, r *policysim.Result) error {
	return json.NewEncoder(w).Encode(struct {
		Setting     string          `json:"setting"`
		Utilization float64         `json:"utilization"`
		Servers     int             `json:"servers"`
		Policy      string          `json:"policy"`
		Diag        *policysim.Diag `json:"diag"`
	}{r.Config.Setting, r.Config.Utilization, r.Config.Servers, r.Policy, r.Diag})
}

// writeHeapProfile writes the allocation profile (every allocation since
// the start, sampled, and what is live) to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
