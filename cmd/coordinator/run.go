package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/coordinator"
	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/natsserver"
	"github.com/scanplane/scanplane/internal/readyfile"
	"github.com/scanplane/scanplane/internal/remoting"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
	"github.com/scanplane/scanplane/wire"
)

// run is the coordinator's life in stages: the flags, the configuration
// they make (setup), then the process's parts in the order each needs the
// one before (startNATS, openBus, serveHTTP, openLeases, startServing),
// then serving until a signal or a failure (serve). It returns the exit
// status: 0 after a clean stop (or --help, --version, --check-config), 1
// on a failure at run time, 2 on bad flags or configuration.
func run(args []string) int {
	o, fs, code, ok := parseFlags(args)
	if !ok {
		return code
	}
	s, err := configure(o, fs)
	if err != nil {
		return report(err)
	}
	if s == nil {
		return 0 // --check-config
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.dieWithParent {
		cliutil.ExitWhenStdinCloses(stop)
	}
	p := &process{setup: s}
	defer p.close()
	for _, stage := range []func(context.Context) error{p.startNATS, p.openBus, p.serveHTTP, p.openLeases, p.startServing} {
		if err := stage(ctx); err != nil {
			return report(err)
		}
	}
	return p.serve(ctx)
}

// exitError is a stage's failure: run prints "coordinator: " and the
// error, and exits with code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// badConfig is a failure of the flags or configuration (exit status 2).
func badConfig(err error) error { return &exitError{code: 2, err: err} }

// failed is a failure at run time (exit status 1), err prefixed with what
// failed when what is not empty.
func failed(what string, err error) error {
	if what != "" {
		err = fmt.Errorf("%s: %w", what, err)
	}
	return &exitError{code: 1, err: err}
}

// report prints err and returns its exit status.
func report(err error) int {
	fmt.Fprintln(os.Stderr, "coordinator:", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// parseFlags parses args; ok is false when run ends here with code:
// --help and --version (printed, 0), bad flags or arguments (2).
func parseFlags(args []string) (o options, fs *flag.FlagSet, code int, ok bool) {
	fs = newFlagSet(&o)
	if err := cliutil.ParseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			cliutil.PrintHelp(os.Stdout, "coordinator [flags]", about, fs)
			return o, fs, 0, false
		}
		fmt.Fprintf(os.Stderr, "coordinator: %v\nrun 'coordinator --help'\n", err)
		return o, fs, 2, false
	}
	if o.showVersion {
		fmt.Println("coordinator", cliutil.Version(version))
		return o, fs, 0, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "coordinator: unexpected arguments %q\n", fs.Args())
		return o, fs, 2, false
	}
	return o, fs, 0, true
}

// setup is what the flags configure: nothing is started yet.
type setup struct {
	o        options
	log      *slog.Logger
	profiles *selection.Profiles
	cc       coordinator.CoordinatorConfig
	httpSec  *cliutil.HTTPSecurity
	// sc configures the embedded NATS server; nil with --nats.
	sc       *natsserver.ServerConfig
	replicas int
}

// configure checks the flags and builds the configuration of every part;
// with --check-config it prints the profiles and returns nil.
func configure(o options, fs *flag.FlagSet) (*setup, error) {
	log, err := cliutil.Logger(os.Stderr, o.logLevel, o.logFormat)
	if err != nil {
		return nil, badConfig(err)
	}
	profiles, err := loadProfiles(o.profiles)
	if err != nil {
		return nil, badConfig(err)
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
		return nil, nil
	}
	warnProfiles(log, o.profiles, profiles)
	if err := checkListens(o, log); err != nil {
		return nil, badConfig(err)
	}
	switch {
	case o.clusterProvider != "nats-kv" && o.clusterProvider != "none":
		return nil, badConfig(fmt.Errorf("--cluster-provider %q: want nats-kv or none", o.clusterProvider))
	case o.leaseTTL < 300*time.Millisecond:
		return nil, badConfig(fmt.Errorf("--lease-ttl %v: must be at least 300ms", o.leaseTTL))
	case o.clusterName == "":
		return nil, badConfig(errors.New("--cluster-name is empty"))
	}
	s := &setup{o: o, log: log, profiles: profiles, cc: coordinator.DefaultCoordinatorConfig()}
	cc := &s.cc
	cc.System = remoting.SystemConfig{Listen: o.listen, Advertise: o.advertise}
	if dir := cliutil.SecretsDir(o.secrets); dir != "" {
		if cc.System.TLS, err = cliutil.RemoteTLS(dir, "coordinator"); err != nil {
			return nil, badConfig(err)
		}
	}
	// --http with --secrets: HTTPS, and every path needs a client or
	// admin certificate or the bearer token.
	if s.httpSec, err = cliutil.LoadHTTPSecurity(cliutil.SecretsDir(o.secrets), "coordinator", o.httpTokenFile); err != nil {
		return nil, badConfig(err)
	}
	cc.HeartbeatMisses = o.misses
	cc.Flow.BusySlack, cc.Flow.StartStall = o.busySlack, o.startStall
	cc.Logger = log
	cc.Metrics = coordinator.NewCoordMetrics()
	cc.Version = buildVersion()
	if err := cc.Validate(); err != nil {
		return nil, badConfig(err)
	}
	replicasSet := false
	fs.Visit(func(f *flag.Flag) { replicasSet = replicasSet || f.Name == "replicas" })
	if s.sc, s.replicas, err = natsSetup(o, replicasSet); err != nil {
		return nil, badConfig(err)
	}
	if s.sc != nil {
		s.sc.SpaceLogger = log
		if s.sc.TLS = cc.System.TLS; s.sc.TLS != nil {
			// --secrets: TLS on the NATS client and route ports, every
			// client authenticated by its role certificate and held to
			// that role's permissions (natsserver.UserPermissions).
			// The embedded server's warnings and errors (a refused TLS
			// handshake, an authorization or permissions violation) go
			// to the coordinator's log; its notices at debug level.
			s.sc.Logger = log
			if s.sc.Users, err = natsUsers(cliutil.SecretsDir(o.secrets)); err != nil {
				return nil, badConfig(err)
			}
		}
	}
	return s, nil
}

// process is the running coordinator process: its parts, in the order
// the stages start them, and what close undoes.
type process struct {
	*setup
	embedded          *natsserver.EmbeddedServer // nil with --nats
	natsURL, natsNode string
	conn              *bus.Conn
	meta              *bus.MetaStore
	httpAddr          string
	leases            *bus.LeaseStore // nil with --cluster-provider none
	reloader          func() (*selection.Profiles, error)
	cur               atomic.Pointer[member] // nil while (re)starting
	closers           []func()
}

// onClose registers f to run at close, before what was registered earlier.
func (p *process) onClose(f func()) { p.closers = append(p.closers, f) }

// close stops every part in the reverse order of their start.
func (p *process) close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}

// startNATS starts the embedded NATS server (not with --nats) and, for a
// node of a cluster, waits for the JetStream quorum.
func (p *process) startNATS(ctx context.Context) error {
	p.natsURL = p.o.natsURL
	if p.sc == nil {
		return nil
	}
	srv, err := natsserver.StartServer(*p.sc)
	if err != nil {
		return failed("embedded NATS", err)
	}
	p.onClose(srv.Close)
	p.embedded = srv
	if p.sc.Clustered() {
		p.cc.QuorumLost = srv.QuorumLost
	}
	p.natsURL, p.natsNode = srv.ClientURL(), srv.Name()
	if p.sc.Clustered() {
		p.log.Info("embedded NATS node started; waiting for JetStream quorum", "url", p.natsURL, "name", srv.Name(), "cluster", srv.ClusterAddr(), "routes", p.sc.Routes)
		wctx, cancel := context.WithTimeout(ctx, jetStreamWait)
		err := srv.WaitJetStream(wctx)
		cancel()
		if err != nil {
			return failed("embedded NATS", err)
		}
	}
	p.log.Info("embedded NATS started", "url", p.natsURL, "store", p.sc.StoreDir, "replicas", p.replicas)
	return nil
}

// openBus connects to NATS and opens the metadata and blocks buckets.
func (p *process) openBus(ctx context.Context) error {
	bc := bus.DefaultConfig()
	bc.URL, bc.Name, bc.Logger, bc.Replicas = p.natsURL, "scanplane-coordinator", p.log, p.replicas
	bc.TLS = p.cc.System.TLS
	conn, err := bus.Connect(ctx, bc)
	if err != nil {
		return failed("", err)
	}
	p.onClose(conn.Close)
	p.conn = conn
	countNATSErrors(conn.NATS(), p.cc.Metrics.NATSError)
	if p.meta, err = conn.MetaStore(ctx); err != nil {
		return failed("metadata store", err)
	}
	// The blocks bucket too, before any scan server opens it: with
	// --secrets a scan server may read it but not create it.
	if _, err := conn.BlockStore(ctx); err != nil {
		return failed("block store", err)
	}
	if p.o.profiles != "" {
		path, log := p.o.profiles, p.log
		p.reloader = func() (*selection.Profiles, error) {
			pr, err := loadProfiles(path)
			if err == nil {
				warnProfiles(log, path, pr)
			}
			return pr, err
		}
	}
	return nil
}

// serveHTTP serves /metrics, /status, the status page and pprof on
// --http. It comes before the coordinator: its address goes into the
// lease.
func (p *process) serveHTTP(context.Context) error {
	if p.o.httpAddr == "" {
		return nil
	}
	l, err := cliutil.ListenHTTP("http", p.o.httpAddr, p.httpSec)
	if err != nil {
		return failed("", err)
	}
	p.httpAddr = l.Addr().String()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), p.cc.Metrics,
		cliutil.BuildInfoCollector(cliutil.Version(version)))
	reg.MustRegister(coordinator.CoordinatorCollectors(func() *coordinator.Coordinator {
		if m := p.cur.Load(); m != nil {
			return m.co
		}
		return nil
	})...)
	if embedded := p.embedded; embedded != nil {
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
		m := p.cur.Load()
		if m == nil {
			http.Error(w, "coordinator (re)starting", http.StatusServiceUnavailable)
			return
		}
		cliutil.WriteStatusJSON(w, m.clusterStatus())
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		m := p.cur.Load()
		if m == nil {
			http.Error(w, "coordinator (re)starting", http.StatusServiceUnavailable)
			return
		}
		writeStatusPage(w, m.clusterStatus(), time.Now(), p.httpSec.Scheme())
	})
	cliutil.HandlePprof(mux)
	p.onClose(cliutil.ServeListener(l, mux, p.httpSec, p.log))
	return nil
}

// openLeases opens the lease bucket (--cluster-provider nats-kv).
func (p *process) openLeases(ctx context.Context) error {
	if p.o.clusterProvider != "nats-kv" {
		return nil
	}
	lc := bus.DefaultLeaseConfig()
	lc.TTL = p.o.leaseTTL
	lc.Renew = p.o.leaseTTL / 3
	var err error
	if p.leases, err = p.conn.Leases(ctx, lc); err != nil {
		return failed("coordinator leases", err)
	}
	return nil
}

// startMember starts a coordinator: a new actor system (a new member id
// in the cluster) and a new incarnation, so clients tell a restarted
// coordinator on the same address from the one they knew.
func (p *process) startMember(ctx context.Context) (*member, error) {
	var inc [8]byte
	if _, err := rand.Read(inc[:]); err != nil {
		return nil, fmt.Errorf("incarnation: %w", err)
	}
	ci := &messages.ClusterInfo{RouterId: wire.RouterName, HttpAddress: p.httpAddr, StartedUnixMs: time.Now().UnixMilli(),
		Version: p.cc.Version, Incarnation: hex.EncodeToString(inc[:])}
	if p.sc != nil {
		ci.NatsUrl, ci.NatsNode = p.natsURL, p.natsNode
	}
	ccfg := p.cc
	m := &member{}
	if p.leases != nil {
		m.lp = coordinator.NewLeaseProvider(p.leases, ci, p.log)
		ccfg.System.Cluster = &coordinator.ClusterConfig{Name: p.o.clusterName, Provider: m.lp}
	}
	co, err := coordinator.NewCoordinator(ccfg, p.conn, p.meta, p.profiles)
	if err != nil {
		return nil, err
	}
	m.co = co
	co.SetReloader(p.reloader)
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
		if m.ann, err = announce(ctx, p.conn, co, ci); err != nil {
			co.Close()
			return nil, err
		}
	}
	return m, nil
}

// startServing starts the first coordinator, answers discovery requests,
// and says it is ready (the ready file and a line on stdout).
func (p *process) startServing(ctx context.Context) error {
	m, err := p.startMember(ctx)
	if err != nil {
		return failed("", err)
	}
	p.cur.Store(m)
	p.onClose(func() { p.cur.Load().close(p.log) })
	// Clients that cannot read the lease bucket yet (JetStream electing a
	// leader) ask the coordinators over core NATS (bus.DiscoverSubject).
	stopDiscovery, err := p.conn.ServeDiscovery(func() []*messages.ClusterInfo { return p.cur.Load().live() })
	if err != nil {
		return failed("", err)
	}
	p.onClose(stopDiscovery)
	if err := readyfile.Write(p.o.readyFile, readyfile.Ready{NATS: p.natsURL, Actor: m.co.Address(), HTTP: p.httpAddr, PID: os.Getpid()}); err != nil {
		return failed("ready file", err)
	}
	fmt.Printf("coordinator ready: nats=%s actor=%s %s=%s cluster=%s profiles=%s\n", p.natsURL, m.co.Address(), p.httpSec.Scheme(), orNone(p.httpAddr),
		p.o.clusterProvider, strings.Join(p.profiles.Summary(), " | "))
	return nil
}

// serve runs until ctx ends (0) or the coordinator fails (1): SIGHUP
// reloads the profiles; a lapsed lease makes the coordinator rejoin the
// cluster as a new member.
func (p *process) serve(ctx context.Context) int {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	m := p.cur.Load()
	for {
		var lapsed <-chan struct{}
		if m.lp != nil {
			lapsed = m.lp.Lapsed()
		}
		select {
		case <-ctx.Done():
			p.log.Info("coordinator stopping")
			return 0
		case <-m.co.Failed():
			// The deferred close gives up the lease at once; a
			// supervisor (scanctl up, systemd) starts a fresh process.
			fmt.Fprintln(os.Stderr, "coordinator:", m.co.Err())
			return 1
		case <-hup:
			if msg, err := m.co.Reload(); err != nil {
				p.log.Warn("SIGHUP reload failed; old profiles kept", "err", err)
			} else {
				p.log.Info("SIGHUP: " + msg)
			}
		case <-lapsed:
			// Paused or cut off for longer than the lease TTL: the other
			// members may have dropped us, and protoactor blocks a member
			// id that left for good. Rejoin as a new member, same address.
			p.log.Warn("coordinator lease lapsed; rejoining the cluster as a new member", "address", m.co.Address())
			p.cur.Store(nil)
			m.close(p.log)
			if m = p.rejoin(ctx); m == nil {
				return 0
			}
			p.cur.Store(m)
			p.log.Info("coordinator rejoined", "address", m.co.Address(), "member", m.co.MemberID())
		}
	}
}

// rejoin starts a new coordinator, retrying every second until it starts
// or ctx ends (nil).
func (p *process) rejoin(ctx context.Context) *member {
	for {
		m, err := p.startMember(ctx)
		if err == nil {
			return m
		}
		p.log.Warn("coordinator rejoin failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}
