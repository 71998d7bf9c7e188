package main

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
)

// freePortBase returns a --port-base whose ports are free for one
// coordinator (below the ephemeral port range, away from the default
// ports) and differs from avoid.
func freePortBase(t *testing.T, avoid int) int {
	t.Helper()
	for range 100 {
		b := 10000 + rand.IntN(18000)
		if b/100 == avoid/100 {
			continue
		}
		if localcluster.CheckPorts(localcluster.Config{Coordinators: 1, Addrs: []localcluster.CoordinatorAddrs{localcluster.PortAddrs(b, 0)}}) == nil {
			return b
		}
	}
	t.Fatal("no free port base in 100 tries")
	return 0
}

// TestUpPortBase: `scanctl up --port-base N` moves every port of the
// local cluster. Beside a listener on its NATS port it refuses with one
// line naming the port once and the flag to pass. Two clusters on
// different bases run at once; each prints the SCANPLANE_NATS line the
// other commands need, and with it (or --nats) ingest and tables reach
// that cluster and no other.
func TestUpPortBase(t *testing.T) {
	clustertest.SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bins := clustertest.Binaries(t, ctx)
	scanctl := clustertest.BuildTool(t, ctx, "scanctl")
	t.Setenv(natsEnv, "")
	baseA := freePortBase(t, localcluster.DefaultPortBase)
	baseB := freePortBase(t, baseA)
	upArgs := func(base int) []string {
		return []string{"up", "--port-base", strconv.Itoa(base), "--coordinators", "1", "--hosts", "1", "--servers-per-host", "1",
			"--data", t.TempDir(), "--bin", bins, "--child-log-level", "warn"}
	}

	// Beside a listener on its NATS port.
	l, err := net.Listen("tcp", localcluster.PortAddrs(baseA, 0).NATS)
	if err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCapture(upArgs(baseA)...)
	l.Close()
	if code != 1 || strings.Count(errOut, "\n") != 1 || strings.Count(errOut, "port in use") != 1 ||
		!strings.Contains(errOut, localcluster.PortAddrs(baseA, 0).NATS) || !strings.Contains(errOut, "--port-base") {
		t.Fatalf("up beside a listener on its NATS port: exit %d, stderr %q; want exit 1 and one line naming the port once and --port-base", code, errOut)
	}

	// Two clusters at once.
	type upRun struct {
		out, errOut testutil.SyncBuffer
		code        chan int
		stop        context.CancelFunc
	}
	start := func(base int) *upRun {
		r := &upRun{code: make(chan int, 1)}
		uctx, stop := context.WithCancel(ctx)
		r.stop = stop
		go func() { r.code <- run(uctx, upArgs(base), &r.out, &r.errOut) }()
		return r
	}
	a, b := start(baseA), start(baseB)
	defer a.stop()
	defer b.stop()
	exportLine := regexp.MustCompile(`(?m)^  export ` + natsEnv + `=(\S+)$`)
	urls := map[*upRun]string{}
	for _, r := range []*upRun{a, b} {
		for !strings.Contains(r.out.String(), "press Ctrl-C to stop") {
			select {
			case c := <-r.code:
				t.Fatalf("up exited %d before ready:\n%s\n%s", c, r.out.String(), r.errOut.String())
			case <-ctx.Done():
				t.Fatalf("up not ready:\n%s\n%s", r.out.String(), r.errOut.String())
			case <-time.After(50 * time.Millisecond):
			}
		}
		m := exportLine.FindStringSubmatch(r.out.String())
		if m == nil {
			t.Fatalf("up printed no export line:\n%s", r.out.String())
		}
		urls[r] = m[1]
	}
	for r, base := range map[*upRun]int{a: baseA, b: baseB} {
		if want := localcluster.PortNATSURLs(base, 1); urls[r] != want {
			t.Errorf("up --port-base %d printed %s=%s, want %s", base, natsEnv, urls[r], want)
		}
		if want := "127.0.0.1:" + strconv.Itoa(base+3869) + "/status"; !strings.Contains(r.out.String(), want) {
			t.Errorf("up --port-base %d: no status URL on %s:\n%s", base, want, r.out.String())
		}
	}

	// The other commands, as processes: A through SCANPLANE_NATS, B
	// through --nats.
	cmd := func(env string, args ...string) string {
		t.Helper()
		c := exec.CommandContext(ctx, scanctl, append(args, "--timeout", "30s")...)
		c.Env = append(os.Environ(), natsEnv+"="+env)
		var o, e bytes.Buffer
		c.Stdout, c.Stderr = &o, &e
		if err := c.Run(); err != nil {
			t.Fatalf("scanctl %q (%s=%s): %v: %s", args, natsEnv, env, err, e.String())
		}
		return o.String()
	}
	cmd(urls[a], "ingest", "--table", "ta", "--generate", "100")
	cmd("", "ingest", "--nats", urls[b], "--table", "tb", "--generate", "200")
	for _, tc := range []struct {
		env       string
		args      []string
		has, hasn string
	}{
		{urls[a], []string{"tables"}, `ta\s+1\s+yes\s+8\s+100`, "tb"},
		{urls[a], []string{"tables", "--nats", urls[b]}, `tb\s+1\s+yes\s+8\s+200`, "ta"},
	} {
		if out := cmd(tc.env, tc.args...); !regexp.MustCompile(`(?m)^`+tc.has+`\s`).MatchString(out) || strings.Contains(out, tc.hasn) {
			t.Errorf("scanctl %q (%s=%s) lists:\n%s\nwant %s and not %s", tc.args, natsEnv, tc.env, out, tc.has, tc.hasn)
		}
	}
	if out := cmd(urls[a], "scan", "--table", "ta", "--count"); strings.TrimSpace(out) != "100" {
		t.Errorf("scan --count of ta through %s: %q, want 100", natsEnv, out)
	}

	for _, r := range []*upRun{a, b} {
		r.stop()
		select {
		case c := <-r.code:
			if c != 0 {
				t.Errorf("up after Ctrl-C: exit %d\n%s", c, r.errOut.String())
			}
		case <-time.After(time.Minute):
			t.Fatal("up did not stop within a minute of Ctrl-C")
		}
	}
}
