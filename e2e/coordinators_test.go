package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

// TestCoordinatorKilledAndRestarted: three coordinators (each one node of
// an embedded three-node NATS cluster, JetStream replicas 3) and two
// hosts. A verified full scan works; coordinator 0 — the client's first
// choice, and a NATS node — is SIGKILLed; the next scans, through a client
// that knows every coordinator, are still exactly right; coordinator 0
// restarted on its ports and data directory answers /status, sees the
// scan servers, and serves the client's scans again.
func TestCoordinatorKilledAndRestarted(t *testing.T) {
	clustertest.SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bins := clustertest.Binaries(t, ctx) // before t0: the log times the start alone
	t0 := time.Now()
	cl := clustertest.Start(t, ctx, localcluster.Config{Coordinators: 3, Hosts: 2, ServersPerHost: 1, BinDir: bins,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 60 * time.Second})
	t.Logf("3 coordinators and 2 hosts ready in %v", time.Since(t0).Round(time.Millisecond))
	if got := len(cl.NATSURLs()); got != 3 {
		t.Fatalf("NATSURLs %v: want one per coordinator", cl.NATSURLs())
	}
	f := &fixture{t: t, cl: cl, truth: tablets.GenerateRows(20000)}
	ingest(t, cl.NATSURL(), f.truth, 4)
	coords := cl.CoordinatorAddrs()
	f.c = clustertest.Client(t, context.Background(), cl.NATSURL(), func(cfg *client.Config) {
		cfg.Coordinators = coords
		cfg.StallTimeout = time.Second
	})
	if err := f.scan(ctx, 0, len(f.truth)); err != nil {
		t.Fatal(err)
	}

	// Every coordinator's /status shows the cluster: the two others by
	// address with their own counters, which sum to the scans made.
	st, err := cl.StatusOf(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	var started uint64
	seen := map[string]bool{st.GetAddress(): true}
	for _, p := range st.GetPeers() {
		seen[p.GetAddress()] = true
		started += p.GetScansStarted()
	}
	started += st.GetScansStarted()
	if len(st.GetPeers()) != 2 || len(seen) != 3 || started == 0 {
		t.Fatalf("coordinator 1's /status: address %q, peers %v; want the two others, and scans counted", st.GetAddress(), st.GetPeers())
	}
	for _, ci := range st.GetCoordinators() {
		if age := time.Since(time.UnixMilli(ci.GetRenewedUnixMs())); age > 5*time.Second {
			t.Fatalf("lease of %s renewed %v ago, want its latest renewal (every second)", ci.GetCoordinatorAddress(), age)
		}
	}

	if err := cl.KillCoordinator(0); err != nil {
		t.Fatal(err)
	}
	// Every scan after the loss is right: the client sends to the next
	// coordinator, and the NATS cluster keeps its quorum.
	t0 = time.Now()
	for i := 0; i < 5; i++ {
		a, b := i*3000, i*3000+5000
		if i == 0 {
			a, b = 0, len(f.truth)
		}
		if err := f.scan(ctx, a, b); err != nil {
			t.Fatalf("scan %d after coordinator 0 was killed: %v", i, err)
		}
	}
	t.Logf("5 scans after the kill took %v", time.Since(t0).Round(time.Millisecond))
	for i := 1; i < 3; i++ {
		if _, err := cl.StatusOf(ctx, i); err != nil {
			t.Fatalf("coordinator %d after coordinator 0 was killed: %v", i, err)
		}
	}

	t0 = time.Now()
	if err := cl.RestartCoordinator(ctx, 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("coordinator 0 restarted and sees the servers in %v", time.Since(t0).Round(time.Millisecond))
	st, err = cl.StatusOf(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	alive := 0
	for _, s := range st.Servers {
		if s.Alive {
			alive++
		}
	}
	if alive != 2 {
		t.Fatalf("restarted coordinator 0 sees %d live servers, want 2", alive)
	}
	if got := cl.CoordinatorAddr(0); got != coords[0] {
		t.Fatalf("restarted coordinator 0 is at %s, was at %s", got, coords[0])
	}
	// The client, which scans on meanwhile, finds its first choice back
	// (it probes lost coordinators while scans run) and scans through it.
	if !testutil.Poll(60*time.Second, func() bool {
		if f.c.Coordinator() == coords[0] {
			return true
		}
		if err := f.scan(ctx, 100, 200); err != nil {
			t.Fatalf("scan after coordinator 0 was restarted: %v", err)
		}
		return false
	}) {
		_, lost := f.c.Coordinators()
		t.Fatalf("the client did not return to restarted coordinator 0 within 60s (lost: %q)", lost)
	}
	t.Logf("the client is back on coordinator 0 after %v", time.Since(t0).Round(time.Millisecond))
	if err := f.scan(ctx, 0, len(f.truth)); err != nil {
		t.Fatalf("scan through restarted coordinator 0: %v", err)
	}
}
