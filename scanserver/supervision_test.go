package scanserver

import (
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/scanplane/scanplane/internal/actorenv"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
)

// TestScanServerRestartsAfterPanic: a scan-server actor that panics is
// replaced by a fresh incarnation at the same PID, which answers as
// before; each incarnation is made by the props' constructor.
func TestScanServerRestartsAfterPanic(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	defer sys.Shutdown()
	store, err := tablets.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	made := 0
	newActor := func() *ScanServerActor {
		made++
		return NewScanServerActor(DefaultScanServerConfig(), ServerDeps{ID: "h1/0", Host: "h1", Fetcher: tablets.StoreFetcher{Store: store},
			System: sys, Logger: quiet})
	}
	env := actorenv.Env{Middleware: []actor.ReceiverMiddleware{actorenv.Panicking}}
	pid, err := sys.Root.SpawnNamed(ServerProps(newActor, quiet, env.Props()...), "srv")
	if err != nil {
		t.Fatal(err)
	}
	replies := make(chan *messages.ProbeReply, 4)
	inbox := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if r, ok := c.Message().(*messages.ProbeReply); ok {
			replies <- r
		}
	}))
	probe := func(id uint64) {
		t.Helper()
		sys.Root.Send(pid, &messages.Probe{Id: id, ReplyTo: wire.FromPID(inbox), Server: "h1/0"})
		select {
		case r := <-replies:
			if r.GetId() != id {
				t.Fatalf("probe %d answered %d", id, r.GetId())
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("probe %d: no answer", id)
		}
	}
	probe(1)
	sys.Root.Send(pid, &actorenv.Panic{Why: "test: scan server panic"})
	probe(2)
	if made != 2 {
		t.Fatalf("%d incarnations made, want 2 (the first and one after the panic)", made)
	}
}
