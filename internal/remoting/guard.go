package remoting

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// ReceiveMethod is the one gRPC method of protoactor's Remoting service
// that scanplane serves: the bidirectional stream that carries every
// actor message between two processes.
const ReceiveMethod = "/remote.Remoting/Receive"

// Guard is the gate in front of an actor system's gRPC server. Every
// message from the network passes through it before protoactor reads it:
//
//   - unary methods (protoactor's ListProcesses and GetProcessDiagnostics,
//     which panic when called) and every stream method but ReceiveMethod
//     answer codes.Unimplemented without reaching their handler;
//   - a message batch whose indices point outside its own tables (target,
//     sender, type name) is dropped before protoactor indexes them;
//   - each envelope of a batch is checked against the role table (rules,
//     roles.go) and dropped alone when refused: its type must be listed
//     for the peer's role, its target must be an actor of this system
//     (protoactor would relay any other target under this process's
//     identity) other than the event stream, and, from a peer with a
//     certificate, every address it names for itself must be the one its
//     stream is bound to (see authorize);
//   - a panic in a stream handler is recovered and ends that stream only.
//
// The peer's identity is read once per stream from its verified
// certificate (IdentityOf); a stream from a certificate that names no
// role, or whose ConnectRequest claims an address its certificate does not
// name, is ended. On a plain-text remote the peer holds every role and
// nothing is bound to an address: only the structure, the message types
// and the targets are checked.
//
// Refusals are counted by reason (RefusedBy) and logged at most once per
// second per reason, with the number suppressed since the last line.
//
// Concurrency: a Guard is safe for concurrent use; its interceptors run on
// gRPC's handler goroutines.
type Guard struct {
	log     *slog.Logger
	sys     *actor.ActorSystem
	rules   map[string]*compiledRule
	refused [numReasons]atomic.Uint64
	panics  atomic.Uint64

	mu     sync.Mutex
	logged [numReasons]logGate
	now    func() time.Time
}

type logGate struct {
	last       time.Time
	suppressed int
}

// guardLogEvery is the shortest interval between two log lines of one
// refusal reason.
const guardLogEvery = time.Second

// NewGuard returns a Guard for the remote of sys that logs on log (nil:
// discard). sys's address (set when its remote starts) is the only target
// address the Guard lets through; with a nil sys target addresses are not
// checked (unit tests of the Guard alone).
func NewGuard(log *slog.Logger, sys *actor.ActorSystem) *Guard {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	compiled, errs := compileRules(rules)
	for _, err := range errs {
		log.Error("remote: role table entry refused; its message type is refused from every peer", "err", err)
	}
	return &Guard{log: log, sys: sys, rules: compiled, now: time.Now}
}

// Refused is the number of calls, message batches and envelopes refused
// so far, all reasons.
func (g *Guard) Refused() uint64 {
	var n uint64
	for i := range g.refused {
		n += g.refused[i].Load()
	}
	return n
}

// RefusedBy is the number of refusals of reason r so far.
func (g *Guard) RefusedBy(r Reason) uint64 { return g.refused[r].Load() }

// Panics is the number of stream handler panics recovered so far.
func (g *Guard) Panics() uint64 { return g.panics.Load() }

// ServerOptions are the gRPC server options that install g; pass them
// with TransportOptions.
func (g *Guard) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(g.unary),
		grpc.ChainStreamInterceptor(g.stream),
	}
}

func (g *Guard) unary(ctx context.Context, _ any, info *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
	g.refuse(peerAddr(ctx), ReasonUnserved, "method", info.FullMethod)
	return nil, status.Errorf(codes.Unimplemented, "%s is not served", info.FullMethod)
}

func (g *Guard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	if info.FullMethod != ReceiveMethod {
		g.refuse(peerAddr(ss.Context()), ReasonUnserved, "method", info.FullMethod)
		return status.Errorf(codes.Unimplemented, "%s is not served", info.FullMethod)
	}
	id, err := peerIdentity(ss.Context())
	if err != nil {
		g.refuse(peerAddr(ss.Context()), ReasonNoRole, "err", err)
		return status.Error(codes.PermissionDenied, err.Error())
	}
	defer func() {
		if r := recover(); r != nil {
			g.panics.Add(1)
			g.log.Error("remote: stream handler panicked; stream closed", "peer", peerAddr(ss.Context()),
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = status.Error(codes.Internal, "internal error")
		}
	}()
	return h(srv, &guardedStream{ServerStream: ss, g: g, id: id})
}

// guardedStream drops the inbound messages the Guard refuses.
type guardedStream struct {
	grpc.ServerStream
	g  *Guard
	id Identity
	// bound is the address of the peer's ConnectRequest ("" until one
	// came): the address every PID the peer names for itself must have.
	bound string
}

func (s *guardedStream) RecvMsg(m any) error {
	for {
		if err := s.ServerStream.RecvMsg(m); err != nil {
			return err
		}
		rm, ok := m.(*remote.RemoteMessage)
		if !ok {
			return nil
		}
		if c := rm.GetConnectRequest(); c != nil {
			pass, err := s.bind(c)
			if err != nil {
				return err
			}
			if !pass {
				continue
			}
			return nil
		}
		batch := rm.GetMessageBatch()
		if batch == nil {
			return nil
		}
		if err := CheckBatch(batch); err != nil {
			s.g.refuse(peerAddr(s.Context()), ReasonMalformed, "err", err)
			continue
		}
		if !s.g.filter(s, batch) {
			continue // every envelope refused
		}
		return nil
	}
}

// CheckBatch returns an error if an envelope of b refers outside b's own
// tables: protoactor's reader indexes them without checking.
func CheckBatch(b *remote.MessageBatch) error {
	for i, e := range b.Envelopes {
		switch {
		case e == nil:
			return fmt.Errorf("envelope %d is empty", i)
		case e.Target < 0 || int(e.Target) >= len(b.Targets) || b.Targets[e.Target] == nil:
			return fmt.Errorf("envelope %d: target %d of %d", i, e.Target, len(b.Targets))
		case e.Sender < 0 || int(e.Sender) > len(b.Senders) || (e.Sender > 0 && b.Senders[e.Sender-1] == nil):
			return fmt.Errorf("envelope %d: sender %d of %d", i, e.Sender, len(b.Senders))
		case e.TypeId < 0 || int(e.TypeId) >= len(b.TypeNames):
			return fmt.Errorf("envelope %d: type %d of %d", i, e.TypeId, len(b.TypeNames))
		}
	}
	return nil
}

// refuse counts a refusal and logs it unless one of the same reason was
// logged less than guardLogEvery ago.
func (g *Guard) refuse(peer string, r Reason, args ...any) {
	g.refused[r].Add(1)
	g.mu.Lock()
	gate := &g.logged[r]
	now := g.now()
	if !gate.last.IsZero() && now.Sub(gate.last) < guardLogEvery {
		gate.suppressed++
		g.mu.Unlock()
		return
	}
	suppressed := gate.suppressed
	gate.last, gate.suppressed = now, 0
	g.mu.Unlock()
	g.log.Warn("remote: refused "+r.String(), append([]any{"peer", peer, "suppressed", suppressed}, args...)...)
}

// count counts a refusal without logging it (the caller logs).
func (g *Guard) count(r Reason) {
	if g != nil {
		g.refused[r].Add(1)
	}
}

// Refuse counts and logs (rate-limited, as the Guard's own refusals) a
// message from peer (an actor address) that an actor refused after the
// Guard let it through, with reason r and args naming the bad value. A
// nil Guard does nothing.
func (g *Guard) Refuse(peer string, r Reason, args ...any) {
	if g == nil {
		return
	}
	g.refuse(peer, r, args...)
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return "unknown"
}
