package scanserver

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/scanplane/scanplane/internal/freeport"
	"github.com/scanplane/scanplane/internal/natsserver"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/wire"
)

// TestHostAgentCloseWhileServersSend: a host agent closes while its scan
// servers send to remote PIDs — batches and their ends to a client,
// ScanStarted and Busy to a tablet actor — because scans kept arriving
// up to Close and its workers still stream them. protoactor's endpoint
// manager reads its state unsynchronised on each of those sends and the
// remote's stop writes it, which the race detector reports unless Close
// orders every send of the servers and their workers before the stop.
func TestHostAgentCloseWhileServersSend(t *testing.T) {
	ctx := context.Background()
	sc := natsserver.DefaultServerConfig()
	sc.Port, sc.StoreDir = -1, t.TempDir()
	srv, err := natsserver.StartServer(sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	conn := clustertest.Connect(t, ctx, srv.ClientURL(), nil)
	store, table, _ := dirTable(t, 2000, 2)

	cfg := DefaultHostAgentConfig()
	cfg.Host, cfg.Servers, cfg.HeartbeatInterval = "h1", 2, 50*time.Millisecond
	cfg.Cache.MaxBytes = 8 << 20
	cfg.Server.Workers, cfg.Server.MaxQueue, cfg.Server.BatchRows = 2, 4, 50
	h, err := NewHostAgent(cfg, conn, store)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// The client and the tablet actor live in another process, which is
	// not there: what is sent to them goes through the remote all the
	// same.
	peer, err := freeport.Pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	client, tablet := actor.NewPID(peer, "client"), actor.NewPID(peer, "tablet")
	root := h.sys.Actors.Root
	var closed atomic.Bool
	var wg sync.WaitGroup
	t.Cleanup(func() {
		closed.Store(true)
		wg.Wait()
		h.Close()
	})
	for i, pid := range h.pids {
		wg.Go(func() {
			for n := 0; !closed.Load(); n++ {
				tm := table.GetTablets()[n%len(table.GetTablets())]
				root.Send(pid, &messages.StartScan{RequestId: fmt.Sprintf("s%d-%d", i, n), Attempt: 1,
					Client: wire.FromPID(client), TabletActor: wire.FromPID(tablet), Tablet: tm.GetRef(), Files: tm.GetFiles(),
					Range:     &messages.KeyRange{Start: tm.GetRef().GetPrevEndRow(), End: tm.GetRef().GetEndRow()},
					BatchRows: 50, Window: 2, BusyTimeoutUs: time.Millisecond.Microseconds()})
			}
		})
	}
	testutil.Eventually(t, 30*time.Second, "the servers to answer scans busy", func() bool {
		for _, c := range h.counters {
			if c.Busy.Load() < 10 || c.Scans.Load() < 2 {
				return false
			}
		}
		return true
	})
	// The senders stop first: a scan server's actor runs its messages on
	// the goroutine that delivers them, and Close's stop of the actor
	// would run theirs for as long as they send. Its workers still
	// stream the scans it started, and send their ends as Close cancels
	// them.
	closed.Store(true)
	wg.Wait()
	h.Close()
}
