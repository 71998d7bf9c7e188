package coordinator

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/natsserver"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/messages"
)

// TestMetaWatchSetUpAgainAfterItFailed: when the metadata watch cannot
// be set up at start (the bucket's stream is missing), the coordinator
// sets it up again later, and learns the generations published after.
func TestMetaWatchSetUpAgainAfterItFailed(t *testing.T) {
	ctx := context.Background()
	sc := natsserver.DefaultServerConfig()
	sc.Port, sc.StoreDir = -1, t.TempDir()
	srv, err := natsserver.StartServer(sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	conn := clustertest.Connect(t, ctx, srv.ClientURL(), nil)
	meta, err := conn.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// No stream behind the bucket: the watch's consumer cannot be made.
	if err := conn.JetStream().DeleteStream(ctx, "KV_"+bus.DefaultConfig().MetaBucket); err != nil {
		t.Fatal(err)
	}

	var logs testutil.SyncBuffer
	cfg := DefaultCoordinatorConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	co, err := NewCoordinator(cfg, conn, meta, nil)
	if err != nil {
		t.Fatal(err)
	}
	co.watchMeta()
	t.Cleanup(co.stopWatch)
	if !strings.Contains(logs.String(), "metadata watch failed") {
		t.Fatalf("the first set-up of the watch did not fail; log:\n%s", logs.String())
	}

	// The bucket back, then a generation published.
	if _, err := conn.MetaStore(ctx); err != nil {
		t.Fatal(err)
	}
	if err := meta.Publish(ctx, &messages.TableMeta{Name: "t", Generation: 1}, 0); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "the coordinator to learn generation 1 of t", func() bool {
		g, _ := co.meta.Current(ctx, "t")
		return g == 1
	})
}
