package localcluster

import (
	"context"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: every
// child process has a goroutine waiting for it, which must end by Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestCloseLeavesNothing: a cluster of three coordinators started, with a
// host and a coordinator killed and restarted on the way (the coordinator
// on its ports), and closed leaves no child process running and (TestMain)
// no goroutine behind.
func TestCloseLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes (skipped with -short)")
	}
	ctx := context.Background()
	bins, err := BuildFromSource(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := Start(ctx, Config{Coordinators: 3, Hosts: 2, ServersPerHost: 1, DataDir: t.TempDir(), BinDir: bins,
		Heartbeat: 100 * time.Millisecond, ReadyTimeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	procs := []*Proc{cl.CoordinatorProc(0), cl.CoordinatorProc(1), cl.CoordinatorProc(2), cl.Host(0), cl.Host(1)}
	if n := len(cl.NATSURLs()); n != 3 {
		t.Fatalf("NATS URLs %v, want 3", cl.NATSURLs())
	}
	addr, http := cl.CoordinatorAddr(1), cl.HTTPAddr(1)
	if err := cl.KillCoordinator(1); err != nil {
		t.Fatal(err)
	}
	if err := cl.RestartCoordinator(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if cl.CoordinatorAddr(1) != addr || cl.HTTPAddr(1) != http || cl.CoordinatorProc(1).Ready.HTTP != http {
		t.Errorf("restarted coordinator at %s/%s (ready file %s), was at %s/%s", cl.CoordinatorAddr(1), cl.HTTPAddr(1), cl.CoordinatorProc(1).Ready.HTTP, addr, http)
	}
	if _, err := cl.StatusOf(ctx, 1); err != nil {
		t.Fatal(err)
	}
	procs = append(procs, cl.CoordinatorProc(1))
	if err := cl.Kill(1); err != nil {
		t.Fatal(err)
	}
	if err := cl.Restart(ctx, 1); err != nil {
		t.Fatal(err)
	}
	procs = append(procs, cl.Host(1))
	if _, err := cl.Status(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	for _, p := range procs {
		if p.Alive() {
			t.Errorf("%s (pid %d) still running after Close", p.Name, p.PID())
			_ = syscall.Kill(p.PID(), syscall.SIGKILL)
		}
	}
}
