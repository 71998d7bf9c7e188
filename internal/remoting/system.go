package remoting

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// ErrListen: the actor system could not listen on its address.
var ErrListen = errors.New("remoting: cannot listen")

// SystemConfig configures an actor system with remote.
type SystemConfig struct {
	// Listen is host:port to listen on; port 0 = ephemeral. Default 127.0.0.1:0.
	Listen string
	// Advertise is the host:port other processes use to reach this one;
	// default = the actual listen address.
	Advertise string
	// Logger receives our logs; protoactor's own logs go to ActorLogger.
	Logger *slog.Logger
	// ActorLogger receives protoactor's logs; default discards them
	// (protoactor is very chatty at INFO).
	ActorLogger *slog.Logger
	// ShutdownTimeout bounds Close's graceful remote shutdown (it waits
	// for open gRPC streams, which a hung peer keeps open); after it the
	// gRPC server is stopped hard, and Close waits at most as long again
	// before it returns. 0 means the default, 5s.
	ShutdownTimeout time.Duration
	// Cluster, when set, makes the system a Proto.Actor cluster member
	// (coordinators: coordinator.ClusterConfig); nil = a plain remote
	// system.
	Cluster Member
	// TLS, when set, secures the remote with mutual TLS: it is the gRPC
	// server's TLS configuration (it must require and verify a client
	// certificate: ClientAuth tls.RequireAndVerifyClientCert with the
	// cluster CA as ClientCAs) and the one this system dials its peers
	// with (the CA as RootCAs; its Certificates are presented to them).
	// A peer without a certificate signed by the CA cannot connect, and a
	// refused handshake is logged on Logger. nil = plain text. See
	// cliutil.RemoteTLS, which builds it from a secrets directory.
	TLS *tls.Config
	// MaxMessage is the largest gRPC message the remote accepts; 0 means
	// ServerMaxMessage. A system that scans (row batches arrive there:
	// a client's, a coordinator's with the public API's gateway) sets
	// ClientMaxMessage.
	MaxMessage int
}

const defaultShutdownTimeout = 5 * time.Second

// Validate checks the config.
func (c SystemConfig) Validate() error {
	if c.Listen == "" {
		return fmt.Errorf("remoting: Listen is empty")
	}
	if _, _, err := splitHostPort(c.Listen); err != nil {
		return fmt.Errorf("remoting: Listen %q: %w", c.Listen, err)
	}
	if c.Advertise != "" {
		if _, _, err := splitHostPort(c.Advertise); err != nil {
			return fmt.Errorf("remoting: Advertise %q: %w", c.Advertise, err)
		}
	}
	if c.MaxMessage != 0 && c.MaxMessage < 1<<20 {
		return fmt.Errorf("remoting: MaxMessage %d must be 0 (the default) or >= 1 MiB", c.MaxMessage)
	}
	if c.ShutdownTimeout < 0 {
		return fmt.Errorf("remoting: ShutdownTimeout %v must be >= 0", c.ShutdownTimeout)
	}
	if err := validateTLS(c.TLS); err != nil {
		return err
	}
	if c.Cluster != nil {
		return c.Cluster.Validate()
	}
	return nil
}

func validateTLS(t *tls.Config) error {
	switch {
	case t == nil:
		return nil
	case len(t.Certificates) == 0 && t.GetCertificate == nil:
		return fmt.Errorf("remoting: TLS has no certificate")
	case t.ClientAuth != tls.RequireAndVerifyClientCert:
		return fmt.Errorf("remoting: TLS ClientAuth %v: want tls.RequireAndVerifyClientCert (mutual TLS)", t.ClientAuth)
	case t.ClientCAs == nil:
		return fmt.Errorf("remoting: TLS has no ClientCAs to verify peers with")
	}
	return nil
}

// remoteTLSOptions are the remote options of mutual TLS with cfg (see
// SystemConfig.TLS) and the server's limits lim, next to the server
// options given (remote's WithServerOptions replaces the list, so every
// server option goes through here): the gRPC server takes cfg's
// credentials, and every dial does too (replacing remote's default
// grpc.WithInsecure). A handshake that fails is logged on log: on the
// accepting side as "remote: TLS handshake refused" with the peer's
// address and the reason (unknown CA, expired certificate, no
// certificate, not TLS at all), rate-limited (TransportOptionsLimits).
func remoteTLSOptions(cfg *tls.Config, log *slog.Logger, guard *Guard, lim RemoteLimits, server ...grpc.ServerOption) []remote.ConfigOption {
	if cfg == nil {
		return TransportOptionsLimits(nil, guard, lim, server...)
	}
	return TransportOptionsLimits(loggedCreds{TransportCredentials: credentials.NewTLS(cfg), log: log}, guard, lim, server...)
}

// loggedCreds logs the handshakes it dials that fail.
type loggedCreds struct {
	credentials.TransportCredentials
	log *slog.Logger
}

func (c loggedCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, conn)
	if err != nil && c.log != nil && ctx.Err() == nil {
		c.log.Warn("remote: TLS handshake with peer failed", "peer", authority, "err", err)
	}
	return out, info, err
}

func (c loggedCreds) Clone() credentials.TransportCredentials {
	return loggedCreds{TransportCredentials: c.TransportCredentials.Clone(), log: c.log}
}

func splitHostPort(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	return h, port, nil
}

// Member starts and stops an actor system's cluster membership.
type Member interface {
	// Validate names the first bad field of the membership's config.
	Validate() error
	// Start makes sys, with remote configured by rc, a cluster member and
	// starts its remote; log gets the membership's logs.
	Start(sys *actor.ActorSystem, rc *remote.Config, log *slog.Logger) (*cluster.Cluster, error)
	// Stop leaves c, waiting at most timeout.
	Stop(c *cluster.Cluster, log *slog.Logger, timeout time.Duration)
}

// System is a protoactor actor system with remote started.
type System struct {
	Actors *actor.ActorSystem
	Remote *remote.Remote
	// Cluster is the cluster this system is a member of (nil: none).
	Cluster *cluster.Cluster
	member  Member
	Logger  *slog.Logger
	// shutdown is SystemConfig.ShutdownTimeout (default applied).
	shutdown time.Duration
	leave    sync.Once
	// stops knows the remote's running stream handlers and gates the
	// sends to remote PIDs, so Close can stop the remote without racing
	// protoactor's graceful shutdown (stop.go).
	stops *Tracker
	// Guard refuses what the remote does not serve (guard.go).
	Guard *Guard
}

// LeaveCluster withdraws this member from its cluster (its lease is
// deleted: the others and the clients see it leave at once) and stops
// gossip; the actors keep running. Close calls it; a coordinator calls it
// first when it stops, so nothing is sent to it while it winds down.
func (s *System) LeaveCluster() {
	if s == nil || s.Cluster == nil {
		return
	}
	s.leave.Do(func() { s.member.Stop(s.Cluster, s.Logger, s.shutdown) })
}

// DiscardLogger returns a logger that drops everything.
func DiscardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// StartSystem starts an actor system listening on cfg.Listen.
func StartSystem(cfg SystemConfig) (*System, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	host, port, _ := splitHostPort(cfg.Listen)
	// remote.Start panics when it cannot listen: probe first so the common
	// case (port in use) is a clear error. A race with another process
	// grabbing the port in between is still caught by the recover below.
	if port != 0 {
		l, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("%w on %s: %v", ErrListen, cfg.Listen, err)
		}
		_ = l.Close()
	}
	logger := cfg.Logger
	if logger == nil {
		logger = DiscardLogger()
	}
	alog := cfg.ActorLogger
	if alog == nil {
		alog = DiscardLogger()
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return alog }),
		actor.WithDeadLetterThrottleCount(0))
	opts := []remote.ConfigOption{WriterQueueOption()}
	if cfg.Advertise != "" {
		opts = append(opts, remote.WithAdvertisedHost(cfg.Advertise))
	}
	stops := NewTracker()
	stops.GateSends(sys)
	guard := NewGuard(logger, sys)
	lim := DefaultRemoteLimits
	if cfg.MaxMessage != 0 {
		lim.MaxMessage = cfg.MaxMessage
	}
	opts = append(opts, remoteTLSOptions(cfg.TLS, logger, guard, lim, stops.ServerOption())...)
	rc := remote.Configure(host, port, opts...)
	// One connect try (then its 2s back-off) before the endpoint is
	// reported terminated, instead of protoactor's five: a dead peer is
	// noticed in ~2s rather than ~10s, and protoactor's retry loop, which
	// dials a new gRPC ClientConn per try without closing the previous one,
	// leaks nothing (the single conn is closed when the writer stops).
	rc.MaxRetryCount = 1
	st := cfg.ShutdownTimeout
	if st == 0 {
		st = defaultShutdownTimeout
	}
	if cfg.Cluster != nil {
		c, err := cfg.Cluster.Start(sys, rc, logger)
		if err != nil {
			if c.Remote != nil {
				c.Remote.Shutdown(false)
			}
			sys.Shutdown()
			return nil, fmt.Errorf("%w on %s: cluster member: %v", ErrListen, cfg.Listen, err)
		}
		return &System{Actors: sys, Remote: c.Remote, Cluster: c, member: cfg.Cluster, Logger: logger, shutdown: st, stops: stops, Guard: guard}, nil
	}
	r := remote.NewRemote(sys, rc)
	if err := StartRemote(r); err != nil {
		return nil, fmt.Errorf("%w on %s: %v", ErrListen, cfg.Listen, err)
	}
	return &System{Actors: sys, Remote: r, Logger: logger, shutdown: st, stops: stops, Guard: guard}, nil
}

// StartRemote starts r, returning as an error the panic protoactor's
// remote raises when it cannot listen.
func StartRemote(r *remote.Remote) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	r.Start()
	return nil
}

// Address is the advertised host:port of this system.
func (s *System) Address() string { return s.Actors.Address() }

// Close stops remote and the actor system, in at most about twice
// ShutdownTimeout. The sends to remote PIDs under way end first and
// later ones are dropped, whichever actor or goroutine makes them; then
// inbound gRPC streams are stopped at once (what arrives during a
// shutdown is dropped either way), and, once their handlers have
// returned, the outbound endpoints are stopped gracefully; see stop.go
// for why this order and not protoactor's.
func (s *System) Close() {
	st := s.shutdown
	if st == 0 {
		st = defaultShutdownTimeout
	}
	s.LeaveCluster()
	done := make(chan bool, 1)
	go func() { done <- s.stops.Stop(s.Remote, st) }()
	t := time.NewTimer(2 * st)
	defer t.Stop()
	select {
	case clean := <-done:
		if !clean {
			s.Logger.Warn("remote stream handlers still running after the gRPC server stopped; outbound endpoints not stopped gracefully", "waited", st)
		}
	case <-t.C:
		// protoactor's own 10s waits (endpoint supervisor and activator
		// futures) still bound the goroutine.
		s.Logger.Warn("remote shutdown still blocked; returning", "timeout", 2*st)
	}
	s.Actors.Shutdown()
}
