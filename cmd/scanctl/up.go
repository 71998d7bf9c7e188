package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/scanplane/scanplane/localcluster"
)

func runUp(ctx context.Context, g *globals, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	cfg := localcluster.Config{}
	fs.IntVar(&cfg.Hosts, "hosts", 3, "scanserver processes (hosts)")
	fs.IntVar(&cfg.ServersPerHost, "servers-per-host", 2, "scan servers per host")
	fs.IntVar(&cfg.Zones, "zones", 1, "zones (hosts spread round-robin)")
	fs.StringVar(&cfg.DataDir, "data", "./data", "data directory (JetStream store, logs)")
	fs.StringVar(&cfg.Profiles, "profiles", "", "selection profiles JSON for the coordinator")
	fs.StringVar(&cfg.NATSListen, "nats-listen", "127.0.0.1:4222", "embedded NATS address")
	fs.StringVar(&cfg.CoordinatorListen, "listen", "127.0.0.1:8090", "coordinator actor address")
	fs.StringVar(&cfg.HTTPListen, "http", "127.0.0.1:8091", "coordinator HTTP address (/metrics, /status)")
	fs.StringVar(&cfg.BinDir, "bin", "", "directory with the coordinator and scanserver executables (default: next to scanctl, PATH, or built from source)")
	fs.StringVar(&cfg.LogLevel, "child-log-level", "info", "log level of the child processes")
	if _, err := parse("up", g, fs, args, errOut); err != nil {
		return err
	}
	if err := checkSize(cfg.Hosts, cfg.ServersPerHost); err != nil {
		return err
	}
	if cfg.Profiles != "" {
		abs, err := filepath.Abs(cfg.Profiles)
		if err != nil {
			return err
		}
		cfg.Profiles = abs
	}
	fmt.Fprintf(out, "starting %d hosts × %d servers (data in %s) ...\n", cfg.Hosts, cfg.ServersPerHost, cfg.DataDir)
	cl, err := localcluster.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(out, "stopping the cluster ...")
		cl.Close()
		fmt.Fprintln(out, "stopped")
	}()
	fmt.Fprintf(out, "cluster ready\n  nats         %s\n  coordinator  %s\n  http         http://%s/status  http://%s/metrics\n  logs         %s\n",
		cl.NATSURL(), cl.CoordinatorAddr(), cl.HTTPAddr(), cl.HTTPAddr(), filepath.Join(cfg.DataDir, "logs"))
	for i := 0; i < cl.Hosts(); i++ {
		p := cl.Host(i)
		fmt.Fprintf(out, "  %-12s %s pid %d\n", p.Name, p.Ready.Actor, p.PID())
	}
	fmt.Fprintln(out, "try: scanctl ingest --table demo --generate 100000 && scanctl scan --table demo --start row000000100 --end row000000110")
	fmt.Fprintln(out, "press Ctrl-C to stop")
	select {
	case <-ctx.Done():
	case <-cl.Coordinator().Done():
		return fmt.Errorf("the coordinator exited; see %s", filepath.Join(cfg.DataDir, "logs", "coordinator.log"))
	}
	return nil
}

func checkSize(hosts, servers int) error {
	if hosts < 1 || servers < 1 {
		return usageError{fmt.Errorf("--hosts and --servers-per-host must be >= 1")}
	}
	return nil
}
