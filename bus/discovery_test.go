package bus

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/scanplane/scanplane/messages"
)

// TestDiscover: with nobody serving, Discover fails at once with
// ErrNoAnswer wrapping nats.ErrNoResponders; a coordinator that knows no
// lease does not answer; one that does answers with its valid leases
// (invalid ones skipped).
func TestDiscover(t *testing.T) {
	srv := startServer(t)
	c := connect(t, srv)
	ctx := context.Background()
	if _, err := c.Discover(ctx, 5*time.Second); !errors.Is(err, ErrNoAnswer) || !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("Discover with nobody serving: %v, want ErrNoAnswer and no responders", err)
	}
	var live atomic.Pointer[[]*messages.ClusterInfo]
	stop, err := connect(t, srv).ServeDiscovery(func() []*messages.ClusterInfo {
		if l := live.Load(); l != nil {
			return *l
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if _, err := c.Discover(ctx, 200*time.Millisecond); !errors.Is(err, ErrNoAnswer) || errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("Discover of a coordinator without leases: %v, want ErrNoAnswer by timeout", err)
	}
	good := &messages.ClusterInfo{MemberId: "m1", CoordinatorAddress: "127.0.0.1:8090", RouterId: "scanplane-router", Incarnation: "i"}
	bad := &messages.ClusterInfo{MemberId: "", CoordinatorAddress: "127.0.0.1:8092"}
	live.Store(&[]*messages.ClusterInfo{good, bad})
	got, err := c.Discover(ctx, 5*time.Second)
	if err != nil || len(got) != 1 || got[0].GetMemberId() != "m1" || got[0].GetCoordinatorAddress() != good.CoordinatorAddress {
		t.Fatalf("Discover: %v, %v; want the valid lease m1 only", got, err)
	}
}

// TestDiscoveryAnswersOnlyInboxes: on a server without accounts (no
// users), a discovery request whose reply subject names a bucket key is
// refused, and the key keeps its value; an honest request after it is
// answered.
func TestDiscoveryAnswersOnlyInboxes(t *testing.T) {
	srv := startServer(t)
	ctx := testCtx(t)
	admin := connect(t, srv)
	meta, err := admin.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := meta.Publish(ctx, &messages.TableMeta{Name: "t", Generation: 1,
		Tablets: []*messages.TabletMeta{{Ref: &messages.TabletRef{Table: "t", Generation: 1}}}}, 0); err != nil {
		t.Fatal(err)
	}
	coord := serveOneLease(t, srv)
	attacker := connect(t, srv)
	for _, reply := range []string{"$KV." + DefaultConfig().MetaBucket + ".tables.t.current", "scanplane.v1.hb.h.s", "$JS.API.STREAM.DELETE.x"} {
		if err := attacker.NATS().PublishRequest(DiscoverSubject, reply, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := attacker.Discover(ctx, 5*time.Second); err != nil || len(got) != 1 {
		t.Fatalf("honest discovery: %v, %v", got, err)
	}
	if n := coord.RefusedDiscoveries(); n != 3 {
		t.Errorf("refused discoveries: %d, want 3", n)
	}
	if gen, err := meta.Current(ctx, "t"); err != nil || gen != 1 {
		t.Errorf("table t after the discovery requests: generation %d, %v; want 1", gen, err)
	}
}

// TestDiscoveryRateLimited: a flood of discovery requests gets at most
// the burst plus the rate's answers for the time it took.
func TestDiscoveryRateLimited(t *testing.T) {
	srv := startServer(t)
	coord := serveOneLease(t, srv)
	flooder := connect(t, srv)
	var answers atomic.Int64
	inbox := nats.NewInbox()
	sub, err := flooder.NATS().Subscribe(inbox, func(*nats.Msg) { answers.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	const flood = 3 * discoverBurst
	start := time.Now()
	for range flood {
		if err := flooder.NATS().PublishRequest(DiscoverSubject, inbox, nil); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "every flood request handled", func() bool {
		return uint64(answers.Load())+coord.LimitedDiscoveries() == flood
	})
	elapsed := time.Since(start)
	if limit := int64(discoverBurst + discoverRate*elapsed.Seconds() + 1); answers.Load() > limit {
		t.Errorf("%d answers to %d requests within %v, want at most %d", answers.Load(), flood, elapsed, limit)
	}
	// Faster than the rate refills the burst, some must be limited.
	if fast := time.Duration(float64(flood-discoverBurst) / discoverRate * float64(time.Second)); coord.LimitedDiscoveries() == 0 && elapsed < fast {
		t.Errorf("no request limited out of %d within %v", flood, elapsed)
	}
}

// serveOneLease connects to srv and answers discovery requests with one
// valid lease until the test ends.
func serveOneLease(t *testing.T, srv *testServer) *Conn {
	t.Helper()
	coord := connect(t, srv)
	lease := &messages.ClusterInfo{MemberId: "m1", CoordinatorAddress: "127.0.0.1:8090", RouterId: "scanplane-router", Incarnation: "i"}
	stop, err := coord.ServeDiscovery(func() []*messages.ClusterInfo { return []*messages.ClusterInfo{lease} })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return coord
}
