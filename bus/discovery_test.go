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
