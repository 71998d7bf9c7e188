package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc/credentials"

	"github.com/scanplane/scanplane/internal/remoting"
)

// A protoactor remote rewrites gRPC's process-wide logger when it starts
// (remote.Start), unsynchronised, while the gRPC code of any remote
// already running reads it. So clients of one process that start their
// own actor system share one: the first of a given Listen, Advertise and
// TLS starts it, the last to close stops it. A remote whose stop
// outlasted its last client's Close still reads the logger until it is
// stopped, so no remote starts until every such stop has ended. This is
// the only state the package keeps per process; it exists because the
// library's is.
var processRemotes = struct {
	mu sync.Mutex
	m  map[remoteKey]*processRemote
	// stopping: the stops that outlasted their release, each closed when
	// it ends.
	stopping []chan struct{}
}{m: map[remoteKey]*processRemote{}}

// remoteKey says which clients may share a remote: those that listen,
// advertise and authenticate alike.
type remoteKey struct {
	listen, advertise string
	tls               *tls.Config
}

// processRemote is an actor system with its remote, shared by refs
// clients.
type processRemote struct {
	sys   *actor.ActorSystem
	rem   *remote.Remote
	stops *remoting.Tracker
	refs  int
}

// acquireRemote returns the actor system the client's Listen, Advertise
// and TLS share, starting it if no running client has; a start first
// waits, within ctx, for the stops of earlier remotes that still run.
func acquireRemote(ctx context.Context, cfg Config, log *slog.Logger) (*processRemote, error) {
	key := remoteKey{listen: cfg.Listen, advertise: cfg.Advertise, tls: cfg.TLS}
	processRemotes.mu.Lock()
	defer processRemotes.mu.Unlock()
	for {
		if pr := processRemotes.m[key]; pr != nil {
			pr.refs++
			return pr, nil
		}
		processRemotes.stopping = slices.DeleteFunc(processRemotes.stopping, isClosed)
		if len(processRemotes.stopping) == 0 {
			break
		}
		// Wait without the lock: Close of other clients goes on meanwhile.
		stop := processRemotes.stopping[0]
		processRemotes.mu.Unlock()
		select {
		case <-stop:
		case <-ctx.Done():
			processRemotes.mu.Lock()
			return nil, fmt.Errorf("client: start: waiting for an earlier actor remote of this process to stop: %w", ctx.Err())
		}
		processRemotes.mu.Lock()
	}
	pr, err := startProcessRemote(cfg, log)
	if err != nil {
		return nil, err
	}
	pr.refs = 1
	processRemotes.m[key] = pr
	return pr, nil
}

// release drops a client's share; the last one stops the remote, waits
// for the stop at most wait (a stop that takes longer goes on in the
// background, and the next remote's start waits for it), and shuts the
// system down.
func (pr *processRemote) release(cfg Config, wait time.Duration, log *slog.Logger) {
	key := remoteKey{listen: cfg.Listen, advertise: cfg.Advertise, tls: cfg.TLS}
	processRemotes.mu.Lock()
	defer processRemotes.mu.Unlock()
	pr.refs--
	if pr.refs > 0 {
		return
	}
	delete(processRemotes.m, key)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Inbound streams stop at once; the outbound endpoints stop once
		// no stream handler runs (internal/remoting), which it waits for
		// closeWait whatever the caller's wait.
		pr.stops.Stop(pr.rem, closeWait)
	}()
	select {
	case <-done:
	case <-time.After(wait):
		log.Debug("actor remote still stopping; not waiting for it", "waited", wait)
		processRemotes.stopping = append(processRemotes.stopping, done)
	}
	pr.sys.Shutdown()
}

// isClosed reports whether ch is closed.
func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func startProcessRemote(cfg Config, log *slog.Logger) (*processRemote, error) {
	host, portS, _ := net.SplitHostPort(cfg.Listen)
	port, err := strconv.Atoi(portS)
	if err != nil {
		return nil, fmt.Errorf("client: Listen port %q: %v", portS, err)
	}
	quiet := slog.New(slog.DiscardHandler)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }), actor.WithDeadLetterThrottleCount(0))
	opts := []remote.ConfigOption{remoting.WriterQueueOption()}
	if cfg.Advertise != "" {
		opts = append(opts, remote.WithAdvertisedHost(cfg.Advertise))
	}
	stops := remoting.NewTracker()
	stops.GateSends(sys)
	var creds credentials.TransportCredentials
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
	}
	opts = append(opts, remoting.TransportOptions(creds, remoting.NewGuard(log, sys), stops.ServerOption())...)
	rc := remote.Configure(host, port, opts...)
	// A connection that fails is reported (EndpointTerminatedEvent) after
	// one try and its 2s back-off instead of five: a dead coordinator is
	// noticed sooner and shutdown never waits on a long retry loop.
	rc.MaxRetryCount = 1
	rem := remote.NewRemote(sys, rc)
	if err := remoting.StartRemote(rem); err != nil {
		sys.Shutdown()
		return nil, fmt.Errorf("client: listen on %s: %v", cfg.Listen, err)
	}
	return &processRemote{sys: sys, rem: rem, stops: stops}, nil
}
