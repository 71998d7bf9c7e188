package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/natsserver"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

// embeddedNATS starts an embedded NATS server with JetStream, stopped when
// the test ends, and returns its URL.
func embeddedNATS(t *testing.T) string {
	t.Helper()
	sc := natsserver.DefaultServerConfig()
	sc.Port, sc.StoreDir = -1, t.TempDir()
	srv, err := natsserver.StartServer(sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv.ClientURL()
}

// scanctlOK runs scanctl in this process and fails t unless it exits 0;
// it returns stdout.
func scanctlOK(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := runCapture(args...)
	if code != 0 {
		t.Fatalf("scanctl %q: exit %d, stderr %q", args, code, errOut)
	}
	return out
}

// generationLines are the (generation, current, rows) columns of table's
// lines in scanctl tables' output, newest first.
func generationLines(out, table string) []string {
	var lines []string
	re := regexp.MustCompile(`(?m)^` + table + `\s+(\d+)\s+(yes|-)\s+\d+\s+(\d+)\s`)
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		lines = append(lines, m[1]+" "+m[2]+" "+m[3])
	}
	return lines
}

// TestGenerations, against an embedded NATS: scanctl tables lists every
// stored generation with its rows, current one marked; rollback makes the
// kept generation current and refuses a missing one with one line; the
// next ingest numbers past the rolled-back generation and deletes it;
// tables drop refuses the current generation and deletes a kept one or
// the whole table, blocks included.
func TestGenerations(t *testing.T) {
	nats := embeddedNATS(t)
	n := []string{"--nats", nats, "--timeout", "30s"}
	cmd := func(args ...string) string { t.Helper(); return scanctlOK(t, append(args, n...)...) }
	cmd("ingest", "--table", "t", "--generate", "100", "--splits", "2")
	cmd("ingest", "--table", "t", "--generate", "50", "--splits", "2")
	cmd("ingest", "--table", "u", "--generate", "7", "--splits", "1")
	tables := func() string { t.Helper(); return cmd("tables") }
	expect := func(table string, want ...string) {
		t.Helper()
		out := tables()
		if got := generationLines(out, table); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("scanctl tables, table %s: generations %q, want %q:\n%s", table, got, want, out)
		}
	}
	expect("t", "2 yes 50", "1 - 100")
	expect("u", "1 yes 7")
	if got := generationLines(cmd("tables", "--table", "u"), "t"); len(got) != 0 {
		t.Errorf("tables --table u lists t: %q", got)
	}
	// --json lists the same generations, and names a missing table.
	var gens []generationJSON
	if err := json.Unmarshal([]byte(cmd("tables", "--json")), &gens); err != nil {
		t.Fatalf("tables --json: %v", err)
	}
	var got []string
	for _, g := range gens {
		got = append(got, fmt.Sprintf("%s %d %v %d %d", g.Table, g.Generation, g.Current, g.Rows, g.Tablets))
	}
	if want := "t 2 true 50 2,t 1 false 100 2,u 1 true 7 1"; strings.Join(got, ",") != want {
		t.Errorf("tables --json: %q, want %q", got, want)
	}
	if err := json.Unmarshal([]byte(cmd("tables", "--json", "--table", "nope")), &gens); err != nil || len(gens) != 1 || gens[0].Error != `no table "nope"` {
		t.Errorf("tables --json --table nope: %+v, %v", gens, err)
	}

	if out := cmd("rollback", "--table", "t", "--generation", "1"); out != "table t: generation 1 is current again (it was 2)\n" {
		t.Errorf("rollback printed %q", out)
	}
	expect("t", "2 - 50", "1 yes 100")
	if out := cmd("rollback", "--table", "t", "--generation", "1"); out != "table t: generation 1 is current already\n" {
		t.Errorf("rollback to the current generation printed %q", out)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"rollback", "--table", "t", "--generation", "9"}, 1, "scanctl rollback: tablets: not found: table \"t\" has no generation 9 (it has 1 and 2)\n"},
		{[]string{"rollback", "--table", "nope", "--generation", "1"}, 1, "scanctl rollback: tablets: not found: no table \"nope\"\n"},
		{[]string{"rollback", "--table", "t"}, 2, "scanctl rollback: --table and --generation are required\nrun 'scanctl help rollback'\n"},
		{[]string{"rollback", "--table", "bad name", "--generation", "1"}, 2, "scanctl rollback: --table: tablets: bad name: table name \"bad name\""},
		{[]string{"tables", "drop"}, 2, "scanctl tables: --table is required\nrun 'scanctl help tables'\n"},
		{[]string{"tables", "drop", "--table", "t", "--generation", "1"}, 1, "scanctl tables: tablets: conflict: generation 1 is table \"t\"'s current generation (roll back to another first, or drop the table)\n"},
	} {
		code, _, errOut := runCapture(append(tc.args, n...)...)
		if code != tc.code || !strings.HasPrefix(errOut, tc.want) {
			t.Errorf("scanctl %q: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}

	// The next ingest replaces generation 1 (kept) and deletes 2, the
	// generation rolled back from.
	if out := cmd("ingest", "--table", "t", "--generate", "30", "--splits", "2"); !strings.HasPrefix(out, "ingested t: generation 3, 30 rows") {
		t.Fatalf("ingest after the rollback: %q", out)
	}
	expect("t", "3 yes 30", "1 - 100")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := clustertest.Connect(t, ctx, nats, nil)
	store, ms := clustertest.Stores(t, ctx, conn)
	var keys []string // every object of t's generations 1 and 3
	for _, g := range []uint64{1, 3} {
		tm, err := ms.Get(ctx, "t", g)
		if err != nil {
			t.Fatal(err)
		}
		for _, tab := range tm.GetTablets() {
			for _, f := range tab.GetFiles() {
				keys = append(keys, tablets.IndexKey(f.GetId()))
				for b := range int(f.GetBlocks()) {
					keys = append(keys, tablets.BlockKey(f.GetId(), b))
				}
			}
		}
	}
	if out := cmd("tables", "drop", "--table", "t", "--generation", "1"); out != "table t: dropped generation 1 and its blocks\n" {
		t.Errorf("tables drop --generation printed %q", out)
	}
	expect("t", "3 yes 30")
	if out := cmd("tables", "drop", "--table", "t"); out != "dropped table t: 1 generations and their blocks\n" {
		t.Errorf("tables drop printed %q", out)
	}
	expect("t")
	expect("u", "1 yes 7")

	// Nothing of t is left in the block store.
	for _, k := range keys {
		if _, err := store.Get(ctx, k); !bus.IsNotFound(err) {
			t.Errorf("block store object %s after tables drop: %v, want not found", k, err)
		}
	}
}

// TestGenerationsBlocksDir: a table ingested with --blocks-dir rolls back
// and drops with the same --blocks-dir; without it, rollback refuses with
// one line saying the blocks are not found and naming --blocks-dir.
func TestGenerationsBlocksDir(t *testing.T) {
	nats := embeddedNATS(t)
	dir := t.TempDir()
	n := []string{"--nats", nats, "--timeout", "30s"}
	cmd := func(args ...string) string { t.Helper(); return scanctlOK(t, append(args, n...)...) }
	cmd("ingest", "--table", "d", "--generate", "40", "--blocks-dir", dir)
	cmd("ingest", "--table", "d", "--generate", "20", "--blocks-dir", dir)
	code, _, errOut := runCapture(append([]string{"rollback", "--table", "d", "--generation", "1"}, n...)...)
	if code != 1 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "its blocks are gone") || !strings.Contains(errOut, "pass the same --blocks-dir") {
		t.Errorf("rollback without --blocks-dir: exit %d, stderr %q", code, errOut)
	}
	cmd("rollback", "--table", "d", "--generation", "1", "--blocks-dir", dir)
	if got := generationLines(cmd("tables"), "d"); strings.Join(got, ",") != "2 - 20,1 yes 40" {
		t.Errorf("after the rollback: %q", got)
	}
	cmd("tables", "drop", "--table", "d", "--blocks-dir", dir)
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Errorf("--blocks-dir holds %v after tables drop", left)
	}
}

// TestIngestEmptyRefused: an input without rows (an empty file, or the
// empty stdin of `cat /nonexistent | scanctl ingest -`) is refused with
// exit 1 and the table keeps its rows; --allow-empty publishes it.
func TestIngestEmptyRefused(t *testing.T) {
	bin := buildScanctl(t)
	nats := embeddedNATS(t)
	n := []string{"--nats", nats, "--timeout", "30s"}
	scanctlOK(t, append([]string{"ingest", "--table", "good2", "--generate", "100"}, n...)...)
	empty := filepath.Join(t.TempDir(), "empty.tsv")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCapture(append([]string{"ingest", "--table", "good2", empty}, n...)...)
	want := `scanctl ingest: "` + empty + `" has no rows: nothing ingested, table good2 keeps its rows (pass --allow-empty to publish an empty generation)` + "\n"
	if code != 1 || errOut != want {
		t.Errorf("ingest of an empty file: exit %d, stderr %q; want exit 1 and %q", code, errOut, want)
	}
	c := exec.Command(bin, append([]string{"ingest", "--table", "good2", "-"}, n...)...)
	c.Stdin = strings.NewReader("")
	var stderr bytes.Buffer
	c.Stderr = &stderr
	err := c.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.HasPrefix(stderr.String(), "scanctl ingest: stdin has no rows: nothing ingested, table good2 keeps its rows") {
		t.Errorf("ingest of empty stdin: %v, stderr %q; want exit 1 and the refusal", err, stderr.String())
	}
	if got := generationLines(scanctlOK(t, append([]string{"tables"}, n...)...), "good2"); strings.Join(got, ",") != "1 yes 100" {
		t.Fatalf("after the refused ingests: %q, want generation 1 with 100 rows current", got)
	}
	scanctlOK(t, append([]string{"ingest", "--table", "good2", "--allow-empty", empty}, n...)...)
	if got := generationLines(scanctlOK(t, append([]string{"tables"}, n...)...), "good2"); strings.Join(got, ",") != "2 yes 0,1 - 100" {
		t.Fatalf("after --allow-empty: %q", got)
	}
}

// TestRollbackScans, on a real cluster: after a rollback, scans return
// the rows of the generation made current again.
func TestRollbackScans(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := clustertest.Start(t, ctx, localcluster.Config{Coordinators: 1, Hosts: 1, ServersPerHost: 1, Heartbeat: 200 * time.Millisecond})
	scanctl := clustertest.BuildTool(t, ctx, "scanctl")
	run := func(args ...string) string {
		t.Helper()
		c := exec.CommandContext(ctx, scanctl, append(args, "--nats", cl.NATSURL(), "--timeout", "30s")...)
		var o, e bytes.Buffer
		c.Stdout, c.Stderr = &o, &e
		if err := c.Run(); err != nil {
			t.Fatalf("scanctl %q: %v: %s", args, err, e.String())
		}
		return strings.TrimSpace(o.String())
	}
	run("ingest", "--table", "r", "--generate", "300", "--splits", "3")
	run("ingest", "--table", "r", "--generate", "120", "--splits", "3")
	if got := run("scan", "--table", "r", "--count"); got != "120" {
		t.Fatalf("scan of generation 2: %s rows, want 120", got)
	}
	run("rollback", "--table", "r", "--generation", "1")
	if got := run("scan", "--table", "r", "--count"); got != "300" {
		t.Fatalf("scan after the rollback: %s rows, want 300", got)
	}
	if got := run("scan", "--table", "r", "--start", "row000000200", "--limit", "1"); !strings.HasPrefix(got, "row000000200\t") {
		t.Fatalf("scan from row000000200 after the rollback: %q", got)
	}
}
