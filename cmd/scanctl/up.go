package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/scanplane/scanplane/cache"
	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/localcluster"
)

// defaultCoordinators is the coordinator count of `scanctl up` and
// `scanctl demo` (docs/operations.md, "The local cluster").
const defaultCoordinators = 3

func runUp(ctx context.Context, g *globals, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	cfg := localcluster.Config{}
	fs.IntVar(&cfg.Coordinators, "coordinators", defaultCoordinators, "`N` coordinator processes, each embedding one node of a NATS cluster (1..9)")
	portBase := fs.Int("port-base", localcluster.DefaultPortBase, "the first NATS port `PORT`: coordinator i listens on NATS PORT+i, routes PORT+2000+i, actors PORT+3868+2i, HTTP PORT+3869+2i (so 4222 gives NATS 4222+i, routes 6222+i, actors 8090+2i, HTTP 8091+2i); another base runs a second cluster beside the first")
	fs.IntVar(&cfg.Hosts, "hosts", 3, "`N` scanserver processes (hosts)")
	fs.IntVar(&cfg.ServersPerHost, "servers-per-host", 2, "`N` scan servers per host")
	fs.IntVar(&cfg.Zones, "zones", 1, "`N` zones (hosts spread round-robin)")
	fs.StringVar(&cfg.DataDir, "data", "./data", "data `DIR` (JetStream store, logs)")
	fs.StringVar(&cfg.Profiles, "profiles", "", "selection profiles JSON `FILE` for the coordinators")
	fs.StringVar(&cfg.BinDir, "bin", "", "`DIR` with the coordinator and scanserver executables (default: next to scanctl, on PATH, or built from source)")
	fs.StringVar(&cfg.LogLevel, "child-log-level", "info", "log `LEVEL` of the child processes")
	// Metrics on: each scanserver's /metrics on an ephemeral port,
	// printed below (docs/operations.md, Metrics).
	cfg.HostMetrics = true
	secure := fs.Bool("secure", false, "run the cluster secured: create a secrets directory in DATA/secrets (as scanctl secrets init does) unless it exists, and give it to every process as --secrets (mutual TLS on the actor remote, HTTPS with authentication on HTTP); pass --secrets DATA/secrets to the other scanctl commands")
	cacheSize := fs.String("cache-size", "auto", "each host's block cache `SIZE` (e.g. 512MiB); auto = the hosts share 1/8 of the machine's memory (or its cgroup's limit), each at least 64MiB")
	noRestart := fs.Bool("no-restart", false, "do not restart a child process that dies (default: restart it, with exponential backoff from 1s to 30s)")
	if _, err := parse("up", g, fs, args, out); err != nil {
		return err
	}
	if err := checkSize(cfg.Hosts, cfg.ServersPerHost); err != nil {
		return err
	}
	if err := checkCoordinators(cfg.Coordinators); err != nil {
		return err
	}
	perHost, err := upCacheSize(*cacheSize, cfg.Hosts)
	if err != nil {
		return err
	}
	cfg.HostArgs = func(int) []string { return []string{"--cache-size", strconv.FormatInt(perHost, 10)} }
	if *portBase < 1024 || *portBase > localcluster.MaxPortBase {
		return usageError{fmt.Errorf("--port-base %d: want 1024..%d (the cluster's ports run up to PORT+3885)", *portBase, localcluster.MaxPortBase)}
	}
	for i := 0; i < cfg.Coordinators; i++ {
		cfg.Addrs = append(cfg.Addrs, upAddrs(*portBase, i))
	}
	if *secure {
		dir, made, moved, err := upSecrets(cfg.DataDir)
		if err != nil {
			return err
		}
		cfg.Secrets = dir
		if made {
			fmt.Fprintf(out, "created the secrets directory %s (a CA, a certificate per role, http.token; the CA's key in %s)\n", dir, secrets.DefaultCADir(dir))
		} else {
			fmt.Fprintf(out, "using the secrets directory %s\n", dir)
		}
		if moved != "" {
			fmt.Fprintf(out, "moved the CA's key out of %s to %s (no process needs it)\n", dir, moved)
		}
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
	if errors.Is(err, localcluster.ErrPortInUse) {
		return fmt.Errorf("%w: is another scanctl up or coordinator running? stop it, or pass %s", err, freeBaseHint(cfg, *portBase))
	}
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(out, "stopping the cluster ...")
		cl.Close()
		fmt.Fprintln(out, "stopped")
	}()
	printReady(out, cl, cfg.DataDir)
	// The other commands find this cluster without --nats on the default
	// ports (any node up will do) unless SCANPLANE_NATS names another.
	defaultFinds := *portBase == localcluster.DefaultPortBase && os.Getenv(natsEnv) == ""
	if urls := cl.NATSURL(); !defaultFinds && natsURLs("") != urls {
		fmt.Fprintf(out, "the other scanctl commands need this cluster's NATS (or --nats %s); in their shell:\n  export %s=%s\n", urls, natsEnv, urls)
	}
	if cfg.Secrets != "" {
		printSecure(out, cl, cfg.Secrets)
	} else {
		fmt.Fprintln(out, "try: scanctl ingest --table demo --generate 100000 && scanctl scan --table demo --start row000000100 --end row000000110")
	}
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
		u := cl.HTTPURL(i)
		fmt.Fprintf(out, "  %-12s %s  %s/status  %s/metrics  pid %d\n", p.Name, cl.CoordinatorAddr(i), u, u, p.PID())
	}
	for i := 0; i < cl.Hosts(); i++ {
		p := cl.Host(i)
		metrics := "metrics off"
		if p.Ready.HTTP != "" {
			metrics = cl.HTTPScheme() + "://" + p.Ready.HTTP + "/metrics"
		}
		fmt.Fprintf(out, "  %-12s %s  %s  pid %d\n", p.Name, p.Ready.Actor, metrics, p.PID())
	}
}

// upAddrs are coordinator i's addresses under `scanctl up --port-base
// base`: fixed ports, so the other commands find the cluster (tests may
// use ephemeral ones).
var upAddrs = localcluster.PortAddrs

// freeBaseHint suggests a --port-base whose ports are all free for cfg's
// coordinators: the first of base+10000, base+20000, ... (wrapping below
// MaxPortBase) that is.
func freeBaseHint(cfg localcluster.Config, base int) string {
	span := localcluster.MaxPortBase - 1024 + 1
	for k := 1; k <= 5; k++ {
		b := 1024 + (base-1024+k*10000)%span
		c := cfg
		c.Addrs = nil
		for i := 0; i < cfg.Coordinators; i++ {
			c.Addrs = append(c.Addrs, localcluster.PortAddrs(b, i))
		}
		if localcluster.CheckPorts(c) == nil {
			return fmt.Sprintf("--port-base %d (its ports are free)", b)
		}
	}
	return "another --port-base"
}

// upSecrets returns the secrets directory of `up --secure`, DATA/secrets
// (absolute: the children and the printed flag must not depend on the
// working directory), creating it when it holds no ca.crt (the CA's key
// goes to DATA/secrets-ca, secrets.DefaultCADir); made reports whether
// it did. A ca.key an earlier `up` left in DATA/secrets is moved there
// (the processes refuse a secrets directory holding it), and moved
// names where to.
func upSecrets(dataDir string) (dir string, made bool, moved string, err error) {
	dir, err = filepath.Abs(filepath.Join(dataDir, "secrets"))
	if err != nil {
		return "", false, "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "ca.crt")); err == nil {
		if moved, err = secrets.MoveCAKey(dir); err != nil {
			return "", false, "", fmt.Errorf("--secure: %w", err)
		}
		return dir, false, moved, nil
	}
	if err := secrets.Init(dir, secrets.InitOptions{}); err != nil {
		return "", false, "", fmt.Errorf("--secure: %w", err)
	}
	return dir, true, "", nil
}

// printSecure tells the user of `up --secure` the flag the other
// commands need, how to read the HTTP endpoints, and what is not
// secured.
func printSecure(out io.Writer, cl *localcluster.Cluster, dir string) {
	fmt.Fprintf(out, "secured: pass --secrets %s (or set %s=%s) to scanctl ingest, scan, tables, status, route and reload\n", dir, cliutil.SecretsEnv, dir)
	fmt.Fprintf(out, "  http:  curl --cacert %s -H \"Authorization: Bearer $(cat %s)\" %s/status\n",
		filepath.Join(dir, "ca.crt"), filepath.Join(dir, cliutil.HTTPTokenFile), cl.HTTPURL(0))
	fmt.Fprintln(out, "  nats:  TLS with the role certificates and per-role permissions (ingest writes with admin.crt, scans read with client.crt)")
	fmt.Fprintf(out, "try: scanctl ingest --secrets %s --table demo --generate 100000 && scanctl scan --secrets %s --table demo --start row000000100 --end row000000110\n", dir, dir)
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

// upCacheSize is the cache size of each of hosts hosts that --cache-size
// asks for: auto shares 1/8 of the machine's memory between them.
func upCacheSize(flag string, hosts int) (int64, error) {
	if flag != "auto" {
		n, err := cliutil.ParseBytes(flag)
		if err == nil && n <= 0 {
			err = fmt.Errorf("size %q: want more than 0 bytes", flag)
		}
		if err != nil {
			return 0, usageError{fmt.Errorf("--cache-size: %w", err)}
		}
		return n, nil
	}
	mem, err := cache.MachineMemory()
	if err != nil {
		return 0, usageError{fmt.Errorf("--cache-size auto: %w (give a size)", err)}
	}
	return cache.AutoMaxBytes(mem, hosts), nil
}
