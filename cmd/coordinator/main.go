// Command coordinator runs scanplane's coordinator: an embedded NATS server
// with JetStream (unless --nats names an external cluster), the actor
// system with remote, the registry, host actors, the router and tablet
// actors, and an HTTP endpoint with /metrics, /status (JSON), / (the
// same status as an HTML page that reloads itself), Go's profiles
// under /debug/pprof/ (go tool pprof; see docs/operations.md) and the
// public API scanplane.v1 as gRPC, gRPC-Web and Connect (package
// gateway, docs/api.md; h2c on plain HTTP). With --secrets the
// HTTP endpoint is HTTPS and every path needs a client or admin
// certificate of the cluster CA or the bearer token (--http-token-file,
// default DIR/http.token); without it, it is plain HTTP on loopback.
//
// Exit status: 0 after a clean shutdown (SIGINT/SIGTERM), 1 on a runtime
// failure, 2 on bad flags or config. SIGHUP reloads --profiles.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	scanplanev1 "github.com/scanplane/scanplane/api/scanplane/v1"
	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/coordinator"
	"github.com/scanplane/scanplane/gateway"
	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/readyfile"
	"github.com/scanplane/scanplane/internal/remoting"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
	"github.com/scanplane/scanplane/wire"
)

func main() { os.Exit(run(os.Args[1:])) }

// about is what --help says the command does.
const about = "Run a scanplane coordinator: an embedded NATS server (unless --nats), the tablet actors, and /status and /metrics on --http."

type options struct {
	listen, advertise, natsURL, natsListen, data, httpAddr, profiles, readyFile, logLevel string
	secrets, httpTokenFile                                                                string
	natsCluster, natsRoutes, natsName, clusterProvider, clusterName                       string
	logFormat                                                                             string
	checkConfig, dieWithParent, insecure, showVersion                                     bool
	misses, replicas                                                                      int
	busySlack, startStall, leaseTTL                                                       time.Duration
}

// newFlagSet defines the coordinator's flags on o.
func newFlagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8090", "actor remote `ADDR` (host:port; port 0 = ephemeral)")
	fs.StringVar(&o.advertise, "advertise", "", "`ADDR` other processes use to reach this coordinator (default: the --listen address)")
	fs.StringVar(&o.natsURL, "nats", "", "external NATS `URLS`, comma separated; empty = run an embedded NATS server")
	fs.StringVar(&o.natsListen, "nats-listen", "127.0.0.1:4222", "embedded NATS server `ADDR` (host:port; port 0 = random)")
	fs.StringVar(&o.natsCluster, "nats-cluster", "", "route listener `ADDR` (host:port; port 0 = random) making the embedded NATS server one node of a cluster; empty = standalone")
	fs.StringVar(&o.natsRoutes, "nats-routes", "", "with --nats-cluster: nats-route://host:port `URLS` of the cluster's nodes, comma separated (every node, this one included, is usual)")
	fs.StringVar(&o.natsName, "nats-name", "", "embedded NATS server `NAME`, unique per node and stable across restarts (default with --nats-cluster: <hostname>-<nats port>)")
	fs.IntVar(&o.replicas, "replicas", 0, "JetStream replicas `N` of the buckets this coordinator creates, 1..5 (default: 3 with --nats-cluster and 2+ other nodes' routes, else 1)")
	fs.StringVar(&o.data, "data", "./data", "data `DIR` (embedded JetStream lives in DIR/nats)")
	fs.StringVar(&o.httpAddr, "http", "127.0.0.1:8091", "HTTP `ADDR` for /metrics, /status (JSON), the HTML status page / and /debug/pprof/; empty = off")
	fs.StringVar(&o.profiles, "profiles", "", "scan server selection profiles JSON `FILE` (Accumulo format + policy); empty = the built-in profiles")
	fs.BoolVar(&o.checkConfig, "check-config", false, "validate --profiles, print one line per profile, and exit")
	fs.StringVar(&o.readyFile, "ready-file", "", "write a JSON `FILE` with the listen addresses once ready")
	fs.StringVar(&o.logLevel, "log-level", "info", "log `LEVEL`: debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "text", cliutil.LogFormatUsage)
	fs.IntVar(&o.misses, "heartbeat-misses", 3, "heartbeats a server may miss before it leaves the view")
	fs.DurationVar(&o.busySlack, "busy-slack", coordinator.DefaultFlowConfig().BusySlack, "network slack added to busy timeouts")
	fs.DurationVar(&o.startStall, "start-stall", coordinator.DefaultFlowConfig().StartStall, "a started scan without data for this long is retried elsewhere")
	fs.StringVar(&o.clusterProvider, "cluster-provider", "nats-kv", "coordinator membership `PROVIDER`: nats-kv (leases in NATS JetStream KV: several coordinators form a Proto.Actor cluster) or none (this coordinator alone serves every tablet)")
	fs.StringVar(&o.clusterName, "cluster-name", coordinator.DefaultClusterName, "Proto.Actor cluster `NAME`; coordinators with the same name share the tablets")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", bus.DefaultLeaseConfig().TTL, "a coordinator whose lease is not renewed for this long is taken as gone (renewed every third of it)")
	fs.BoolVar(&o.dieWithParent, "die-with-parent", false, "shut down when stdin closes (used by scanctl up)")
	fs.BoolVar(&o.insecure, "insecure", false, cliutil.InsecureUsage)
	fs.StringVar(&o.secrets, "secrets", "", cliutil.SecretsUsage)
	fs.StringVar(&o.httpTokenFile, "http-token-file", "", cliutil.HTTPTokenUsage)
	fs.BoolVar(&o.showVersion, "version", false, cliutil.VersionUsage)
	return fs
}

func run(args []string) int {
	var o options
	fs := newFlagSet(&o)
	if err := cliutil.ParseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			cliutil.PrintHelp(os.Stdout, "coordinator [flags]", about, fs)
			return 0
		}
		fmt.Fprintf(os.Stderr, "coordinator: %v\nrun 'coordinator --help'\n", err)
		return 2
	}
	if o.showVersion {
		fmt.Println("coordinator", cliutil.Version(version))
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "coordinator: unexpected arguments %q\n", fs.Args())
		return 2
	}
	log, err := cliutil.Logger(os.Stderr, o.logLevel, o.logFormat)
	if err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		return 2
	}
	profiles, err := loadProfiles(o.profiles)
	if err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		return 2
	}
	if o.checkConfig {
		if o.profiles == "" {
			fmt.Println("no --profiles given; the built-in default profiles:")
		}
		for _, l := range profiles.Summary() {
			fmt.Println(l)
		}
		for _, w := range profiles.Warnings() {
			fmt.Println("warning:", w)
		}
		return 0
	}
	warnProfiles(log, o.profiles, profiles)
	if err := checkListens(o, log); err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		return 2
	}
	switch {
	case o.clusterProvider != "nats-kv" && o.clusterProvider != "none":
		fmt.Fprintf(os.Stderr, "coordinator: --cluster-provider %q: want nats-kv or none\n", o.clusterProvider)
		return 2
	case o.leaseTTL < 300*time.Millisecond:
		fmt.Fprintf(os.Stderr, "coordinator: --lease-ttl %v: must be at least 300ms\n", o.leaseTTL)
		return 2
	case o.clusterName == "":
		fmt.Fprintln(os.Stderr, "coordinator: --cluster-name is empty")
		return 2
	}
	cc := coordinator.DefaultCoordinatorConfig()
	cc.System = remoting.SystemConfig{Listen: o.listen, Advertise: o.advertise}
	if dir := cliutil.SecretsDir(o.secrets); dir != "" {
		if cc.System.TLS, err = cliutil.RemoteTLS(dir, "coordinator"); err != nil {
			fmt.Fprintln(os.Stderr, "coordinator:", err)
			return 2
		}
	}
	// --http with --secrets: HTTPS, and every path needs a client or
	// admin certificate or the bearer token.
	httpSec, err := cliutil.LoadHTTPSecurity(cliutil.SecretsDir(o.secrets), "coordinator", o.httpTokenFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		return 2
	}
	cc.HeartbeatMisses = o.misses
	cc.Flow.BusySlack, cc.Flow.StartStall = o.busySlack, o.startStall
	cc.Logger = log
	cc.Metrics = coordinator.NewCoordMetrics()
	cc.Version = buildVersion()
	if err := cc.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.dieWithParent {
		cliutil.ExitWhenStdinCloses(stop)
	}

	replicasSet := false
	fs.Visit(func(f *flag.Flag) { replicasSet = replicasSet || f.Name == "replicas" })
	sc, replicas, err := natsSetup(o, replicasSet)
	if err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		return 2
	}
	natsURL, natsNode := o.natsURL, ""
	var embedded *bus.EmbeddedServer
	if sc != nil {
		sc.SpaceLogger = log
		if sc.TLS = cc.System.TLS; sc.TLS != nil {
			// --secrets: TLS on the NATS client and route ports, every
			// client authenticated by its role certificate and held to
			// that role's permissions (bus.UserPermissions).
			// The embedded server's warnings and errors (a refused TLS
			// handshake, an authorization or permissions violation) go
			// to the coordinator's log; its notices at debug level.
			sc.Logger = log
			if sc.Users, err = natsUsers(cliutil.SecretsDir(o.secrets)); err != nil {
				fmt.Fprintln(os.Stderr, "coordinator:", err)
				return 2
			}
		}
		srv, err := bus.StartServer(*sc)
		if err != nil {
			fmt.Fprintln(os.Stderr, "coordinator: embedded NATS:", err)
			return 1
		}
		defer srv.Close()
		embedded = srv
		if sc.Clustered() {
			cc.QuorumLost = srv.QuorumLost
		}
		natsURL, natsNode = srv.ClientURL(), srv.Name()
		if sc.Clustered() {
			log.Info("embedded NATS node started; waiting for JetStream quorum", "url", natsURL, "name", srv.Name(), "cluster", srv.ClusterAddr(), "routes", sc.Routes)
			wctx, cancel := context.WithTimeout(ctx, jetStreamWait)
			err := srv.WaitJetStream(wctx)
			cancel()
			if err != nil {
				fmt.Fprintln(os.Stderr, "coordinator: embedded NATS:", err)
				return 1
			}
		}
		log.Info("embedded NATS started", "url", natsURL, "store", sc.StoreDir, "replicas", replicas)
	}
	bc := bus.DefaultConfig()
	bc.URL, bc.Name, bc.Logger, bc.Replicas = natsURL, "scanplane-coordinator", log, replicas
	bc.TLS = cc.System.TLS
	conn, err := bus.Connect(ctx, bc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		return 1
	}
	defer conn.Close()
	countNATSErrors(conn.NATS(), cc.Metrics.NATSError)
	meta, err := conn.MetaStore(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "coordinator: metadata store:", err)
		return 1
	}
	// The blocks bucket too, before any scan server opens it: with
	// --secrets a scan server may read it but not create it.
	if _, err := conn.BlockStore(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "coordinator: block store:", err)
		return 1
	}
	var reloader func() (*selection.Profiles, error)
	if o.profiles != "" {
		path := o.profiles
		reloader = func() (*selection.Profiles, error) {
			p, err := loadProfiles(path)
			if err == nil {
				warnProfiles(log, path, p)
			}
			return p, err
		}
	}
	// The HTTP listener first: its address goes into the lease.
	var cur atomic.Pointer[member]
	httpAddr := ""
	if o.httpAddr != "" {
		l, err := cliutil.ListenHTTP("http", o.httpAddr, httpSec)
		if err != nil {
			fmt.Fprintln(os.Stderr, "coordinator:", err)
			return 1
		}
		httpAddr = l.Addr().String()
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), cc.Metrics,
			cliutil.BuildInfoCollector(cliutil.Version(version)))
		reg.MustRegister(coordinator.CoordinatorCollectors(func() *coordinator.Coordinator {
			if m := cur.Load(); m != nil {
				return m.co
			}
			return nil
		})...)
		if embedded != nil {
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "scanplane_nats_store_out_of_space",
				Help: "1 while the embedded JetStream is out of disk space (writes fail; it restarts by itself once space is freed), else 0."},
				func() float64 {
					if embedded.OutOfSpace() {
						return 1
					}
					return 0
				}),
				prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "scanplane_nats_store_restarts_total",
					Help: "Restarts of the embedded JetStream after it ran out of disk space."},
					func() float64 { return float64(embedded.SpaceRestarts()) }))
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
			m := cur.Load()
			if m == nil {
				http.Error(w, "coordinator (re)starting", http.StatusServiceUnavailable)
				return
			}
			cliutil.WriteStatusJSON(w, m.clusterStatus())
		})
		mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
			m := cur.Load()
			if m == nil {
				http.Error(w, "coordinator (re)starting", http.StatusServiceUnavailable)
				return
			}
			writeStatusPage(w, m.clusterStatus(), time.Now(), httpSec.Scheme())
		})
		cliutil.HandlePprof(mux)
		gcfg := gateway.DefaultConfig()
		gcfg.Logger = log
		gcfg.Client = func() *client.Client {
			if m := cur.Load(); m != nil {
				return m.api
			}
			return nil
		}
		gcfg.Status = func(context.Context) (*scanplanev1.StatusResponse, error) {
			m := cur.Load()
			if m == nil {
				return nil, fmt.Errorf("%w: coordinator (re)starting", client.ErrNoCoordinator)
			}
			return apiStatus(m.status()), nil
		}
		api, err := gateway.New(gcfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "coordinator:", err)
			return 1
		}
		api.Register(mux)
		defer cliutil.ServeListener(l, mux, httpSec, log)()
	}
	var leases *bus.LeaseStore
	if o.clusterProvider == "nats-kv" {
		lc := bus.DefaultLeaseConfig()
		lc.TTL = o.leaseTTL
		lc.Renew = o.leaseTTL / 3
		if leases, err = conn.Leases(ctx, lc); err != nil {
			fmt.Fprintln(os.Stderr, "coordinator: coordinator leases:", err)
			return 1
		}
	}
	// start starts a coordinator: a new actor system (a new member id in
	// the cluster) and a new incarnation, so clients tell a restarted
	// coordinator on the same address from the one they knew.
	start := func() (*member, error) {
		var inc [8]byte
		if _, err := rand.Read(inc[:]); err != nil {
			return nil, fmt.Errorf("incarnation: %w", err)
		}
		ci := &messages.ClusterInfo{RouterId: wire.RouterName, HttpAddress: httpAddr, StartedUnixMs: time.Now().UnixMilli(),
			Version: cc.Version, Incarnation: hex.EncodeToString(inc[:])}
		if sc != nil {
			ci.NatsUrl, ci.NatsNode = natsURL, natsNode
		}
		ccfg := cc
		m := &member{}
		if leases != nil {
			m.lp = coordinator.NewLeaseProvider(leases, ci, log)
			ccfg.System.Cluster = &coordinator.ClusterConfig{Name: o.clusterName, Provider: m.lp}
		}
		co, err := coordinator.NewCoordinator(ccfg, conn, meta, profiles)
		if err != nil {
			return nil, err
		}
		m.co = co
		co.SetReloader(reloader)
		if m.lp != nil {
			co.SetLeaseUpdater(m.lp.Update)
		}
		if err := co.Start(ctx); err != nil {
			return nil, err
		}
		if m.lp == nil {
			// Not a cluster member: a lease all the same, so that clients
			// find this coordinator.
			ci.MemberId, ci.CoordinatorAddress = co.MemberID(), co.Address()
			if m.ann, err = announce(ctx, conn, co, ci); err != nil {
				co.Close()
				return nil, err
			}
		}
		if httpAddr != "" {
			if m.api, err = apiClient(ctx, co, natsURL, cc.System.TLS, log); err != nil {
				m.close(log)
				return nil, fmt.Errorf("public API client: %w", err)
			}
		}
		return m, nil
	}
	m, err := start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		return 1
	}
	cur.Store(m)
	defer func() { cur.Load().close(log) }()
	// Clients that cannot read the lease bucket yet (JetStream electing a
	// leader) ask the coordinators over core NATS (bus.DiscoverSubject).
	stopDiscovery, err := conn.ServeDiscovery(func() []*messages.ClusterInfo { return cur.Load().live() })
	if err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		return 1
	}
	defer stopDiscovery()
	if err := readyfile.Write(o.readyFile, readyfile.Ready{NATS: natsURL, Actor: m.co.Address(), HTTP: httpAddr, PID: os.Getpid()}); err != nil {
		fmt.Fprintln(os.Stderr, "coordinator: ready file:", err)
		return 1
	}
	fmt.Printf("coordinator ready: nats=%s actor=%s %s=%s cluster=%s profiles=%s\n", natsURL, m.co.Address(), httpSec.Scheme(), orNone(httpAddr),
		o.clusterProvider, strings.Join(profiles.Summary(), " | "))

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	for {
		var lapsed <-chan struct{}
		if m.lp != nil {
			lapsed = m.lp.Lapsed()
		}
		select {
		case <-ctx.Done():
			log.Info("coordinator stopping")
			return 0
		case <-m.co.Failed():
			// The deferred close gives up the lease at once; a
			// supervisor (scanctl up, systemd) starts a fresh process.
			fmt.Fprintln(os.Stderr, "coordinator:", m.co.Err())
			return 1
		case <-hup:
			if msg, err := m.co.Reload(); err != nil {
				log.Warn("SIGHUP reload failed; old profiles kept", "err", err)
			} else {
				log.Info("SIGHUP: " + msg)
			}
		case <-lapsed:
			// Paused or cut off for longer than the lease TTL: the other
			// members may have dropped us, and protoactor blocks a member
			// id that left for good. Rejoin as a new member, same address.
			log.Warn("coordinator lease lapsed; rejoining the cluster as a new member", "address", m.co.Address())
			cur.Store(nil)
			m.close(log)
			for {
				if m, err = start(); err == nil {
					break
				}
				log.Warn("coordinator rejoin failed; retrying", "err", err)
				select {
				case <-ctx.Done():
					return 0
				case <-time.After(time.Second):
				}
			}
			cur.Store(m)
			log.Info("coordinator rejoined", "address", m.co.Address(), "member", m.co.MemberID())
		}
	}
}

// member is one start of the coordinator: the coordinator and how it
// announces itself (a cluster member's provider, or a plain lease).
type member struct {
	co  *coordinator.Coordinator
	lp  *coordinator.LeaseProvider
	ann *announcement
	api *client.Client // the public API's scans (package gateway); nil without --http
}

// status is the coordinator's status with its member id and the live
// coordinator leases.
func (m *member) status() *messages.StatusReply {
	st := m.co.Status()
	switch {
	case m.lp != nil:
		st.MemberId, st.Coordinators = m.co.MemberID(), m.lp.Live()
	case m.ann != nil:
		st = m.ann.status(st)
	}
	return st
}

// live is the live coordinators as this member's lease watch sees them.
func (m *member) live() []*messages.ClusterInfo {
	switch {
	case m == nil:
		return nil
	case m.lp != nil:
		return m.lp.Live()
	case m.ann != nil:
		return m.ann.status(&messages.StatusReply{}).GetCoordinators()
	}
	return nil
}

// peerWait bounds each peer's answer when /status gathers the cluster.
const peerWait = time.Second

// clusterStatus is status with every other live coordinator's counters
// (StatusReply.peers), for /status and the status page.
func (m *member) clusterStatus() *messages.StatusReply {
	st := m.status()
	var addrs []string
	for _, ci := range st.GetCoordinators() {
		addrs = append(addrs, ci.GetCoordinatorAddress())
	}
	st.Peers = m.co.PeerStatuses(addrs, peerWait)
	return st
}

// close withdraws the lease first (clients move on at once), then stops
// the coordinator (a cluster member withdraws as it stops).
func (m *member) close(log *slog.Logger) {
	if m == nil {
		return
	}
	if m.api != nil {
		m.api.Close()
	}
	if m.ann != nil {
		if err := m.ann.Close(); err != nil {
			log.Warn("withdrawing the coordinator lease failed; it expires by itself", "err", err)
		}
	}
	m.co.Close()
}

// checkListens applies cliutil.CheckListen to every address this
// coordinator listens on: the actor remote, the HTTP endpoint and, when
// it embeds NATS, the NATS client and route ports (all secured by
// --secrets).
func checkListens(o options, log *slog.Logger) error {
	secured := cliutil.SecretsDir(o.secrets) != ""
	listens := []cliutil.Listen{{Flag: "listen", Addr: o.listen, Secured: secured, SecureWith: "--secrets DIR"},
		{Flag: "http", Addr: o.httpAddr, Secured: secured, SecureWith: "--secrets DIR"}}
	if o.natsURL == "" {
		// --secrets: the embedded NATS server's client and route ports
		// are TLS with client certificates (bus.ServerConfig.TLS, Users).
		listens = append(listens, cliutil.Listen{Flag: "nats-listen", Addr: o.natsListen, Secured: secured, SecureWith: "--secrets DIR"},
			cliutil.Listen{Flag: "nats-cluster", Addr: o.natsCluster, Secured: secured, SecureWith: "--secrets DIR"})
	}
	return cliutil.CheckListens(log, o.insecure, cliutil.SystemLookupIP, listens...)
}

// countNATSErrors counts nc's asynchronous errors and disconnects (with
// an error) under op async and disconnect, keeping the handlers bus set
// (they log).
func countNATSErrors(nc *nats.Conn, count func(op string)) {
	asyncCB, discCB := nc.ErrorHandler(), nc.DisconnectErrHandler()
	nc.SetErrorHandler(func(c *nats.Conn, sub *nats.Subscription, err error) {
		count(coordinator.NATSOpAsync)
		if asyncCB != nil {
			asyncCB(c, sub, err)
		}
	})
	nc.SetDisconnectErrHandler(func(c *nats.Conn, err error) {
		if err != nil {
			count(coordinator.NATSOpDisconnect)
		}
		if discCB != nil {
			discCB(c, err)
		}
	})
}

func orNone(s string) string {
	if s == "" {
		return "off"
	}
	return s
}

// warnProfiles logs what the profiles parser accepted but warned about
// (unknown fields, repeated keys), as Accumulo's lenient parser would
// silently accept them.
func warnProfiles(log *slog.Logger, path string, p *selection.Profiles) {
	for _, w := range p.Warnings() {
		log.Warn("profiles: "+w, "file", path)
	}
}

func loadProfiles(path string) (*selection.Profiles, error) {
	if path == "" {
		return selection.DefaultProfiles(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--profiles: %w", err)
	}
	p, err := selection.ParseProfiles(data)
	if err != nil {
		return nil, fmt.Errorf("--profiles %s: %w", path, err)
	}
	return p, nil
}

func splitHostPort(s string) (string, int, error) {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	var port int
	if _, err := fmt.Sscanf(p, "%d", &port); err != nil || port < 0 || port > 65535 {
		return "", 0, errors.New("bad port " + p)
	}
	return h, port, nil
}
