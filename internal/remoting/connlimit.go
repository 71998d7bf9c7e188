package remoting

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
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
// while max are open (before its handshake); it and every failed
// handshake are counted by the Guard (reasons conn_limit and handshake)
// and logged through log.
type cappedCreds struct {
	credentials.TransportCredentials
	max   int64
	open  *atomic.Int64
	guard *Guard
	log   *logThrottle
}

func (c cappedCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	peer := conn.RemoteAddr().String()
	if n := c.open.Add(1); n > c.max {
		c.open.Add(-1)
		conn.Close()
		c.guard.count(ReasonConnLimit)
		c.log.warn("remote: connection refused: too many open", "peer", peer, "open", n-1)
		return nil, nil, errConnLimit
	}
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		c.open.Add(-1)
		c.guard.count(ReasonHandshake)
		c.log.warn("remote: TLS handshake refused", "peer", peer, "err", err)
		return nil, nil, err
	}
	return &countedConn{Conn: out, open: c.open}, info, nil
}

func (c cappedCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.TransportCredentials.ClientHandshake(ctx, authority, conn)
}

func (c cappedCreds) Clone() credentials.TransportCredentials {
	c.TransportCredentials = c.TransportCredentials.Clone()
	return c
}

// countedConn gives its slot back at its first Close.
type countedConn struct {
	net.Conn
	open *atomic.Int64
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}

// logThrottle logs burst lines per interval and counts the rest; at the
// end of an interval with lines held back it logs their number.
type logThrottle struct {
	log   *slog.Logger
	every time.Duration
	burst int

	mu     sync.Mutex
	until  time.Time // end of the current interval
	passed int       // lines logged in it
	held   int       // lines held back since the last report
	timer  *time.Timer
}

func (t *logThrottle) warn(msg string, args ...any) {
	if t == nil || t.log == nil {
		return
	}
	now := time.Now()
	t.mu.Lock()
	if !now.Before(t.until) {
		t.until, t.passed = now.Add(t.every), 0
	}
	if t.passed < t.burst {
		t.passed++
		t.mu.Unlock()
		t.log.Warn(msg, args...)
		return
	}
	t.held++
	if t.timer == nil {
		t.timer = time.AfterFunc(t.until.Sub(now), t.report)
	}
	t.mu.Unlock()
}

func (t *logThrottle) report() {
	t.mu.Lock()
	n := t.held
	t.held, t.timer = 0, nil
	t.mu.Unlock()
	if n > 0 {
		t.log.Warn(fmt.Sprintf("remote: %d more refused connections and TLS handshakes not logged in the last %v", n, t.every))
	}
}
