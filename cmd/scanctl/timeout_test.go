package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/natsserver"
)

// buildScanctl builds this command into a temp dir (a real process: its
// own actor system, its own Close, its own exit).
func buildScanctl(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs scanctl processes")
	}
	bin := filepath.Join(t.TempDir(), "scanctl")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

type procResult struct {
	code    int
	stdout  string
	stderr  string
	elapsed time.Duration
}

func runProc(t *testing.T, bin string, args ...string) procResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	res := procResult{stdout: out.String(), stderr: errOut.String(), elapsed: time.Since(start)}
	if ee, ok := err.(*exec.ExitError); ok {
		res.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("scanctl %v: %v", args, err)
	}
	t.Logf("scanctl %s: exit %d after %v: %s", strings.Join(args, " "), res.code, res.elapsed.Round(time.Millisecond), strings.TrimSpace(res.stderr))
	return res
}

// TestTimeoutHonouredWhateverIsDead: with NATS up and the named
// coordinator dead (nothing listens on 127.0.0.1:1), a command ends soon
// after its --timeout, with exit 1 and one line naming the coordinator,
// instead of waiting out the request timeout and a slow Close. Elapsed
// times are checked only as generous upper bounds (timeout + 1s is the
// goal; the bound allows for a loaded machine).
func TestTimeoutHonouredWhateverIsDead(t *testing.T) {
	bin := buildScanctl(t)
	nats := natsWithTable(t, bin, 1000, 2)
	const slack = 4 * time.Second
	for _, tc := range []struct {
		args    []string
		timeout time.Duration
		want    string
	}{
		{[]string{"status"}, 2 * time.Second, "127.0.0.1:1"},
		{[]string{"reload"}, 2 * time.Second, "127.0.0.1:1"},
		{[]string{"route", "--table", "t", "--row", "row000000005"}, 2 * time.Second, "127.0.0.1:1"},
		{[]string{"scan", "--table", "t"}, 2 * time.Second, "deadline exceeded"},
		{[]string{"scan", "--table", "t", "--via", "actor"}, 2 * time.Second, "deadline exceeded"},
	} {
		args := append(append([]string{}, tc.args...), "--nats", nats, "--coordinator", "127.0.0.1:1", "--timeout", tc.timeout.String())
		r := runProc(t, bin, args...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("scanctl %v: exit %d, stderr %q; want exit 1 and one line mentioning %q", args, r.code, r.stderr, tc.want)
		}
		if r.elapsed > tc.timeout+slack {
			t.Errorf("scanctl %v took %v, want about %v (at most %v here)", args, r.elapsed, tc.timeout+time.Second, tc.timeout+slack)
		}
	}
}

// TestScanFailsNamingLostCoordinator: a scan whose
// coordinator cannot be reached ends with ErrNoCoordinator's one line
// naming the address, well before a long --timeout.
func TestScanFailsNamingLostCoordinator(t *testing.T) {
	bin := buildScanctl(t)
	nats := natsWithTable(t, bin, 100, 1)
	for via, want := range map[string]string{
		// Through the API: the coordinator's HTTP address is unknown.
		"api":   "scanctl scan: client: no coordinator: coordinator 127.0.0.1:1 did not answer on NATS " + nats,
		"actor": "scanctl scan: client: no coordinator: coordinator 127.0.0.1:1 was lost",
	} {
		r := runProc(t, bin, "scan", "--via", via, "--table", "t", "--nats", nats, "--coordinator", "127.0.0.1:1", "--timeout", "60s")
		if r.code != 1 || !strings.HasPrefix(r.stderr, want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Fatalf("--via %s: exit %d, stderr %q; want exit 1 and one line starting %q", via, r.code, r.stderr, want)
		}
		if r.elapsed > 30*time.Second {
			t.Fatalf("--via %s took %v: the loss should be noticed in seconds, not at the 60s timeout", via, r.elapsed)
		}
	}
	// Without --coordinator and without a coordinator lease: at once.
	r := runProc(t, bin, "status", "--nats", nats, "--timeout", "10s")
	if r.code != 1 || !strings.Contains(r.stderr, "no coordinator lease") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}

// natsWithTable starts an embedded NATS server (stopped when the test ends)
// and ingests table t with the given generated rows and split count through
// the scanctl binary; it returns the server's URL.
func natsWithTable(t *testing.T, bin string, rows, splits int) string {
	t.Helper()
	sc := natsserver.DefaultServerConfig()
	sc.Port, sc.StoreDir = -1, t.TempDir()
	srv, err := natsserver.StartServer(sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	nats := srv.ClientURL()
	if r := runProc(t, bin, "ingest", "--nats", nats, "--table", "t", "--generate", strconv.Itoa(rows), "--splits", strconv.Itoa(splits)); r.code != 0 {
		t.Fatalf("ingest failed: %s", r.stderr)
	}
	return nats
}
