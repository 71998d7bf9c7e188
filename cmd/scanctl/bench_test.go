package main

import (
	"bytes"
	"context"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
)

// TestBenchUsageErrors: bad flags of scanctl bench are refused before
// any IO, naming the value.
func TestBenchUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench"}, "--table is required"},
		{[]string{"bench", "--table", "t", "--parallel", "0"}, `"0" is not a window in 1..256`},
		{[]string{"bench", "--table", "t", "--parallel", "1,x"}, `"x" is not a window`},
		{[]string{"bench", "--table", "t", "--rounds", "0"}, "--rounds 0"},
		{[]string{"bench", "--table", "t", "--max-buffer", "-1"}, "--max-buffer -1"},
		{[]string{"bench", "--table", "t", "--gogc", "-1"}, "--gogc -1: want >= 0"},
		{[]string{"bench", "--table", "bad name"}, "--table"},
		{[]string{"scan", "--table", "t", "--parallel", "-2"}, "--parallel: client: ScanOptions.Parallel -2"},
	} {
		code, out, errOut := runCapture(c.args...)
		if code != 2 || !strings.Contains(out+errOut, c.want) {
			t.Errorf("scanctl %v: exit %d, output %q %q; want exit 2 mentioning %q", c.args, code, out, errOut, c.want)
		}
	}
}

// TestBench, on a real cluster: scanctl bench prints one line per
// --parallel value and one for the reader alone, each with every row of
// the table and the same bytes (the command checks the reader's rows and
// bytes against the scans').
func TestBench(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := clustertest.Start(t, ctx, localcluster.Config{Coordinators: 1, Hosts: 1, ServersPerHost: 2, Heartbeat: 200 * time.Millisecond})
	scanctl := clustertest.BuildTool(t, ctx, "scanctl")
	run := func(args ...string) string {
		t.Helper()
		c := exec.CommandContext(ctx, scanctl, append(args, "--nats", cl.NATSURL(), "--timeout", "60s")...)
		var o, e bytes.Buffer
		c.Stdout, c.Stderr = &o, &e
		if err := c.Run(); err != nil {
			t.Fatalf("scanctl %q: %v: %s", args, err, e.String())
		}
		return o.String()
	}
	run("ingest", "--table", "b", "--generate", "20000", "--splits", "5")
	out := run("bench", "--table", "b", "--parallel", "1,3", "--rounds", "2", "--count", "--lookups", "50")
	for _, what := range []string{`scan, parallel 1 \(median of 2\)`, `scan, parallel 3 \(median of 2\)`, `reader alone \(warm host cache\)`} {
		// what, rows, MB (20000 rows of 12-byte keys and 64-byte values).
		re := regexp.MustCompile(`(?m)^\s*` + what + `\s+20000\s+1\.5\s`)
		if !re.MatchString(out) {
			t.Errorf("no line %q with 20000 rows and 1.5 MB in:\n%s", what, out)
		}
	}
	// Counts: rows, no bytes streamed to the caller; lookups: one row
	// each, six figures (p50 .. p99/p50 and the scheduling latency).
	for _, re := range []string{`count, parallel 1 \(median of 2\)\s+20000\s+0\.0\s`, `count, parallel 3 \(median of 2\)\s+20000\s+0\.0\s`,
		`idle\s+50(\s+[0-9.]+){7}\s*$`, `during whole-table scans \(\d+ rows scanned, [0-9.]+ M rows/s\)\s+50(\s+[0-9.]+){7}\s*$`, `one-row lookups .* sched p99 ms\s+GC cycles\s*$`} {
		if !regexp.MustCompile(`(?m)^\s*` + re).MatchString(out) {
			t.Errorf("no line %q in:\n%s", re, out)
		}
	}
	if !strings.Contains(out, "table b generation 1: 5 tablets") {
		t.Errorf("no table line in:\n%s", out)
	}
}
