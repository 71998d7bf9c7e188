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
// /debug/pprof/ (go tool pprof; see the README); off by default. The address
// actually listened on is in the ready line and --ready-file ("http").
// With --secrets it is HTTPS and needs a client or admin certificate of
// the cluster CA or the bearer token (--http-token-file, default
// DIR/http.token).
//
// Exit status: 0 after SIGINT/SIGTERM, 1 on runtime failure, 2 on bad flags.
package main

import (
	"context"
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
	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/remoting"
	"github.com/scanplane/scanplane/scanserver"
	"github.com/scanplane/scanplane/tablets"
)

func main() { os.Exit(run(os.Args[1:])) }

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

func run(args []string) int {
	cfg := scanserver.DefaultHostAgentConfig()
	var natsURL, listen, advertise, cacheSize, pause, slow, blocksDir, readyFile, logLevel, logFormat, httpAddr, secrets, httpTokenFile string
	var dieWithParent, insecure bool
	fs := flag.NewFlagSet("scanserver", flag.ContinueOnError)
	fs.StringVar(&natsURL, "nats", "nats://127.0.0.1:4222", "NATS URL(s) of the cluster, comma separated")
	fs.StringVar(&cfg.Host, "host", defaultHost(), "host id ([A-Za-z0-9_-]); servers of one host share its cache")
	fs.StringVar(&cfg.Zone, "zone", cfg.Zone, "availability zone")
	fs.StringVar(&cfg.Group, "group", cfg.Group, "resource group (profiles select servers by group)")
	fs.IntVar(&cfg.Servers, "servers", cfg.Servers, "scan-server actors in this process")
	fs.IntVar(&cfg.Server.Workers, "workers", cfg.Server.Workers, "concurrent scans per server")
	fs.IntVar(&cfg.Server.MaxQueue, "queue", cfg.Server.MaxQueue, "scans that may wait for a worker per server")
	fs.IntVar(&cfg.Server.BatchRows, "batch-rows", cfg.Server.BatchRows, "default rows per batch")
	fs.StringVar(&listen, "listen", "127.0.0.1:0", "actor remote address (port 0 = ephemeral)")
	fs.StringVar(&advertise, "advertise", "", "address the coordinator and clients use to reach this process")
	fs.StringVar(&cacheSize, "cache-size", "256MiB", "host block cache size")
	fs.DurationVar(&cfg.HeartbeatInterval, "heartbeat", cfg.HeartbeatInterval, "heartbeat interval")
	fs.StringVar(&blocksDir, "blocks-dir", "", "read blocks from this shared directory instead of JetStream")
	fs.StringVar(&pause, "fault-pause", "", "FAULT INJECTION: stop serving for DUR every EVERY, e.g. 150ms/1s")
	fs.StringVar(&slow, "fault-slow", "", "FAULT INJECTION: every block read takes FACTOR× longer, e.g. 10")
	fs.IntVar(&cfg.FaultServer, "fault-server", -1, "FAULT INJECTION: only this server index gets the faults (-1 = all)")
	fs.StringVar(&readyFile, "ready-file", "", "write a JSON file with the addresses once ready")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&logFormat, "log-format", "text", cliutil.LogFormatUsage)
	fs.StringVar(&httpAddr, "http", "", "HTTP address for /metrics and /debug/pprof/ (host:port; port 0 = ephemeral); empty = off")
	fs.BoolVar(&dieWithParent, "die-with-parent", false, "shut down when stdin closes (used by scanctl up)")
	fs.BoolVar(&insecure, "insecure", false, cliutil.InsecureUsage)
	fs.StringVar(&secrets, "secrets", "", cliutil.SecretsUsage)
	fs.StringVar(&httpTokenFile, "http-token-file", "", cliutil.HTTPTokenUsage)
	showVersion := fs.Bool("version", false, cliutil.VersionUsage)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Println("scanserver", cliutil.Version(version))
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "scanserver: unexpected arguments %q\n", fs.Args())
		return 2
	}
	bad := func(err error) int { fmt.Fprintln(os.Stderr, "scanserver:", err); return 2 }
	log, err := cliutil.Logger(os.Stderr, logLevel, logFormat)
	if err != nil {
		return bad(err)
	}
	cfg.Logger = log
	secretsDir := cliutil.SecretsDir(secrets)
	if err := cliutil.CheckListens(log, insecure, cliutil.SystemLookupIP, cliutil.Listen{Flag: "listen", Addr: listen, Secured: secretsDir != "", SecureWith: "--secrets DIR"}, cliutil.Listen{Flag: "http", Addr: httpAddr, Secured: secretsDir != "", SecureWith: "--secrets DIR"}); err != nil {
		return bad(err)
	}
	httpSec, err := cliutil.LoadHTTPSecurity(secretsDir, "scanserver", httpTokenFile)
	if err != nil {
		return bad(err)
	}
	cfg.System = remoting.SystemConfig{Listen: listen, Advertise: advertise}
	if secretsDir != "" {
		if cfg.System.TLS, err = cliutil.RemoteTLS(secretsDir, cliutil.ServerTLSRole(secretsDir, cfg.Host)); err != nil {
			return bad(err)
		}
	}
	if cfg.Cache.MaxBytes, err = cliutil.ParseBytes(cacheSize); err != nil {
		return bad(fmt.Errorf("--cache-size: %w", err))
	}
	if pause != "" {
		if cfg.Server.Fault.PauseFor, cfg.Server.Fault.PauseEvery, err = scanserver.ParsePause(pause); err != nil {
			return bad(fmt.Errorf("--fault-pause: %w", err))
		}
	}
	if slow != "" {
		if cfg.Server.Fault.SlowFactor, err = scanserver.ParseSlow(slow); err != nil {
			return bad(fmt.Errorf("--fault-slow: %w", err))
		}
	}
	if err := cfg.Validate(); err != nil {
		return bad(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if dieWithParent {
		cliutil.ExitWhenStdinCloses(stop)
	}
	bc := bus.DefaultConfig()
	bc.URL, bc.Name, bc.Logger = natsURL, "scanplane-scanserver-"+cfg.Host, log
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
	if blocksDir != "" {
		if store, err = tablets.NewDirStore(blocksDir); err != nil {
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
	if httpAddr != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
			cliutil.BuildInfoCollector(cliutil.Version(version)))
		reg.MustRegister(agent.Collectors()...)
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		cliutil.HandlePprof(mux)
		l, err := cliutil.ListenHTTP("http", httpAddr, httpSec)
		if err != nil {
			fmt.Fprintln(os.Stderr, "scanserver:", err)
			return 1
		}
		defer cliutil.ServeListener(l, mux, httpSec, log)()
		served = l.Addr().String()
	}
	if err := cliutil.WriteReadyFile(readyFile, cliutil.Ready{Actor: agent.Address(), HTTP: served, Host: cfg.Host, Servers: agent.ServerIDs(),
		PID: os.Getpid(), Incarnation: agent.Incarnation()}); err != nil {
		fmt.Fprintln(os.Stderr, "scanserver: ready file:", err)
		return 1
	}
	fmt.Printf("scanserver ready: host=%s zone=%s actor=%s %s=%s servers=%d\n", cfg.Host, cfg.Zone, agent.Address(), httpSec.Scheme(), orOff(served), cfg.Servers)
	<-ctx.Done()
	log.Info("scanserver stopping")
	return 0
}
