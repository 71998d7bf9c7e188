package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// steadyLoad runs verified random scans on `workers` goroutines until
// stopped, recording failures (with their time), wrong rows, and the time
// of every completed scan.
type steadyLoad struct {
	f       *fixture
	mu      sync.Mutex
	fails   []string
	wrong   int
	doneAt  []time.Time
	count   atomic.Int64
	stop    context.CancelFunc
	wg      sync.WaitGroup
	started time.Time
}

func startLoad(f *fixture, workers int) *steadyLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &steadyLoad{f: f, stop: cancel, started: time.Now()}
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for ctx.Err() == nil {
				a := r.IntN(len(f.truth) - 500)
				b := a + 1 + r.IntN(400)
				sctx, scancel := context.WithTimeout(ctx, 60*time.Second)
				err := f.scan(sctx, a, b)
				scancel()
				if ctx.Err() != nil {
					return
				}
				l.mu.Lock()
				switch {
				case err == nil:
					l.doneAt = append(l.doneAt, time.Now())
					l.count.Add(1)
				case wrongRows(err):
					l.wrong++
					l.fails = append(l.fails, err.Error())
				default:
					l.fails = append(l.fails, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), err))
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// snapshot returns the failures so far and clears them.
func (l *steadyLoad) takeFails() (fails []string, wrong int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fails, wrong = l.fails, l.wrong
	l.fails, l.wrong = nil, 0
	return fails, wrong
}

// longestGap is the longest time without a completed scan in [from, to].
func (l *steadyLoad) longestGap(from, to time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, gap := from, time.Duration(0)
	for _, t := range l.doneAt {
		if t.Before(from) || t.After(to) {
			continue
		}
		gap = max(gap, t.Sub(prev))
		prev = t
	}
	return max(gap, to.Sub(prev))
}

// waitScans waits until n more scans completed (or fails the test).
func (l *steadyLoad) waitScans(t *testing.T, n int64, what string) {
	t.Helper()
	target := l.count.Load() + n
	if !testutil.Poll(90*time.Second, func() bool { return l.count.Load() >= target }) {
		fails, _ := l.takeFails()
		t.Fatalf("%s: no %d completed scans within 90s; failures: %q", what, n, fails)
	}
}

func (l *steadyLoad) close() {
	l.stop()
	l.wg.Wait()
}

// TestCoordinatorLossUnderLoad: three coordinators (each one node of the
// embedded three-node NATS cluster, replicas 3), three hosts, and a client
// that discovers the coordinators from their leases and scans without a
// pause on four goroutines, every scan verified against the ground truth.
// Each coordinator in turn is SIGKILLed — the first is the one whose NATS
// node the client is connected to — and restarted: no scan fails, no row
// is wrong, scans keep completing (the longest gap is logged), and the
// restarted coordinator takes tablet actors again. Then two of three are
// killed: scans fail with an error that names what is missing, and work
// again once one is back.
func TestCoordinatorLossUnderLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cl := clustertest.Start(t, ctx, localcluster.Config{Coordinators: 3, Hosts: 3, ServersPerHost: 1,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 90 * time.Second})
	f := &fixture{t: t, cl: cl, truth: tablets.GenerateRows(20000)}
	meta := ingest(t, cl.NATSURL(), f.truth, 12)
	// Discovery through the leases: the production path.
	f.c = clustertest.Client(t, context.Background(), cl.NATSURL(), func(cfg *client.Config) {
		cfg.StallTimeout = time.Second
		if testing.Verbose() {
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		}
	})

	load := startLoad(f, 4)
	defer load.close()
	load.waitScans(t, 50, "steady state")
	if fails, _ := load.takeFails(); len(fails) > 0 {
		t.Fatalf("failures before any fault: %q", fails)
	}

	for _, victim := range []int{0, 1, 2} {
		killed := time.Now()
		if err := cl.KillCoordinator(victim); err != nil {
			t.Fatal(err)
		}
		// Scans go on through the others, within the lease TTL (3 s) and
		// then some.
		load.waitScans(t, 50, fmt.Sprintf("after killing coordinator %d", victim))
		if err := cl.RestartCoordinator(ctx, victim); err != nil {
			t.Fatalf("restart coordinator %d: %v", victim, err)
		}
		restarted := time.Now()
		// The restarted coordinator owns tablets again and serves them.
		// Rendezvous hashing over the actor addresses (ephemeral ports,
		// other in every run) may give it none of the 12 tablets: then
		// it has nothing to serve, and is back once every coordinator
		// sees its new lease.
		if owned := ownedTablets(meta, cl.CoordinatorAddrs(), cl.CoordinatorAddr(victim)); owned == 0 {
			t.Logf("coordinator %d (%s) owns none of the %d tablets among %v", victim, cl.CoordinatorAddr(victim), len(meta.GetTablets()), cl.CoordinatorAddrs())
			waitMemberEverywhere(t, ctx, cl, victim)
		} else {
			var err error
			if !testutil.Poll(90*time.Second, func() bool {
				var st *messages.StatusReply
				st, err = cl.StatusOf(ctx, victim)
				return err == nil && st.GetTabletActors() > 0
			}) {
				t.Fatalf("restarted coordinator %d, owner of %d tablets, holds no tablet actor after 90s (status err %v)", victim, owned, err)
			}
		}
		load.waitScans(t, 30, fmt.Sprintf("after restarting coordinator %d", victim))
		fails, wrong := load.takeFails()
		if wrong > 0 || len(fails) > 0 {
			t.Fatalf("coordinator %d killed and restarted: %d wrong, %d failed scans: %q", victim, wrong, len(fails), fails)
		}
		t.Logf("coordinator %d SIGKILLed: longest gap without a completed scan %v (kill to restart %v); back with tablet actors after %v; %d scans so far",
			victim, load.longestGap(killed, restarted).Round(time.Millisecond), restarted.Sub(killed).Round(time.Millisecond),
			time.Since(restarted).Round(time.Millisecond), load.count.Load())
	}

	// Two of three: no NATS quorum, no coordinator for their tablets.
	load.close()
	for _, i := range []int{1, 2} {
		if err := cl.KillCoordinator(i); err != nil {
			t.Fatal(err)
		}
	}
	// Within the lease TTL the survivor may still serve from what is
	// cached; once its lease cannot be renewed (no NATS quorum) it is gone
	// for the client too, and scans fail naming what is missing.
	var err error
	if !testutil.Poll(90*time.Second, func() bool {
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
		err = f.scan(sctx, 0, len(f.truth))
		scancel()
		if wrongRows(err) {
			t.Fatalf("wrong rows with two of three coordinators dead: %v", err)
		}
		return err != nil
	}) {
		t.Fatal("full scans still succeed 90s after two of three coordinators (and NATS nodes) died")
	}
	// "no coordinator" is client.ErrNoCoordinator (also at the deadline
	// when nothing answered) and the wire's NO_COORDINATOR; a NATS error
	// comes from the client's metadata watch.
	msg := strings.ToLower(strings.ReplaceAll(err.Error(), "_", " "))
	if !strings.Contains(msg, "no coordinator") && !strings.Contains(msg, "nats") {
		t.Fatalf("error with two of three coordinators dead says neither no coordinator nor NATS: %v", err)
	}
	t.Logf("two of three dead: %v", err)
	if err := cl.RestartCoordinator(ctx, 1); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyErr(t, 90*time.Second, "full scans after one of the two came back", func() error {
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
		err := f.scan(sctx, 0, len(f.truth))
		scancel()
		if wrongRows(err) {
			t.Fatalf("wrong rows after one coordinator came back: %v", err)
		}
		return err
	})
}

// ownedTablets is how many of meta's tablets the coordinator at addr
// owns among the coordinators at addrs: tablets.Owner over their actor
// addresses, as the coordinators place tablet actors and clients send
// requests.
func ownedTablets(meta *messages.TableMeta, addrs []string, addr string) int {
	n := 0
	for i := range meta.GetTablets() {
		if tablets.Owner(addrs, tablets.Identity(meta.GetName(), meta.GetGeneration(), uint32(i))) == addr {
			n++
		}
	}
	return n
}

// waitMemberEverywhere waits until every coordinator's /status lists the
// lease of coordinator i's current incarnation (or fails the test).
func waitMemberEverywhere(t *testing.T, ctx context.Context, cl *localcluster.Cluster, i int) {
	t.Helper()
	testutil.EventuallyErr(t, 90*time.Second, fmt.Sprintf("restarted coordinator %d in every coordinator's leases", i), func() error {
		st, err := cl.StatusOf(ctx, i)
		if err != nil {
			return err
		}
		id := st.GetMemberId()
		for j := range cl.Coordinators() {
			sj, err := cl.StatusOf(ctx, j)
			if err != nil {
				return fmt.Errorf("coordinator %d: %w", j, err)
			}
			if !slices.ContainsFunc(sj.GetCoordinators(), func(ci *messages.ClusterInfo) bool { return ci.GetMemberId() == id }) {
				return fmt.Errorf("coordinator %d does not list member %s (coordinator %d)", j, id, i)
			}
		}
		return nil
	})
}

// wrongRows: err is the fixture's verification failing (a wrong, missing
// or extra row), not an error the client returned (those are wrapped).
func wrongRows(err error) bool { return err != nil && errors.Unwrap(err) == nil }

// TestOwnedTablets: ownedTablets counts what tablets.Owner gives each
// coordinator; with the actor addresses of a cluster where one of three
// coordinators owns none of 12 tablets, it says so (that coordinator,
// restarted, never holds a tablet actor).
func TestOwnedTablets(t *testing.T) {
	meta := &messages.TableMeta{Name: table, Generation: 1, Tablets: make([]*messages.TabletMeta, 12)}
	addrs := []string{"127.0.0.1:39125", "127.0.0.1:41123", "127.0.0.1:35063"}
	got := []int{ownedTablets(meta, addrs, addrs[0]), ownedTablets(meta, addrs, addrs[1]), ownedTablets(meta, addrs, addrs[2])}
	if !slices.Equal(got, []int{6, 6, 0}) {
		t.Fatalf("tablets owned by %v: %v, want [6 6 0]", addrs, got)
	}
	if n := ownedTablets(meta, addrs, "127.0.0.1:1"); n != 0 {
		t.Fatalf("a non-member owns %d tablets", n)
	}
}
