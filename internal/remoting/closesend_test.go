package remoting

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/messages"
	"google.golang.org/grpc"
)

// peerStub is a bare gRPC server of protoactor's remote protocol that
// accepts connections and reads what arrives: a peer process without a
// second Remote in the test process (a remote's start sets grpc's global
// logger, which races with any gRPC code already running).
type peerStub struct {
	remote.UnimplementedRemotingServer
	received atomic.Int64
}

func (p *peerStub) Receive(s remote.Remoting_ReceiveServer) error {
	for {
		m, err := s.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if m.GetConnectRequest() != nil {
			if err := s.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectResponse{
				ConnectResponse: &remote.ConnectResponse{MemberId: "peer"}}}); err != nil {
				return err
			}
			continue
		}
		p.received.Add(int64(len(m.GetMessageBatch().GetEnvelopes())))
	}
}

// startPeerStub serves a peerStub on an ephemeral port until the test ends.
func startPeerStub(t *testing.T) (*peerStub, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &peerStub{}
	// Stop waits for the handlers: none reads grpc's logger when a later
	// test starts a remote.
	s := grpc.NewServer(grpc.WaitForHandlers(true))
	remote.RegisterRemotingServer(s, p)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(ln)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	return p, ln.Addr().String()
}

// TestCloseOrdersSendsBeforeTheRemoteStops: a System closes while its
// actors and goroutines send to a remote PID without pause — a scan
// server's workers streaming to a client, a tablet actor dispatching, an
// actor answering a request from a peer, watching one. protoactor's
// endpoint manager reads its state unsynchronised on each of those sends
// and the remote's stop writes it, which the race detector reports
// unless Close orders every send before the stop. A send after Close
// reaches nobody and does not block.
func TestCloseOrdersSendsBeforeTheRemoteStops(t *testing.T) {
	sys, err := StartSystem(SystemConfig{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	// After the remote's start, which sets grpc's global logger.
	peer, addr := startPeerStub(t)
	target := actor.NewPID(addr, "client")
	var closed atomic.Bool
	looped := make(chan struct{})
	// An actor that sends on each message and sends itself the next one,
	// as a tablet actor does on each answer; it watches the peer too.
	sys.Actors.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch c.Message().(type) {
		case *actor.Started:
			c.Watch(actor.NewPID(addr, "watched"))
			c.Send(c.Self(), &messages.Cancel{})
		case *messages.Cancel:
			if closed.Load() {
				close(looped)
				return
			}
			c.Send(target, &messages.Cancel{RequestId: "actor"})
			c.Request(target, &messages.StatusRequest{})
			c.Send(c.Self(), &messages.Cancel{})
		}
	}))
	var wg sync.WaitGroup
	var sent atomic.Int64
	for range 2 {
		// Plain goroutines, as a scan server's workers.
		wg.Go(func() {
			for {
				done := closed.Load()
				sys.Actors.Root.Send(target, &messages.RowBatch{RequestId: "worker"})
				sent.Add(1)
				if done {
					return
				}
			}
		})
	}
	testutil.Eventually(t, 10*time.Second, "the peer receives messages", func() bool { return peer.received.Load() > 10 })
	sys.Close()
	closed.Store(true)
	wg.Wait()
	<-looped
	if sent.Load() == 0 {
		t.Fatal("nothing sent")
	}
}
