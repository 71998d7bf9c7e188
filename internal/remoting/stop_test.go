package remoting

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/scanplane/scanplane/internal/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestStopWithOpenInboundStream stops a remote while a peer streams
// messages to it. Under -race protoactor's graceful shutdown, which this
// replaces, reports a data race here; Stop must not, and must leave no
// stream handler running. The peer is a bare gRPC stream of the remote's
// own protocol, not a second Remote: starting two remotes in one process
// races on grpc's global logger (a protoactor-go issue of its own).
func TestStopWithOpenInboundStream(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	defer sys.Shutdown()
	tr := NewTracker()
	rem := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0, remote.WithServerOptions(tr.ServerOption())))
	rem.Start()

	conn, err := grpc.Dial(sys.Address(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := remote.NewRemotingClient(conn).Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	batch := &remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: &remote.MessageBatch{}}}
	testutil.Eventually(t, 10*time.Second, "the tracker to see a running stream handler while a peer streams to the remote", func() bool {
		if err := stream.Send(batch); err != nil {
			t.Fatal(err)
		}
		return tr.Running() > 0
	})
	// keep sending while stopping, so the reader is busy reading
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for stream.Send(batch) == nil {
		}
	}()
	if !tr.Stop(rem, 10*time.Second) {
		t.Fatal("Stop: stream handlers still running after the gRPC server stopped")
	}
	<-sent // the peer's sends fail once the server is gone
	if n := tr.Running(); n != 0 {
		t.Fatalf("%d stream handlers running after Stop", n)
	}
}

func TestTrackerCounts(t *testing.T) {
	tr := NewTracker()
	if !tr.wait(time.Second) {
		t.Fatal("a new tracker is not idle")
	}
	tr.enter()
	tr.enter()
	if tr.wait(time.Millisecond) {
		t.Fatal("idle with two handlers running")
	}
	tr.leave()
	if tr.Running() != 1 {
		t.Fatalf("running %d, want 1", tr.Running())
	}
	tr.leave()
	if !tr.wait(time.Second) {
		t.Fatal("not idle after every handler left")
	}
	tr.enter()
	if tr.wait(time.Millisecond) {
		t.Fatal("idle again after a new handler entered")
	}
	tr.leave()
}
