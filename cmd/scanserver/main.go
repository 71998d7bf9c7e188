// Command scanserver runs one scanplane host agent: --servers scan-server
// actors sharing one block cache, announced to the coordinator by NATS
// heartbeats. Blocks are read from JetStream (default) or a shared
// directory (--blocks-dir).
//
// Fault injection for tests and load tests is off by default:
// --fault-pause DUR/EVERY stops serving for DUR every EVERY (a GC pause),
// --fault-slow FACTOR makes every block read FACTOR× slower. A hung or
// killed process is injected from outside (SIGSTOP/SIGKILL).
//
// --http ADDR serves /metrics (Prometheus text or protobuf exposition):
// scanplane_scanserver_* per server, scanplane_cache_* of the host cache,
// and the Go runtime and process collectors, and Go's profiles under
// /debug/pprof/ (go tool pprof; see docs/operations.md); off by default. The address
// actually listened on is in the ready line and --ready-file ("http").
// With --secrets it is HTTPS and needs a client or admin certificate of
// the cluster CA or the bearer token (--http-token-file, default
// DIR/http.token).
//
// Exit status: 0 after SIGINT/SIGTERM, 1 on runtime failure, 2 on bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/cache"
	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/readyfile"
	"github.com/scanplane/scanplane/internal/remoting"
	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/scanserver"
	"github.com/scanplane/scanplane/tablets"
)

func main() { os.Exit(run(os.Args[1:])) }

// about is what --help says the command does.
const about = "Run one scanplane host: --servers scan servers sharing one block cache, announced to the coordinators over NATS."

// version is the build version, set at link time with
// -ldflags "-X main.version=v1.2.3"; empty = what cliutil.Version finds.
var version string

func orOff(s string) string {
	if s == "" {
		return "off"
	}
	return s
}

func defaultHost() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "localhost"
	}
	return regexp.MustCompile(`[^A-Za-z0-9_-]`).ReplaceAllString(h, "_")
}

// options are the flags that are not HostAgentConfig fields.
type options struct {
	natsURL, listen, advertise, cacheSize, pause, slow, lie, blocksDir, readyFile string
	logLevel, logFormat, httpAddr, secrets, httpTokenFile                         string
	dieWithParent, insecure, showVersion                                          bool
}

// newFlagSet defines the scanserver's flags on cfg and o.
func newFlagSet(cfg *scanserver.HostAgentConfig, o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("scanserver", flag.ContinueOnError)
	fs.StringVar(&o.natsURL, "nats", "nats://127.0.0.1:4222", "NATS `URLS` of the cluster, comma separated")
	fs.StringVar(&cfg.Host, "host", defaultHost(), "host `ID` ([A-Za-z0-9_-]); servers of one host share its cache")
	fs.StringVar(&cfg.Zone, "zone", cfg.Zone, "availability `ZONE`")
	fs.StringVar(&cfg.Group, "group", cfg.Group, "resource `GROUP` (profiles select servers by group)")
	fs.IntVar(&cfg.Servers, "servers", cfg.Servers, "scan-server actors in this process")
	fs.IntVar(&cfg.Server.Workers, "workers", cfg.Server.Workers, "concurrent scans per server")
	fs.IntVar(&cfg.Server.MaxQueue, "queue", cfg.Server.MaxQueue, "scans that may wait for a worker per server")
	fs.IntVar(&cfg.Server.BatchRows, "batch-rows", cfg.Server.BatchRows, "rows per batch when the scan asks for no batch size")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:0", "actor remote `ADDR` (host:port; port 0 = ephemeral)")
	fs.StringVar(&o.advertise, "advertise", "", "`ADDR` the coordinator and clients use to reach this process (default: the --listen address)")
	fs.StringVar(&o.cacheSize, "cache-size", "auto", "host block cache `SIZE` (e.g. 512MiB, 2GiB); auto = 1/8 of the machine's memory (or its cgroup's limit), at least 64MiB")
	fs.DurationVar(&cfg.HeartbeatInterval, "heartbeat", cfg.HeartbeatInterval, "heartbeat interval")
	fs.StringVar(&o.blocksDir, "blocks-dir", "", "read blocks from this shared `DIR` instead of JetStream")
	fs.StringVar(&o.pause, "fault-pause", "", "FAULT INJECTION: stop serving for DUR every EVERY (`DUR/EVERY`, e.g. 150ms/1s)")
	fs.StringVar(&o.slow, "fault-slow", "", "FAULT INJECTION: every block read takes `FACTOR`× longer, e.g. 10")
	fs.StringVar(&o.lie, "fault-lie", "", "FAULT INJECTION: answer scans falsely, one of `LIES` per scan in turn (forge,drop,add,empty,corrupt,count)")
	fs.IntVar(&cfg.FaultServer, "fault-server", -1, "FAULT INJECTION: only this server index gets the faults (-1 = all)")
	fs.StringVar(&o.readyFile, "ready-file", "", "write a JSON `FILE` with the addresses once ready")
	fs.StringVar(&o.logLevel, "log-level", "info", "log `LEVEL`: debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "text", cliutil.LogFormatUsage)
	fs.StringVar(&o.httpAddr, "http", "", "HTTP `ADDR` for /metrics and /debug/pprof/ (host:port; port 0 = ephemeral); empty = off")
	fs.BoolVar(&o.dieWithParent, "die-with-parent", false, "shut down when stdin closes (used by scanctl up)")
	fs.BoolVar(&o.insecure, "insecure", false, cliutil.InsecureUsage)
	fs.StringVar(&o.secrets, "secrets", "", cliutil.SecretsUsage)
	fs.StringVar(&o.httpTokenFile, "http-token-file", "", cliutil.HTTPTokenUsage)
	fs.BoolVar(&o.showVersion, "version", false, cliutil.VersionUsage)
	return fs
}

func run(args []string) int {
	cfg := scanserver.DefaultHostAgentConfig()
	var o options
	fs := newFlagSet(&cfg, &o)
	if err := cliutil.ParseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			cliutil.PrintHelp(os.Stdout, "scanserver [flags]", about, fs)
			return 0
		}
		fmt.Fprintf(os.Stderr, "scanserver: %v\nrun 'scanserver --help'\n", err)
		return 2
	}
	if o.showVersion {
		fmt.Println("scanserver", cliutil.Version(version))
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "scanserver: unexpected arguments %q\n", fs.Args())
		return 2
	}
	bad := func(err error) int { fmt.Fprintln(os.Stderr, "scanserver:", err); return 2 }
	log, err := cliutil.Logger(os.Stderr, o.logLevel, o.logFormat)
	if err != nil {
		return bad(err)
	}
	cfg.Logger = log
	secretsDir := cliutil.SecretsDir(o.secrets)
	if err := cliutil.CheckListens(log, o.insecure, cliutil.SystemLookupIP, cliutil.Listen{Flag: "listen", Addr: o.listen, Secured: secretsDir != "", SecureWith: "--secrets DIR"}, cliutil.Listen{Flag: "http", Addr: o.httpAddr, Secured: secretsDir != "", SecureWith: "--secrets DIR"}); err != nil {
		return bad(err)
	}
	httpSec, err := cliutil.LoadHTTPSecurity(secretsDir, "scanserver", o.httpTokenFile)
	if err != nil {
		return bad(err)
	}
	cfg.System = remoting.SystemConfig{Listen: o.listen, Advertise: o.advertise}
	if secretsDir != "" {
		if cfg.System.TLS, err = cliutil.RemoteTLS(secretsDir, secrets.ServerTLSRole(secretsDir, cfg.Host)); err != nil {
			return bad(err)
		}
	}
	if o.cacheSize == "auto" {
		mem, err := cache.MachineMemory()
		if err != nil {
			return bad(fmt.Errorf("--cache-size auto: %w (give a size)", err))
		}
		cfg.Cache.MaxBytes = cache.AutoMaxBytes(mem, 1)
	} else if cfg.Cache.MaxBytes, err = cliutil.ParseBytes(o.cacheSize); err != nil {
		return bad(fmt.Errorf("--cache-size: %w", err))
	}
	if o.pause != "" {
		if cfg.Server.Fault.PauseFor, cfg.Server.Fault.PauseEvery, err = scanserver.ParsePause(o.pause); err != nil {
			return bad(fmt.Errorf("--fault-pause: %w", err))
		}
	}
	if o.slow != "" {
		if cfg.Server.Fault.SlowFactor, err = scanserver.ParseSlow(o.slow); err != nil {
			return bad(fmt.Errorf("--fault-slow: %w", err))
		}
	}
	if o.lie != "" {
		if cfg.Server.Fault.Lie, err = scanserver.ParseLie(o.lie); err != nil {
			return bad(fmt.Errorf("--fault-lie: %w", err))
		}
	}
	if err := cfg.Validate(); err != nil {
		return bad(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.dieWithParent {
		cliutil.ExitWhenStdinCloses(stop)
	}
	bc := bus.DefaultConfig()
	bc.URL, bc.Name, bc.Logger = o.natsURL, "scanplane-scanserver-"+cfg.Host, log
	bc.TLS = cfg.System.TLS
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	conn, err := bus.Connect(cctx, bc)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "scanserver:", err)
		return 1
	}
	defer conn.Close()
	var store tablets.BlockStore
	if o.blocksDir != "" {
		if store, err = tablets.NewDirStore(o.blocksDir); err != nil {
			fmt.Fprintln(os.Stderr, "scanserver: --blocks-dir:", err)
			return 1
		}
	} else if store, err = conn.BlockStore(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "scanserver: block store:", err)
		return 1
	}
	agent, err := scanserver.NewHostAgent(cfg, conn, store)
	if err != nil {
		return bad(err)
	}
	if err := agent.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "scanserver:", err)
		return 1
	}
	defer agent.Close()
	served := ""
	if o.httpAddr != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
			cliutil.BuildInfoCollector(cliutil.Version(version)))
		reg.MustRegister(agent.Collectors()...)
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		cliutil.HandlePprof(mux)
		l, err := cliutil.ListenHTTP("http", o.httpAddr, httpSec)
		if err != nil {
			fmt.Fprintln(os.Stderr, "scanserver:", err)
			return 1
		}
		defer cliutil.ServeListener(l, mux, httpSec, log)()
		served = l.Addr().String()
	}
	if err := readyfile.Write(o.readyFile, readyfile.Ready{Actor: agent.Address(), HTTP: served, Host: cfg.Host, Servers: agent.ServerIDs(),
		PID: os.Getpid(), Incarnation: agent.Incarnation()}); err != nil {
		fmt.Fprintln(os.Stderr, "scanserver: ready file:", err)
		return 1
	}
	fmt.Printf("scanserver ready: host=%s zone=%s actor=%s %s=%s servers=%d\n", cfg.Host, cfg.Zone, agent.Address(), httpSec.Scheme(), orOff(served), cfg.Servers)
	<-ctx.Done()
	log.Info("scanserver stopping")
	return 0
}
