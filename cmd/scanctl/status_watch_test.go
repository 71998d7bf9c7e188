package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
)

func TestStatusWatchFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "--interval", "1s"}, "--interval and --count need --watch"},
		{[]string{"status", "--count", "3"}, "--interval and --count need --watch"},
		{[]string{"status", "--watch", "--interval", "0s"}, "--interval 0s must be > 0"},
		{[]string{"status", "--watch", "--interval", "-2s"}, "--interval -2s must be > 0"},
		{[]string{"status", "--watch", "--interval", "soon"}, "invalid value"},
		{[]string{"status", "--watch", "--count", "-1"}, "--count -1 must be >= 0"},
	} {
		code, out, errOut := runCapture(c.args...)
		if code != 2 || !strings.Contains(out+errOut, c.want) {
			t.Errorf("scanctl %v: exit %d, output %q %q; want exit 2 mentioning %q", c.args, code, out, errOut, c.want)
		}
	}
}

const frameHeader = "scanctl status --watch: every "

// TestStatusWatch runs scanctl status --watch against a real cluster (one
// coordinator, one scanserver process with two servers): a bounded run
// (--count 2) draws two frames, each listing every server /status lists;
// on a terminal each frame starts by clearing the screen; an unbounded
// run ends with exit 0 when its context is cancelled (what Ctrl-C does).
func TestStatusWatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := clustertest.Start(t, ctx, localcluster.Config{Hosts: 1, ServersPerHost: 2, Heartbeat: 200 * time.Millisecond})
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	http := cl.HTTPAddr(0)
	common := []string{"--nats", cl.NATSURL(), "--timeout", "20s"}

	start := time.Now()
	code, out, errOut := runCapture(append([]string{"status", "--watch", "--interval", "300ms", "--count", "2"}, common...)...)
	elapsed := time.Since(start)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	frames := strings.Split(out, frameHeader)[1:]
	if len(frames) != 2 || strings.Contains(out, clearScreen) {
		t.Fatalf("want 2 frames without clear-screen codes (not a terminal), got %d:\n%s", len(frames), out)
	}
	for i, f := range frames {
		if !strings.Contains(f, http) {
			t.Errorf("frame %d does not list the coordinator (http %s):\n%s", i, http, f)
		}
		for _, s := range st.Servers {
			if !strings.Contains(f, s.Id) {
				t.Errorf("frame %d does not list server %s:\n%s", i, s.Id, f)
			}
		}
	}
	if elapsed < 300*time.Millisecond {
		t.Errorf("two frames %v apart took %v", 300*time.Millisecond, elapsed)
	}

	// On a terminal: clear, then the frame.
	var term bytes.Buffer
	g := &globals{nats: cl.NATSURL(), timeout: 20 * time.Second, logLevel: "warn", logFormat: "text"}
	if err := watchStatus(ctx, g, watchFlags{watch: true, interval: time.Second, count: 1}, &term, &bytes.Buffer{}, true); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(term.String(), clearScreen+frameHeader) || strings.Count(term.String(), clearScreen) != 1 {
		t.Errorf("terminal output does not start with one clear-screen and the header:\n%q", term.String())
	}

	// Until Ctrl-C: cancel after the second frame.
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var live testutil.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(wctx, append([]string{"status", "--watch", "--interval", "100ms"}, common...), &live, &bytes.Buffer{})
	}()
	if !testutil.Poll(30*time.Second, func() bool { return strings.Count(live.String(), frameHeader) >= 2 }) {
		t.Fatalf("no second frame in 30s:\n%s", live.String())
	}
	stop()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("cancelled watch: exit %d, want 0", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not end within 10s of its context's cancellation")
	}
}
