package e2e

import (
	"context"
	"crypto/tls"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/internal/remoting"
	"github.com/scanplane/scanplane/messages"
)

// tappedSystem starts the test process's actor system (one remote per
// process) for honest clients: mutual TLS with cfg, behind the Guard
// every client runs, and with a tap on what it sends, which stands for a
// leak of request ids to an attacker. It stops when t ends.
func tappedSystem(t *testing.T, cfg *tls.Config) (*actor.ActorSystem, *tap) {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }), actor.WithDeadLetterThrottleCount(0))
	tp := &tap{}
	creds := credentials.NewTLS(cfg)
	tr := remoting.NewTracker()
	opts := append([]remote.ConfigOption{remoting.WriterQueueOption()}, remoting.TransportOptions(creds, remoting.NewGuard(nil, sys), tr.ServerOption())...)
	opts = append(opts, remote.WithDialOptions(grpc.WithTransportCredentials(creds), grpc.WithChainStreamInterceptor(tp.intercept)))
	rc := remote.Configure("127.0.0.1", 0, opts...)
	rc.MaxRetryCount = 1
	rem := remote.NewRemote(sys, rc)
	rem.Start()
	t.Cleanup(func() {
		tr.Stop(rem, 10*time.Second)
		sys.Shutdown()
	})
	return sys, tp
}

// tap records the ScanRequests and BatchAcks a system sends.
type tap struct {
	mu   sync.Mutex
	reqs []tapped
	acks []tapped
}

type tapped struct {
	target *actor.PID
	msg    proto.Message
}

func (tp *tap) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return tapStream{ClientStream: s, tp: tp}, nil
}

type tapStream struct {
	grpc.ClientStream
	tp *tap
}

func (s tapStream) SendMsg(m any) error {
	if b := m.(*remote.RemoteMessage).GetMessageBatch(); b != nil {
		for _, e := range b.Envelopes {
			var msg proto.Message
			switch b.TypeNames[e.TypeId] {
			case "scanplane.internal.v1.ScanRequest":
				msg = &messages.ScanRequest{}
			case "scanplane.internal.v1.BatchAck":
				msg = &messages.BatchAck{}
			default:
				continue
			}
			if proto.Unmarshal(e.MessageData, msg) != nil {
				continue
			}
			s.tp.mu.Lock()
			if _, ok := msg.(*messages.ScanRequest); ok {
				s.tp.reqs = append(s.tp.reqs, tapped{b.Targets[e.Target], msg})
			} else {
				s.tp.acks = append(s.tp.acks, tapped{b.Targets[e.Target], msg})
			}
			s.tp.mu.Unlock()
		}
	}
	return s.ClientStream.SendMsg(m)
}

// lastRequest is the last ScanRequest sent that match accepts.
func (tp *tap) lastRequest(match func(*messages.ScanRequest) bool) (tapped, bool) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	for i := len(tp.reqs) - 1; i >= 0; i-- {
		if match(tp.reqs[i].msg.(*messages.ScanRequest)) {
			return tp.reqs[i], true
		}
	}
	return tapped{}, false
}

// ackOf is the first BatchAck sent for request id.
func (tp *tap) ackOf(id string) (tapped, bool) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	for _, a := range tp.acks {
		if a.msg.(*messages.BatchAck).GetRequestId() == id {
			return a, true
		}
	}
	return tapped{}, false
}
