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
// processes, so an honest peer holds one connection, never idle, and a
// host of honest processes a few.
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
	// MaxConnsPerSource: connections open at once from one source (IP
	// address); one beyond it is closed at once (refused, reason
	// source_limit), so one source cannot take the slots of others.
	MaxConnsPerSource int
	// PeerSlots of MaxConns are kept for cluster peers: a connection
	// accepted while MaxConns-PeerSlots are open keeps its slot only if
	// its certificate is a coordinator's or a scan server's (on a
	// plain-text remote, where no peer shows a certificate, every
	// connection may take them).
	PeerSlots int
	// MaxStreams: concurrent streams per connection.
	MaxStreams uint32
	// MaxMessage: the largest gRPC message accepted, in bytes. A scan
	// server receives requests, acknowledgements and reports; a system
	// that scans receives row batches (ClientMaxMessage).
	MaxMessage int
	// LogBurst lines about refused connections and failed handshakes are
	// logged per LogEvery; the rest are counted and their number logged
	// at the end of the interval.
	LogBurst int
	LogEvery time.Duration
}

// DefaultRemoteLimits are the limits of every actor remote.
var DefaultRemoteLimits = RemoteLimits{HandshakeTimeout: 3 * time.Second, IdleTimeout: time.Minute, MaxConns: 4096,
	MaxConnsPerSource: 256, PeerSlots: 256, MaxStreams: 16, MaxMessage: ServerMaxMessage, LogBurst: 5, LogEvery: 10 * time.Second}

// ServerMaxMessage is DefaultRemoteLimits.MaxMessage, twice gRPC's
// default: what a scan server receives (requests, acknowledgements,
// cancels) comes nowhere near it, and a peer cannot make it hold more
// for one message.
const ServerMaxMessage = 8 << 20

// Validate names the first bad field.
func (l RemoteLimits) Validate() error {
	switch {
	case l.HandshakeTimeout <= 0:
		return fmt.Errorf("remoting: RemoteLimits.HandshakeTimeout %v must be > 0", l.HandshakeTimeout)
	case l.IdleTimeout <= 0:
		return fmt.Errorf("remoting: RemoteLimits.IdleTimeout %v must be > 0", l.IdleTimeout)
	case l.MaxConns < 1:
		return fmt.Errorf("remoting: RemoteLimits.MaxConns %d must be >= 1", l.MaxConns)
	case l.MaxConnsPerSource < 1:
		return fmt.Errorf("remoting: RemoteLimits.MaxConnsPerSource %d must be >= 1", l.MaxConnsPerSource)
	case l.PeerSlots < 0 || l.PeerSlots >= l.MaxConns:
		return fmt.Errorf("remoting: RemoteLimits.PeerSlots %d must be in [0, MaxConns %d)", l.PeerSlots, l.MaxConns)
	case l.MaxStreams < 1:
		return fmt.Errorf("remoting: RemoteLimits.MaxStreams %d must be >= 1", l.MaxStreams)
	case l.MaxMessage < 1<<20:
		return fmt.Errorf("remoting: RemoteLimits.MaxMessage %d must be >= 1 MiB", l.MaxMessage)
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
// while its source has sources' maximum open, or while every slot is
// taken (before its handshake), or that took one of the peer slots and is
// not a cluster peer (after its handshake); it and every failed handshake
// are counted by the Guard (reasons source_limit, conn_limit and
// handshake) and logged through log.
type cappedCreds struct {
	credentials.TransportCredentials
	slots     *netlimit.Slots // for anyone: MaxConns - PeerSlots
	peerSlots *netlimit.Slots // for cluster peers: PeerSlots (nil for none)
	sources   *netlimit.Sources
	guard     *Guard
	log       *logThrottle
}

func newCappedCreds(creds credentials.TransportCredentials, lim RemoteLimits, guard *Guard, log *logThrottle) cappedCreds {
	c := cappedCreds{TransportCredentials: creds, slots: netlimit.NewSlots(lim.MaxConns - lim.PeerSlots),
		sources: netlimit.NewSources(lim.MaxConnsPerSource), guard: guard, log: log}
	if lim.PeerSlots > 0 {
		c.peerSlots = netlimit.NewSlots(lim.PeerSlots)
	}
	return c
}

// errSourceLimit is the handshake error of a connection over its
// source's cap.
var errSourceLimit = errors.New("remote: too many connections open from this source")

func (c cappedCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	peer := conn.RemoteAddr().String()
	src := netlimit.SourceOf(conn.RemoteAddr())
	// Each refusal is counted before the connection closes, so a peer
	// that sees the close finds it counted.
	if open, ok := c.sources.Take(src); !ok {
		c.guard.count(ReasonSourceLimit)
		conn.Close()
		c.log.warn("remote: connection refused: too many open from its source", "peer", peer, "open", open)
		return nil, nil, errSourceLimit
	}
	slots := c.slots
	open, ok := slots.Take()
	if !ok && c.peerSlots != nil {
		slots = c.peerSlots
		_, ok = slots.Take()
	}
	if !ok {
		c.sources.Release(src)
		c.guard.count(ReasonConnLimit)
		conn.Close()
		c.log.warn("remote: connection refused: too many open", "peer", peer, "open", open)
		return nil, nil, errConnLimit
	}
	release := func() { slots.Release(); c.sources.Release(src) }
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		release()
		c.guard.count(ReasonHandshake)
		c.log.warn("remote: TLS handshake refused", "peer", peer, "err", err)
		return nil, nil, err
	}
	if slots != c.slots && !clusterPeer(info) {
		c.guard.count(ReasonConnLimit)
		release()
		out.Close()
		c.log.warn("remote: connection refused: only cluster peers may take the last slots", "peer", peer)
		return nil, nil, errConnLimit
	}
	return netlimit.OnClose(out, release), info, nil
}

// clusterPeer reports whether a handshake's peer is a coordinator or a
// scan server by its certificate, or shows none (a plain-text remote,
// where every peer may be either).
func clusterPeer(info credentials.AuthInfo) bool {
	ti, ok := info.(credentials.TLSInfo)
	if !ok {
		return true
	}
	if len(ti.State.PeerCertificates) == 0 {
		return false
	}
	id, err := IdentityOf(ti.State.PeerCertificates[0])
	return err == nil && id.Role&(RoleCoordinator|RoleScanServer) != 0
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
