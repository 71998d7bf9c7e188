package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/scanplane/scanplane/localcluster"
)

// defaultCoordinators is the coordinator count of `scanctl up` and
// `scanctl demo` (README "A cluster to play with").
const defaultCoordinators = 3

func runUp(ctx context.Context, g *globals, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	cfg := localcluster.Config{}
	fs.IntVar(&cfg.Coordinators, "coordinators", defaultCoordinators, "coordinator processes, each embedding one node of a NATS cluster (1..9); coordinator i listens on NATS 4222+i, routes 6222+i, actors 8090+2i, HTTP 8091+2i")
	fs.IntVar(&cfg.Hosts, "hosts", 3, "scanserver processes (hosts)")
	fs.IntVar(&cfg.ServersPerHost, "servers-per-host", 2, "scan servers per host")
	fs.IntVar(&cfg.Zones, "zones", 1, "zones (hosts spread round-robin)")
	fs.StringVar(&cfg.DataDir, "data", "./data", "data directory (JetStream store, logs)")
	fs.StringVar(&cfg.Profiles, "profiles", "", "selection profiles JSON for the coordinators")
	fs.StringVar(&cfg.BinDir, "bin", "", "directory with the coordinator and scanserver executables (default: next to scanctl, PATH, or built from source)")
	fs.StringVar(&cfg.LogLevel, "child-log-level", "info", "log level of the child processes")
	// Metrics on: each scanserver's /metrics on an ephemeral port,
	// printed below (README "A cluster to play with").
	cfg.HostMetrics = true
	noRestart := fs.Bool("no-restart", false, "do not restart a child process that dies (default: restart it, with exponential backoff from 1s to 30s)")
	if _, err := parse("up", g, fs, args, errOut); err != nil {
		return err
	}
	if err := checkSize(cfg.Hosts, cfg.ServersPerHost); err != nil {
		return err
	}
	if err := checkCoordinators(cfg.Coordinators); err != nil {
		return err
	}
	for i := 0; i < cfg.Coordinators; i++ {
		cfg.Addrs = append(cfg.Addrs, localcluster.WellKnownAddrs(i))
	}
	if cfg.Profiles != "" {
		abs, err := filepath.Abs(cfg.Profiles)
		if err != nil {
			return err
		}
		cfg.Profiles = abs
	}
	fmt.Fprintf(out, "starting %s + %d hosts × %d servers (data in %s) ...\n", coordinatorsText(cfg.Coordinators), cfg.Hosts, cfg.ServersPerHost, cfg.DataDir)
	cl, err := localcluster.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(out, "stopping the cluster ...")
		cl.Close()
		fmt.Fprintln(out, "stopped")
	}()
	printReady(out, cl, cfg.DataDir)
	fmt.Fprintln(out, "try: scanctl ingest --table demo --generate 100000 && scanctl scan --table demo --start row000000100 --end row000000110")
	fmt.Fprintln(out, "press Ctrl-C to stop")
	if !*noRestart {
		// up restarts what dies (a line for each death and restart) and
		// runs until Ctrl-C.
		return cl.Supervise(ctx, localcluster.SuperviseConfig{Out: out})
	}
	return waitCoordinators(ctx, cl, cfg.DataDir, out)
}

// printReady prints where the cluster's processes listen: NATS, logs,
// each coordinator's actor address and status page, each host's actor
// address and metrics URL (when it serves one).
func printReady(out io.Writer, cl *localcluster.Cluster, dataDir string) {
	fmt.Fprintf(out, "cluster ready\n  nats         %s\n  logs         %s\n", cl.NATSURL(), filepath.Join(dataDir, "logs"))
	for i := 0; i < cl.Coordinators(); i++ {
		p := cl.CoordinatorProc(i)
		fmt.Fprintf(out, "  %-12s %s  http://%s/status  http://%s/metrics  pid %d\n", p.Name, cl.CoordinatorAddr(i), cl.HTTPAddr(i), cl.HTTPAddr(i), p.PID())
	}
	for i := 0; i < cl.Hosts(); i++ {
		p := cl.Host(i)
		metrics := "metrics off"
		if p.Ready.HTTP != "" {
			metrics = "http://" + p.Ready.HTTP + "/metrics"
		}
		fmt.Fprintf(out, "  %-12s %s  %s  pid %d\n", p.Name, p.Ready.Actor, metrics, p.PID())
	}
}

// waitCoordinators is `up --no-restart`: it runs until Ctrl-C, or until
// every coordinator has exited (one lost is what several coordinators are
// for).
func waitCoordinators(ctx context.Context, cl *localcluster.Cluster, dataDir string, out io.Writer) error {
	done := make(chan int, cl.Coordinators())
	for i := 0; i < cl.Coordinators(); i++ {
		go func(i int, p *localcluster.Proc) {
			<-p.Done()
			done <- i
		}(i, cl.CoordinatorProc(i))
	}
	var exited []string
	for len(exited) < cl.Coordinators() {
		select {
		case <-ctx.Done():
			return nil
		case i := <-done:
			name := cl.CoordinatorProc(i).Name
			exited = append(exited, name)
			if len(exited) < cl.Coordinators() {
				fmt.Fprintf(out, "warning: %s exited (see %s); the others go on\n", name, filepath.Join(dataDir, "logs", name+".log"))
			}
		}
	}
	return fmt.Errorf("every coordinator exited (%s); see their logs in %s", strings.Join(exited, ", "), filepath.Join(dataDir, "logs"))
}

func checkSize(hosts, servers int) error {
	if hosts < 1 || servers < 1 {
		return usageError{fmt.Errorf("--hosts and --servers-per-host must be >= 1")}
	}
	return nil
}

func checkCoordinators(n int) error {
	if n < 1 || n > 9 {
		return usageError{fmt.Errorf("--coordinators %d must be in [1, 9]", n)}
	}
	return nil
}

func coordinatorsText(n int) string {
	if n == 1 {
		return "1 coordinator (embedded NATS)"
	}
	return fmt.Sprintf("%d coordinators (each one node of an embedded NATS cluster)", n)
}
