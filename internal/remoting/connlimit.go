package remoting

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/scanplane/scanplane/internal/netlimit"
)

// RemoteLimits bound the connections the actor remote's gRPC server
// accepts. protoactor keeps one connection with one stream per pair of
// processes, so an honest peer holds one connection, never idle.
type RemoteLimits struct {
	// HandshakeTimeout bounds a new connection's TLS handshake and HTTP/2
	// preface.
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection that has had no stream for this
	// long.
	IdleTimeout time.Duration
	// MaxConns: connections open at once; one accepted beyond it is
	// closed at once (refused, reason conn_limit).
	MaxConns int
	// MaxStreams: concurrent streams per connection.
	MaxStreams uint32
	// LogBurst lines about refused connections and failed handshakes are
	// logged per LogEvery; the rest are counted and their number logged
	// at the end of the interval.
	LogBurst int
	LogEvery time.Duration
}

// DefaultRemoteLimits are the limits of every actor remote.
var DefaultRemoteLimits = RemoteLimits{HandshakeTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxConns: 4096, MaxStreams: 16,
	LogBurst: 5, LogEvery: 10 * time.Second}

// Validate names the first bad field.
func (l RemoteLimits) Validate() error {
	switch {
	case l.HandshakeTimeout <= 0:
		return fmt.Errorf("remoting: RemoteLimits.HandshakeTimeout %v must be > 0", l.HandshakeTimeout)
	case l.IdleTimeout <= 0:
		return fmt.Errorf("remoting: RemoteLimits.IdleTimeout %v must be > 0", l.IdleTimeout)
	case l.MaxConns < 1:
		return fmt.Errorf("remoting: RemoteLimits.MaxConns %d must be >= 1", l.MaxConns)
	case l.MaxStreams < 1:
		return fmt.Errorf("remoting: RemoteLimits.MaxStreams %d must be >= 1", l.MaxStreams)
	case l.LogBurst < 1:
		return fmt.Errorf("remoting: RemoteLimits.LogBurst %d must be >= 1", l.LogBurst)
	case l.LogEvery <= 0:
		return fmt.Errorf("remoting: RemoteLimits.LogEvery %v must be > 0", l.LogEvery)
	}
	return nil
}

// serverOptions are the gRPC server options of l.
func (l RemoteLimits) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ConnectionTimeout(l.HandshakeTimeout), grpc.MaxConcurrentStreams(l.MaxStreams),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: l.IdleTimeout})}
}

// errConnLimit is the handshake error of a connection over the cap.
var errConnLimit = errors.New("remote: too many connections open")

// cappedCreds are server credentials that close a connection accepted
// while slots are all taken (before its handshake); it and every failed
// handshake are counted by the Guard (reasons conn_limit and handshake)
// and logged through log.
type cappedCreds struct {
	credentials.TransportCredentials
	slots *netlimit.Slots
	guard *Guard
	log   *logThrottle
}

func (c cappedCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	peer := conn.RemoteAddr().String()
	if open, ok := c.slots.Take(); !ok {
		conn.Close()
		c.guard.count(ReasonConnLimit)
		c.log.warn("remote: connection refused: too many open", "peer", peer, "open", open)
		return nil, nil, errConnLimit
	}
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		c.slots.Release()
		c.guard.count(ReasonHandshake)
		c.log.warn("remote: TLS handshake refused", "peer", peer, "err", err)
		return nil, nil, err
	}
	return c.slots.Hold(out), info, nil
}

func (c cappedCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.TransportCredentials.ClientHandshake(ctx, authority, conn)
}

func (c cappedCreds) Clone() credentials.TransportCredentials {
	c.TransportCredentials = c.TransportCredentials.Clone()
	return c
}

// logThrottle logs refused connections and handshakes through a
// netlimit.Throttle, then one line with the number held back.
type logThrottle struct {
	log *slog.Logger
	th  *netlimit.Throttle
}

func newLogThrottle(log *slog.Logger, burst int, every time.Duration) *logThrottle {
	t := &logThrottle{log: log}
	t.th = netlimit.NewThrottle(burst, every, func(n int, every time.Duration) {
		log.Warn(fmt.Sprintf("remote: %d more refused connections and TLS handshakes not logged in the last %v", n, every))
	})
	return t
}

func (t *logThrottle) warn(msg string, args ...any) {
	if t == nil || t.log == nil {
		return
	}
	if t.th.Allow() {
		t.log.Warn(msg, args...)
	}
}
