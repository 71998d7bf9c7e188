package scanserver

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/messages"
)

// TestQueueWaitIsBounded: a queued StartScan whose busy timeout is 0
// ("wait for ever") or beyond MaxQueueWait is answered Busy after
// MaxQueueWait while the only worker is held.
func TestQueueWaitIsBounded(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	t.Cleanup(sys.Shutdown)
	life, end := context.WithCancel(context.Background())
	t.Cleanup(end)
	fetch := heldFetcher{started: make(chan context.Context, 4)}
	cfg := DefaultScanServerConfig()
	cfg.Workers, cfg.MaxQueue, cfg.MaxQueueWait = 1, 4, 100*time.Millisecond
	a := NewScanServerActor(cfg, ServerDeps{ID: "s/0", Host: "h1", Fetcher: fetch, System: sys, Life: life, Logger: quiet})
	pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return a }))
	busy := make(chan *messages.Busy, 4)
	tablet := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if b, ok := c.Message().(*messages.Busy); ok {
			busy <- b
		}
	}))
	start := func(id string, bt time.Duration) {
		sys.Root.Send(pid, &messages.StartScan{RequestId: id, Attempt: 1, Client: &messages.Pid{Address: sys.Address(), Id: "c"},
			TabletActor: &messages.Pid{Address: tablet.Address, Id: tablet.Id}, Tablet: &messages.TabletRef{Table: "t", Generation: 1},
			Files: []*messages.FileRef{{Id: "f", Blocks: 1}}, Range: &messages.KeyRange{}, BusyTimeoutUs: bt.Microseconds()})
	}
	start("held", 0)
	select {
	case <-fetch.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the first scan did not start")
	}
	t0 := time.Now()
	start("forever", 0)
	start("long", time.Hour)
	got := map[string]bool{}
	for len(got) < 2 {
		select {
		case b := <-busy:
			got[b.GetRequestId()] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("queued scans answered Busy: %v; want forever and long within MaxQueueWait", got)
		}
	}
	if d := time.Since(t0); d < cfg.MaxQueueWait {
		t.Errorf("Busy after %v, before MaxQueueWait %v", d, cfg.MaxQueueWait)
	}
}
