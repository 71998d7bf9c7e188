package natsserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/scanplane/scanplane/bus"
)

// ErrPortInUse is returned (wrapped) by StartServer when the client port is
// already taken, typically by another coordinator or nats-server.
var ErrPortInUse = errors.New("natsserver: port in use")

// ServerConfig configures the embedded NATS server.
type ServerConfig struct {
	// Host is the interface the client port listens on. Default "127.0.0.1".
	Host string
	// Port is the client port; -1 picks a free port (tests). Default 4222.
	Port int
	// StoreDir is the JetStream storage directory. Default "./data/nats".
	StoreDir string
	// MaxPayload is the largest message the server accepts, in bytes.
	// Default 8 MiB; at most 64 MiB.
	MaxPayload int32
	// MaxStore caps JetStream file storage in bytes (every stream of the
	// server together); a write beyond it is refused with "insufficient
	// resources" and JetStream stays up. 0 = nats-server's default, 75%
	// of the free disk space at start.
	MaxStore int64
	// Name is the server name shown in monitoring and logs. JetStream
	// identifies the peers of a cluster by it, so a clustered node's name
	// must be unique in the cluster and the same across restarts: a node
	// restarted with the same Name and StoreDir rejoins with its data.
	// Default: standalone, the server's generated id; clustered,
	// DefaultNodeName(os.Hostname(), Port) ("<host>-<client port>", e.g.
	// "db1-4222"), which needs a fixed Port.
	Name string
	// ClusterName is the name of the NATS cluster; every node of one
	// cluster must use the same. Used only when ClusterListen is set.
	// Default "scanplane".
	ClusterName string
	// ClusterListen is the host:port of this node's route listener (the
	// port the other nodes of the cluster dial); port 0 picks a free port
	// (tests; see EmbeddedServer.ClusterAddr). Empty = standalone, no
	// cluster. Default "".
	ClusterListen string
	// Routes are the nats-route://host:port URLs of other nodes this node
	// dials when ClusterListen is set. The nodes gossip the rest of the
	// cluster, so one reachable seed suffices, but the usual setup lists
	// every node, this one included (a route to itself is ignored).
	// JetStream needs at least one route. Default none.
	Routes []string
	// LocalDirectGets names streams (e.g. "KV_scanplane-blocks") whose
	// direct gets this node answers from its own replica only: it takes
	// no notice of the other nodes' direct-get subscriptions of these
	// streams (the routes' export permissions deny them), so a client's
	// direct get never crosses a route and neither does its answer.
	// Without it a direct get goes to any replica of the stream, picked
	// at random, and its answer comes back over a route. A node with no
	// replica of the stream, or one still catching up (JetStream
	// subscribes a follower to direct gets once it is nearly current),
	// answers a direct get of it with no responders, and clients must
	// read from the stream's leader then (bus.BlockStore does). So every
	// node of the cluster should hold a replica (replicas = nodes) and
	// be configured alike. Clustered only. Default none.
	LocalDirectGets []string
	// ReadyTimeout bounds how long StartServer waits for the server to
	// accept connections. Default 10s.
	ReadyTimeout time.Duration
	// TLS, when set, makes the client port and the cluster route port
	// TLS only: the server presents TLS.Certificates, and requires and
	// verifies a client certificate against TLS.ClientCAs on every
	// client and route connection (TLS.ClientAuth must be
	// tls.RequireAndVerifyClientCert); a route it dials verifies the
	// peer node against TLS.RootCAs. cliutil.RemoteTLS builds it from a
	// secrets directory's coordinator certificate. nil = plain text, no
	// authentication (loopback only; see docs/security.md).
	TLS *tls.Config
	// Users, with TLS, authenticates every client by its certificate:
	// the certificate's subject must be one of Users' (nats-server's
	// verify_and_map), or the connection is refused ("Authorization
	// Violation"), and the client gets the permissions of that user's
	// role (UserPermissions, for the default bucket names). Empty = any
	// certificate the CA signed may do anything. Route connections are
	// authenticated by TLS alone (a certificate of the CA). With Users,
	// the server also deletes every consumer a scan server or client
	// creates other than an ordered consumer's (consumerguard.go), over
	// a connection of its own with TLS.Certificates[0], whose subject
	// must therefore be a user of role coordinator or admin.
	Users []CertUser
	// Logger receives the server's log lines (notices at Debug level);
	// nil = discard.
	Logger *slog.Logger
	// RestartFree: after JetStream ran out of disk space, it is restarted
	// in place once this many bytes are free in StoreDir (outofspace.go).
	// Default 32 MiB.
	RestartFree int64
	// SpaceLogger receives the lines about JetStream running out of disk
	// space and restarting; nil = Logger.
	SpaceLogger *slog.Logger
}

// DefaultServerConfig returns the defaults documented on ServerConfig.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{
		Host:         "127.0.0.1",
		Port:         4222,
		StoreDir:     "./data/nats",
		MaxPayload:   8 << 20,
		ClusterName:  "scanplane",
		ReadyTimeout: 10 * time.Second,
	}
}

// DefaultNodeName is the server name a clustered node gets when
// ServerConfig.Name is empty: host (with characters other than letters,
// digits, '-', '_' and '.' replaced by '_') and the client port, joined by
// '-'. It is stable across restarts of a node on the same host and port,
// and unique among nodes of one host, since they cannot share a port.
func DefaultNodeName(host string, port int) string {
	b := []byte(host)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		b = []byte("node")
	}
	return string(b) + "-" + strconv.Itoa(port)
}

// Clustered reports whether the configuration makes the server a node of a
// NATS cluster (ClusterListen is set).
func (c ServerConfig) Clustered() bool { return c.ClusterListen != "" }

// Validate reports the first invalid field by name.
func (c ServerConfig) Validate() error {
	switch {
	case c.Host == "":
		return errors.New("natsserver: ServerConfig.Host is empty")
	case c.Port != -1 && (c.Port < 1 || c.Port > 65535):
		return fmt.Errorf("natsserver: ServerConfig.Port %d: want 1..65535, or -1 for a random port", c.Port)
	case c.StoreDir == "":
		return errors.New("natsserver: ServerConfig.StoreDir is empty")
	case c.MaxPayload <= 0 || c.MaxPayload > 64<<20:
		return fmt.Errorf("natsserver: ServerConfig.MaxPayload %d: want 1..%d bytes", c.MaxPayload, 64<<20)
	case c.RestartFree < 0:
		return fmt.Errorf("natsserver: ServerConfig.RestartFree %d is negative (0 = the default)", c.RestartFree)
	case c.MaxStore < 0:
		return fmt.Errorf("natsserver: ServerConfig.MaxStore %d is negative (0 = the server's default)", c.MaxStore)
	case c.ReadyTimeout < 0:
		return fmt.Errorf("natsserver: ServerConfig.ReadyTimeout %s is negative", c.ReadyTimeout)
	case strings.ContainsAny(c.Name, " \t\r\n"):
		return fmt.Errorf("natsserver: ServerConfig.Name %q contains white space", c.Name)
	case c.TLS != nil && len(c.TLS.Certificates) == 0:
		return errors.New("natsserver: ServerConfig.TLS has no certificate")
	case len(c.Users) > 0 && c.TLS == nil:
		return errors.New("natsserver: ServerConfig.Users needs ServerConfig.TLS (users are the subjects of client certificates)")
	case c.TLS != nil && (c.TLS.ClientAuth != tls.RequireAndVerifyClientCert || c.TLS.ClientCAs == nil):
		return errors.New("natsserver: ServerConfig.TLS must require and verify client certificates (ClientAuth tls.RequireAndVerifyClientCert, ClientCAs set)")
	}
	if _, _, err := natsUsers(c.Users); err != nil {
		return err
	}
	if len(c.Users) > 0 {
		if err := c.checkOwnUser(); err != nil {
			return err
		}
	}
	if !c.Clustered() {
		if len(c.Routes) > 0 {
			return errors.New("natsserver: ServerConfig.Routes given without ServerConfig.ClusterListen (a standalone server has no routes)")
		}
		if len(c.LocalDirectGets) > 0 {
			return errors.New("natsserver: ServerConfig.LocalDirectGets given without ServerConfig.ClusterListen (a standalone server answers every direct get itself)")
		}
		return nil
	}
	if _, _, err := parseListen(c.ClusterListen); err != nil {
		return fmt.Errorf("natsserver: ServerConfig.ClusterListen %q: %w", c.ClusterListen, err)
	}
	switch {
	case c.ClusterName == "":
		return errors.New("natsserver: ServerConfig.ClusterName is empty (a clustered server needs one)")
	case strings.ContainsAny(c.ClusterName, " \t\r\n"):
		return fmt.Errorf("natsserver: ServerConfig.ClusterName %q contains white space", c.ClusterName)
	case len(c.Routes) == 0:
		return errors.New("natsserver: ServerConfig.Routes is empty: a clustered JetStream server needs at least one route (list every node's nats-route://host:port)")
	case c.Name == "" && c.Port == -1:
		return errors.New("natsserver: ServerConfig.Name is empty and Port is random: a clustered server needs a stable name (set Name, or a fixed Port for the default <host>-<port>)")
	}
	for i, st := range c.LocalDirectGets {
		if st == "" || strings.ContainsAny(st, " \t\r\n.*>") {
			return fmt.Errorf("natsserver: ServerConfig.LocalDirectGets[%d] %q: want a stream name (no white space, '.', '*' or '>')", i, st)
		}
	}
	for i, r := range c.Routes {
		if _, err := parseRoute(r); err != nil {
			return fmt.Errorf("natsserver: ServerConfig.Routes[%d] %q: %w", i, r, err)
		}
	}
	return nil
}

// checkOwnUser reports an error unless the subject of the server's own
// certificate is a user of role coordinator or admin (the consumer
// guard connects with it).
func (c ServerConfig) checkOwnUser() error {
	subject, err := bus.CertSubject(c.TLS)
	if err != nil {
		return err
	}
	for _, u := range c.Users {
		if u.Subject == subject && (u.Role == RoleCoordinator || u.Role == RoleAdmin) {
			return nil
		}
	}
	return fmt.Errorf("natsserver: ServerConfig.Users has no %s or %s user %q, the subject of the server's own certificate (TLS.Certificates[0]), which the server's consumer guard connects with", RoleCoordinator, RoleAdmin, subject)
}

// parseListen splits a host:port listen address; port 0 means any free port.
func parseListen(s string) (string, int, error) {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("want host:port: %w", err)
	}
	if h == "" {
		return "", 0, errors.New("want host:port, the host is empty (use 0.0.0.0 for every interface)")
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q: want 0..65535 (0 = any free port)", p)
	}
	return h, port, nil
}

// parseRoute parses a route URL: nats-route://host:port (the scheme
// nats:// is accepted too, as nats-server does).
func parseRoute(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("want nats-route://host:port: %w", err)
	}
	if u.Scheme != "nats-route" && u.Scheme != "nats" {
		return nil, fmt.Errorf("scheme %q: want nats-route://host:port", u.Scheme)
	}
	port, err := strconv.Atoi(u.Port())
	if u.Hostname() == "" || err != nil || port < 1 || port > 65535 {
		return nil, errors.New("want nats-route://host:port with a host and a port 1..65535")
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, errors.New("want nats-route://host:port, without path or query")
	}
	return u, nil
}

// EmbeddedServer is a NATS server with JetStream running in this process.
type EmbeddedServer struct {
	srv       *server.Server
	guard     *consumerGuard // nil without ServerConfig.Users
	space     *spaceWatch
	quorum    *quorumWatch // nil for a standalone server
	closeOnce sync.Once
}

// StartServer starts a NATS server with JetStream and waits until it accepts
// connections. A taken port gives an error wrapping ErrPortInUse; a server
// not ready within ReadyTimeout gives an error and is shut down.
func StartServer(cfg ServerConfig) (*EmbeddedServer, error) {
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = DefaultServerConfig().ReadyTimeout
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Clustered() && cfg.Name == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("natsserver: ServerConfig.Name is empty and the host name is unknown (%w): set Name", err)
		}
		cfg.Name = DefaultNodeName(host, cfg.Port)
	}
	opts := &server.Options{
		ServerName: cfg.Name,
		Host:       cfg.Host,
		Port:       cfg.Port,
		MaxPayload: cfg.MaxPayload,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		NoSigs:     true,
		// Pings on client and route connections find a peer that vanished
		// without closing them (a machine powered off or cut from the
		// network) in 6-8 s instead of nats-server's 4-6 minutes (every
		// 2 min, 2 outstanding): until then the cluster keeps routing to
		// the dead node's interest. See bus.PingInterval.
		PingInterval: bus.PingInterval,
		MaxPingsOut:  bus.PingsOut,
	}
	if cfg.MaxStore > 0 {
		opts.JetStreamMaxStore = cfg.MaxStore
	}
	if cfg.TLS != nil {
		opts.TLSConfig, opts.TLSVerify, opts.TLSTimeout = cfg.TLS.Clone(), true, tlsTimeout.Seconds()
		if len(cfg.Users) > 0 {
			users, accounts, err := natsUsers(cfg.Users)
			if err != nil {
				return nil, err
			}
			opts.Users, opts.Accounts, opts.TLSMap = users, accounts, true
		}
	}
	if cfg.Clustered() {
		host, port, _ := parseListen(cfg.ClusterListen)
		if port == 0 {
			port = -1 // nats-server's "any free port"
		}
		opts.Cluster.Name, opts.Cluster.Host, opts.Cluster.Port = cfg.ClusterName, host, port
		if cfg.TLS != nil {
			opts.Cluster.TLSConfig, opts.Cluster.TLSTimeout = cfg.TLS.Clone(), tlsTimeout.Seconds()
		}
		for _, r := range cfg.Routes {
			u, _ := parseRoute(r)
			opts.Routes = append(opts.Routes, u)
		}
		opts.Cluster.Permissions = localDirectGetPermissions(cfg.LocalDirectGets)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsserver: embedded nats server: %w", err)
	}
	lg := &serverLogger{log: cfg.Logger, fatal: make(chan error, 1)}
	if lg.log == nil {
		lg.log = slog.New(slog.DiscardHandler)
	}
	if cfg.RestartFree == 0 {
		cfg.RestartFree = defaultRestartFree
	}
	spaceLog := cfg.SpaceLogger
	if spaceLog == nil {
		spaceLog = lg.log
	}
	lg.space = newSpaceWatch(cfg, spaceLog)
	srv.SetLoggerV2(lg, false, false, false)
	srv.Start()

	hp := net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))
	if cfg.Port == -1 {
		hp = net.JoinHostPort(cfg.Host, "random")
	}
	deadline := time.Now().Add(cfg.ReadyTimeout)
	for {
		select {
		case ferr := <-lg.fatal:
			srv.Shutdown()
			srv.WaitForShutdown()
			if errors.Is(ferr, syscall.EADDRINUSE) {
				return nil, fmt.Errorf("%w: cannot listen on %s (another nats-server or coordinator running?): %w", ErrPortInUse, hp, ferr)
			}
			return nil, fmt.Errorf("natsserver: embedded nats server on %s: %w", hp, ferr)
		default:
		}
		if srv.ReadyForConnections(50 * time.Millisecond) {
			break
		}
		if time.Now().After(deadline) {
			srv.Shutdown()
			srv.WaitForShutdown()
			return nil, fmt.Errorf("natsserver: embedded nats server on %s not ready after %s", hp, cfg.ReadyTimeout)
		}
	}
	if !srv.JetStreamEnabled() {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("natsserver: embedded nats server on %s: JetStream did not start (store dir %q)", hp, cfg.StoreDir)
	}
	es := &EmbeddedServer{srv: srv, space: lg.space}
	if cfg.TLS != nil && len(cfg.Users) > 0 {
		if es.guard, err = startConsumerGuard(srv, cfg, lg.log); err != nil {
			srv.Shutdown()
			srv.WaitForShutdown()
			return nil, err
		}
	}
	lg.space.start(srv, opts)
	if cfg.Clustered() {
		if es.quorum, err = startQuorumWatch(srv, cfg, lg.log); err != nil {
			es.guard.close()
			lg.space.close()
			srv.Shutdown()
			srv.WaitForShutdown()
			return nil, err
		}
	}
	return es, nil
}

// localDirectGetPermissions is the route permissions that keep the
// direct gets of streams on the node a client sent them to
// (ServerConfig.LocalDirectGets): the other nodes' direct-get
// subscriptions of those streams are refused ("export" is what a node
// passes on to a route), so a node delivers a direct get only to its own
// replica. nil when there are none.
func localDirectGetPermissions(streams []string) *server.RoutePermissions {
	if len(streams) == 0 {
		return nil
	}
	var deny []string
	for _, st := range streams {
		// The two subscriptions of a replica: by request body, and last
		// by the subject appended.
		deny = append(deny, directGetPrefix+st, directGetPrefix+st+".>")
	}
	return &server.RoutePermissions{Export: &server.SubjectPermission{Deny: deny}}
}

// directGetPrefix begins the subjects of JetStream's direct gets,
// followed by the stream's name.
const directGetPrefix = "$JS.API.DIRECT.GET."

// tlsTimeout bounds a TLS handshake on the client and route ports. It is
// above nats-server's default of 2 s, which a loaded machine can exceed.
const tlsTimeout = 5 * time.Second

// ClientURL is the nats:// URL clients use to reach this server (a wildcard
// listen address is reported as 127.0.0.1).
func (s *EmbeddedServer) ClientURL() string {
	addr, ok := s.srv.Addr().(*net.TCPAddr)
	if !ok || addr == nil {
		return s.srv.ClientURL()
	}
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "nats://" + net.JoinHostPort(host, strconv.Itoa(addr.Port))
}

// Name is the server name (ServerConfig.Name, or the default it got).
func (s *EmbeddedServer) Name() string { return s.srv.Name() }

// ClusterAddr is the host:port of the route listener, with the port it
// got when ClusterListen asked for port 0; "" when standalone.
func (s *EmbeddedServer) ClusterAddr() string {
	addr := s.srv.ClusterAddr()
	if addr == nil {
		return ""
	}
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, strconv.Itoa(addr.Port))
}

// RouteURL is the nats-route:// URL other nodes use to reach this node's
// route listener; "" when standalone.
func (s *EmbeddedServer) RouteURL() string {
	if a := s.ClusterAddr(); a != "" {
		return "nats-route://" + a
	}
	return ""
}

// ErrNoQuorum is wrapped by WaitJetStream when a clustered JetStream has
// no metadata leader in time: fewer than a majority of its nodes are up
// and routed to each other.
var ErrNoQuorum = errors.New("natsserver: no JetStream quorum")

// WaitJetStream waits until this server's JetStream can serve requests:
// at once for a standalone server; for a node of a cluster, once the
// cluster has elected a metadata leader and this node has caught up with
// it, which needs a majority of the nodes up and routed to each other.
// It polls until ctx ends, then returns an error wrapping ErrNoQuorum
// that names the routes this node has and the leader it knows.
func (s *EmbeddedServer) WaitJetStream(ctx context.Context) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if !s.srv.JetStreamEnabled() {
			return fmt.Errorf("%w: JetStream is not running on %s", ErrNoQuorum, s.Name())
		}
		leader, ok := s.jetStreamReady()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: node %s (cluster %s) sees %d routes and metadata leader %q: %w",
				ErrNoQuorum, s.Name(), s.srv.ClusterName(), s.srv.NumRoutes(), leader, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// jetStreamReady reports whether JetStream serves requests, and the
// metadata leader this node knows.
func (s *EmbeddedServer) jetStreamReady() (leader string, ok bool) {
	if !s.srv.JetStreamIsClustered() {
		return "", true
	}
	info, err := s.srv.Jsz(&server.JSzOptions{})
	if err != nil || info.Meta == nil {
		return "", false
	}
	return info.Meta.Leader, info.Meta.Leader != "" && s.srv.JetStreamIsCurrent()
}

// ConsumersDeleted counts the consumers of restricted users this
// server's guard deleted (see ServerConfig.Users).
func (s *EmbeddedServer) ConsumersDeleted() uint64 {
	if s.guard == nil {
		return 0
	}
	return s.guard.deleted.Load()
}

// Server exposes the underlying nats-server (monitoring, tests).
func (s *EmbeddedServer) Server() *server.Server { return s.srv }

// OutOfSpace reports whether JetStream ran out of disk space and has not
// been restarted since (writes fail meanwhile; see outofspace.go).
func (s *EmbeddedServer) OutOfSpace() bool { return s.space.out.Load() }

// SpaceRestarts counts the restarts of JetStream after it ran out of
// disk space.
func (s *EmbeddedServer) SpaceRestarts() uint64 { return s.space.restarts.Load() }

// Close shuts the server down and waits until it has stopped. Safe to call
// more than once.
func (s *EmbeddedServer) Close() {
	s.closeOnce.Do(func() {
		s.guard.close()
		s.space.close()
		s.quorum.close()
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
	})
}

// serverLogger routes nats-server logs to slog and captures fatal errors
// (which nats-server otherwise turns into os.Exit with its own logger).
type serverLogger struct {
	log   *slog.Logger
	fatal chan error
	space *spaceWatch // nil until the server is created
}

func (l *serverLogger) Noticef(format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...), "component", "nats-server")
}

func (l *serverLogger) Warnf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Warn(msg, "component", "nats-server")
	l.space.saw(msg)
}

func (l *serverLogger) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg, "component", "nats-server")
	l.space.saw(msg)
}

func (l *serverLogger) Debugf(format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...), "component", "nats-server")
}

func (l *serverLogger) Tracef(format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...), "component", "nats-server")
}

// Fatalf keeps the first error argument (so errors.Is works on it) and
// hands it to StartServer instead of exiting.
func (l *serverLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg, "component", "nats-server")
	err := errors.New(msg)
	for _, a := range v {
		if e, ok := a.(error); ok {
			err = e
			break
		}
	}
	select {
	case l.fatal <- err:
	default:
	}
}
