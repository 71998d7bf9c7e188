package localcluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil"
)

func TestRestartBackoff(t *testing.T) {
	cfg := SuperviseConfig{MinBackoff: time.Second, MaxBackoff: 5 * time.Second, StableAfter: time.Minute}
	b := newRestartBackoff(cfg)
	for i, tc := range []struct {
		ran, want time.Duration
	}{
		{time.Second, time.Second},     // first death
		{time.Second, 2 * time.Second}, // dies young again: doubles
		{time.Second, 4 * time.Second}, //
		{time.Second, 5 * time.Second}, // capped at MaxBackoff
		{time.Second, 5 * time.Second}, //
		{time.Minute, time.Second},     // ran StableAfter: from MinBackoff again
		{59 * time.Second, 2 * time.Second},
	} {
		if got := b.Wait(tc.ran); got != tc.want {
			t.Fatalf("step %d (ran %v): wait %v, want %v", i, tc.ran, got, tc.want)
		}
	}
	z := newRestartBackoff(SuperviseConfig{MinBackoff: 0, MaxBackoff: 0, StableAfter: time.Minute})
	if got := z.Wait(0); got != 0 {
		t.Fatalf("zero backoff: %v", got)
	}
	for _, bad := range []SuperviseConfig{
		{MinBackoff: -1},
		{MinBackoff: 2 * time.Second, MaxBackoff: time.Second},
		{MinBackoff: time.Second, MaxBackoff: time.Second, StableAfter: -1},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

// TestSuperviseRestartsWhatDies: a host and then the coordinator are
// SIGKILLed under Supervise; each comes back as a new process, with a
// line for the death and one for the restart, and every server is seen
// alive again. Ending the context stops supervision; Close leaves nothing
// (TestMain's goleak).
func TestSuperviseRestartsWhatDies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes (skipped with -short)")
	}
	ctx := context.Background()
	cl, out, stop := startSupervised(t, ctx, 1, 60*time.Second)
	waitNew := func(name string, old *Proc, current func() *Proc) {
		t.Helper()
		if !testutil.Poll(90*time.Second, func() bool {
			p := current()
			return p != old && p.Alive() && strings.Contains(out.String(), name+" restarted")
		}) {
			t.Fatalf("%s not restarted within 90s; supervisor said:\n%s", name, out.String())
		}
	}
	old := cl.Host(0)
	if err := cl.Kill(0); err != nil {
		t.Fatal(err)
	}
	waitNew("host1", old, func() *Proc { return cl.Host(0) })
	oldC := cl.Coordinator()
	if err := cl.KillCoordinator(0); err != nil {
		t.Fatal(err)
	}
	waitNew("coordinator", oldC, cl.Coordinator)
	if err := cl.WaitServers(ctx, 1, 60*time.Second); err != nil {
		t.Fatalf("after the restarts: %v", err)
	}
	got := out.String()
	for _, want := range []string{"host1 (pid ", "coordinator (pid ", "exited: signal: killed; restarting in 50ms"} {
		if !strings.Contains(got, want) {
			t.Errorf("supervisor output lacks %q:\n%s", want, got)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// startSupervised starts a cluster of one coordinator and hosts hosts of
// one server each (binaries built from source, heartbeats every 100 ms)
// under Supervise with back-offs from 50 ms to 1 s. It returns the
// cluster, closed when the test ends, what supervision writes, and stop,
// which ends supervision and returns Supervise's error.
func startSupervised(t *testing.T, ctx context.Context, hosts int, ready time.Duration) (*Cluster, *testutil.SyncBuffer, func() error) {
	t.Helper()
	bins, err := BuildFromSource(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := Start(ctx, Config{Coordinators: 1, Hosts: hosts, ServersPerHost: 1, DataDir: t.TempDir(), BinDir: bins,
		Heartbeat: 100 * time.Millisecond, ReadyTimeout: ready})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	out := &testutil.SyncBuffer{}
	sctx, cancel := context.WithCancel(ctx)
	supervised := make(chan error, 1)
	go func() {
		supervised <- cl.Supervise(sctx, SuperviseConfig{Out: out, MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second})
	}()
	return cl, out, func() error { cancel(); return <-supervised }
}
