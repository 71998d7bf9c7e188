package scanserver

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/internal/remoting"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/messages"
)

// heldFetcher blocks every fetch until its context ends, and hands the
// context of each fetch to started.
type heldFetcher struct{ started chan context.Context }

func (f heldFetcher) FetchBlock(ctx context.Context, _ string) ([]byte, bool, error) {
	f.started <- ctx
	<-ctx.Done()
	return nil, false, ctx.Err()
}

// TestAttemptPeerCheck: a Cancel or BatchAck the Guard marks as coming
// from a peer that is neither the attempt's client nor (for a Cancel)
// its tablet actor is refused and counted, and the scan runs on; one from
// the client or the tablet actor, or a local one, cancels it.
func TestAttemptPeerCheck(t *testing.T) {
	const client, tablet, attacker = "10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"
	quiet := slog.New(slog.DiscardHandler)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	t.Cleanup(sys.Shutdown)
	life, end := context.WithCancel(context.Background())
	t.Cleanup(end)
	fetch := heldFetcher{started: make(chan context.Context, 4)}
	a := NewScanServerActor(DefaultScanServerConfig(), ServerDeps{ID: "s/0", Host: "h1", Fetcher: fetch, System: sys, Life: life, Logger: quiet})
	a.guard = remoting.NewGuard(nil, nil)
	pid, err := sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return a }), "scanserver-0")
	if err != nil {
		t.Fatal(err)
	}
	start := func(id string) context.Context {
		t.Helper()
		sys.Root.Send(pid, &messages.StartScan{RequestId: id, Attempt: 1, Client: &messages.Pid{Address: client, Id: "c"},
			TabletActor: &messages.Pid{Address: tablet, Id: "t"}, Tablet: &messages.TabletRef{Table: "t", Generation: 1},
			Files: []*messages.FileRef{{Id: "f", Blocks: 1}}, Range: &messages.KeyRange{}, BusyTimeoutUs: time.Minute.Microseconds()})
		select {
		case ctx := <-fetch.started:
			return ctx
		case <-time.After(30 * time.Second):
			t.Fatalf("scan %s did not start", id)
			return nil
		}
	}
	from := func(peer string, m any) {
		env := &actor.MessageEnvelope{Message: m}
		if peer != "" {
			env.SetHeader(remoting.PeerAddressHeader, peer)
		}
		sys.Root.Send(pid, env)
	}
	waitRefused := func(n uint64) {
		t.Helper()
		if !testutil.Poll(30*time.Second, func() bool { return a.guard.RefusedBy(remoting.ReasonAttempt) >= n }) {
			t.Fatalf("refused %d, want %d", a.guard.RefusedBy(remoting.ReasonAttempt), n)
		}
	}
	waitCancelled := func(ctx context.Context, who string) {
		t.Helper()
		select {
		case <-ctx.Done():
		case <-time.After(30 * time.Second):
			t.Fatalf("a Cancel from %s did not cancel the scan", who)
		}
	}

	ctx := start("r1")
	from(attacker, &messages.Cancel{RequestId: "r1", Attempt: 1, Reason: "x"})
	from(attacker, &messages.BatchAck{RequestId: "r1", Attempt: 1, Seq: 1})
	from(tablet, &messages.BatchAck{RequestId: "r1", Attempt: 1, Seq: 1}) // a tablet actor does not ack
	waitRefused(3)
	if ctx.Err() != nil {
		t.Fatal("an attacker's Cancel cancelled the scan")
	}
	from(client, &messages.Cancel{RequestId: "r1", Attempt: 1, Reason: "client"})
	waitCancelled(ctx, "the client")

	ctx = start("r2")
	from(tablet, &messages.Cancel{RequestId: "r2", Attempt: 1, Reason: "tablet actor"})
	waitCancelled(ctx, "the tablet actor")

	ctx = start("r3")
	from("", &messages.Cancel{RequestId: "r3", Attempt: 1, Reason: "local"})
	waitCancelled(ctx, "a local sender")
	if n := a.guard.RefusedBy(remoting.ReasonAttempt); n != 3 {
		t.Fatalf("refused %d, want 3", n)
	}
}
