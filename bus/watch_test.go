package bus

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil"
)

// watchLog records what a MetaStore.Watch delivered.
type watchLog struct {
	mu  sync.Mutex
	gen map[string]uint64
	n   int
}

func (w *watchLog) fn(table string, gen uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen[table] = gen
	w.n++
}

func (w *watchLog) get(table string) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen[table]
}

// restartable is a test server that can be stopped and started again
// on the same port and store directory.
type restartable struct {
	t    *testing.T
	port int
	dir  string
	srv  *testServer
}

func startRestartable(t *testing.T) *restartable {
	t.Helper()
	r := &restartable{t: t, port: -1, dir: t.TempDir()}
	r.start()
	u, err := url.Parse(r.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	if r.port, err = strconv.Atoi(u.Port()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.srv.Close() })
	return r
}

func (r *restartable) start() {
	r.t.Helper()
	r.srv = startTestServer(r.t, r.port, r.dir)
}

func (r *restartable) restart() {
	r.t.Helper()
	r.srv.Close()
	r.start()
}

// waitGen polls until the watch has delivered gen for table and returns
// how long that took; it fails naming the delay and what was seen.
func waitGen(t *testing.T, w *watchLog, table string, gen uint64, bound time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if !testutil.Poll(bound, func() bool { return w.get(table) == gen }) {
		t.Fatalf("watch still reports %s generation %d %v after generation %d was published (bound %v)",
			table, w.get(table), time.Since(start).Round(time.Millisecond), gen, bound)
	}
	return time.Since(start)
}

// TestWatchResyncsAfterServerRestart: a watch that lives through a NATS
// server restart (same port, same store) reports a generation published
// after the restart promptly, and the table's current generation again on
// reconnect. The bound (2s) is well under the 5s idle heartbeat after
// which the JetStream library would notice a lost consumer by itself.
func TestWatchResyncsAfterServerRestart(t *testing.T) {
	r := startRestartable(t)
	pub := metaStore(t, connect(t, r.srv))
	ctx := testCtx(t)
	if err := pub.Publish(ctx, tableMeta("a", 1, "x"), 0); err != nil {
		t.Fatal(err)
	}
	w := &watchLog{gen: map[string]uint64{}}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watcher := connect(t, r.srv)
	if err := metaStore(t, watcher).Watch(wctx, w.fn); err != nil {
		t.Fatal(err)
	}
	if g := w.get("a"); g != 1 {
		t.Fatalf("initial generation %d, want 1", g)
	}
	// Without a restart the change arrives at once.
	if err := pub.Publish(ctx, tableMeta("a", 2, "y"), 1); err != nil {
		t.Fatal(err)
	}
	t.Logf("no restart: generation 2 seen after %v", waitGen(t, w, "a", 2, 10*time.Second))

	for round := range 2 {
		r.restart()
		before := w.n
		// Wait until both connections are back, as a user's next ingest
		// would.
		eventually(t, "clients reconnect", func() bool {
			return watcher.NATS().IsConnected() && pub.conn.NATS().IsConnected()
		})
		gen := uint64(3 + round)
		// JetStream may still be restoring its streams from disk after
		// the clients reconnected: an unavailable store is retried, as a
		// user's ingest would be, for a bounded time.
		testutil.EventuallyErr(t, 30*time.Second, "a publish after the restart", func() error {
			err := pub.Publish(ctx, tableMeta("a", gen, "z"), gen-1)
			if err == nil {
				return nil
			}
			if errors.Is(err, ErrConflict) {
				// an earlier try that timed out was applied after all
				if g, cerr := pub.Current(ctx, "a"); cerr == nil && g == gen {
					return nil
				}
			}
			if !errors.Is(err, ErrUnavailable) {
				t.Fatal(err)
			}
			t.Logf("restart %d: publish: %v; again", round+1, err)
			return err
		})
		took := waitGen(t, w, "a", gen, 2*time.Second)
		t.Logf("restart %d: generation %d seen %v after its publish (%d deliveries since the restart)", round+1, gen, took.Round(time.Millisecond), w.n-before)
	}
}
