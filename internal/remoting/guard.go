package remoting

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

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
//   - a panic in a stream handler is recovered and ends that stream only.
//
// Refusals are counted and logged at most once per second per reason,
// with the number suppressed since the last line.
//
// Concurrency: a Guard is safe for concurrent use; its interceptors run on
// gRPC's handler goroutines.
type Guard struct {
	log     *slog.Logger
	refused atomic.Uint64
	panics  atomic.Uint64

	mu     sync.Mutex
	logged map[string]*logGate // by reason
	now    func() time.Time
}

type logGate struct {
	last       time.Time
	suppressed int
}

// guardLogEvery is the shortest interval between two log lines of one
// refusal reason.
const guardLogEvery = time.Second

// NewGuard returns a Guard that logs on log (nil: discard).
func NewGuard(log *slog.Logger) *Guard {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Guard{log: log, logged: map[string]*logGate{}, now: time.Now}
}

// Refused is the number of calls and message batches refused so far.
func (g *Guard) Refused() uint64 { return g.refused.Load() }

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
	g.refuse(ctx, "unserved method", "method", info.FullMethod)
	return nil, status.Errorf(codes.Unimplemented, "%s is not served", info.FullMethod)
}

func (g *Guard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	if info.FullMethod != ReceiveMethod {
		g.refuse(ss.Context(), "unserved method", "method", info.FullMethod)
		return status.Errorf(codes.Unimplemented, "%s is not served", info.FullMethod)
	}
	defer func() {
		if r := recover(); r != nil {
			g.panics.Add(1)
			g.log.Error("remote: stream handler panicked; stream closed", "peer", peerAddr(ss.Context()),
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = status.Error(codes.Internal, "internal error")
		}
	}()
	return h(srv, &guardedStream{ServerStream: ss, g: g})
}

// guardedStream drops the inbound messages the Guard refuses.
type guardedStream struct {
	grpc.ServerStream
	g *Guard
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
		batch := rm.GetMessageBatch()
		if batch == nil {
			return nil
		}
		if err := CheckBatch(batch); err != nil {
			s.g.refuse(s.Context(), "malformed message batch", "err", err)
			continue
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
func (g *Guard) refuse(ctx context.Context, reason string, args ...any) {
	g.refused.Add(1)
	g.mu.Lock()
	gate := g.logged[reason]
	if gate == nil {
		gate = &logGate{}
		g.logged[reason] = gate
	}
	now := g.now()
	if !gate.last.IsZero() && now.Sub(gate.last) < guardLogEvery {
		gate.suppressed++
		g.mu.Unlock()
		return
	}
	suppressed := gate.suppressed
	gate.last, gate.suppressed = now, 0
	g.mu.Unlock()
	g.log.Warn("remote: refused "+reason, append([]any{"peer", peerAddr(ctx), "suppressed", suppressed}, args...)...)
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return "unknown"
}
