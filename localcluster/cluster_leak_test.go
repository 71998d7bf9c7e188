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

// TestCloseLeavesNothing: a cluster started, with a host killed and
// restarted on the way, and closed leaves no child process running and
// (TestMain) no goroutine behind.
func TestCloseLeavesNothing(t *testing.T) {
	ctx := context.Background()
	bins, err := BuildFromSource(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := Start(ctx, Config{Hosts: 2, ServersPerHost: 1, DataDir: t.TempDir(), BinDir: bins,
		Heartbeat: 100 * time.Millisecond, ReadyTimeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	procs := []*Proc{cl.Coordinator(), cl.Host(0), cl.Host(1)}
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
