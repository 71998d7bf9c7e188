package localcluster

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil"
)

// TestSuperviseRestartsARestartThatDies: a restarted host whose new
// process dies while Restart waits for the coordinators to see it is
// restarted again after its back-off: supervision is not blind for
// ReadyTimeout meanwhile, which would leave the host's servers out of
// every coordinator's view that long. The other host is SIGSTOPped, so
// the wait cannot end on its own.
func TestSuperviseRestartsARestartThatDies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes (skipped with -short)")
	}
	ctx := context.Background()
	cl, out, stop := startSupervised(t, ctx, 2, 10*time.Minute)
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	// host2 stands still: once the coordinator counts its server dead, no
	// restart of host1 is seen whole until it continues.
	if err := cl.Signal(1, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	live := func() int {
		st, err := cl.StatusOf(ctx, 0)
		if err != nil {
			return -1
		}
		n := 0
		for _, s := range st.Servers {
			if s.Alive {
				n++
			}
		}
		return n
	}
	testutil.Eventually(t, 60*time.Second, "the coordinator to count host2's server dead", func() bool { return live() == 1 })
	first := cl.Host(0)
	if err := cl.Kill(0); err != nil {
		t.Fatal(err)
	}
	var second *Proc
	testutil.Eventually(t, 90*time.Second, "host1 restarted", func() bool {
		p := cl.Host(0)
		if p != first && p.Alive() {
			second = p
			return true
		}
		return false
	})
	if err := kill(second); err != nil {
		t.Fatal(err)
	}
	if !testutil.Poll(90*time.Second, func() bool { p := cl.Host(0); return p != first && p != second && p.Alive() }) {
		t.Fatalf("host1 not restarted after its restarted process died; supervisor said:\n%s", out.String())
	}
	if want := fmt.Sprintf("the new process (pid %d) exited: signal: killed", second.PID()); !strings.Contains(out.String(), want) {
		t.Errorf("supervisor output lacks %q:\n%s", want, out.String())
	}
	if err := cl.Signal(1, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitServers(ctx, 2, 60*time.Second); err != nil {
		t.Fatalf("after host2 continued: %v", err)
	}
}
