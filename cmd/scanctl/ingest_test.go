package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/tablets/rowfmt"
)

// awkwardRows are unique keys in key order whose keys and values hold
// separators, quotes, newlines, backslashes, every byte value and
// non-ASCII text. utf8Only leaves out the bytes that are not UTF-8 (a
// CSV field is text); noCRLF leaves out "\r" (encoding/csv reads "\r\n"
// as "\n").
func awkwardRows(n int, utf8Only, noCRLF bool) []tablets.Entry {
	rnd := rand.New(rand.NewPCG(1, 2))
	pieces := []string{",", "\"", "\t", "\n", "\\", "\\n", "\\x41", " ", "é", "😀", "key", "value", "{\"k\":1}"}
	if !noCRLF {
		pieces = append(pieces, "\r\n", "\r")
	}
	if !utf8Only {
		pieces = append(pieces, "\x00", "\xff", "\xc3")
	}
	word := func() string {
		var b strings.Builder
		for range 1 + rnd.IntN(6) {
			b.WriteString(pieces[rnd.IntN(len(pieces))])
		}
		return b.String()
	}
	seen := map[string]bool{}
	var rows []tablets.Entry
	for len(rows) < n {
		k := fmt.Sprintf("%s%04d", word(), rnd.IntN(10000))
		if seen[k] {
			continue
		}
		seen[k] = true
		rows = append(rows, tablets.Entry{Key: []byte(k), Value: []byte(word() + word())})
	}
	slices.SortFunc(rows, func(a, b tablets.Entry) int { return bytes.Compare(a.Key, b.Key) })
	return rows
}

func writeRows(t *testing.T, path string, f rowfmt.Format, rows []tablets.Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := rowfmt.NewWriter(&buf, rowfmt.Config{Format: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := w.Write(r.Key, r.Value); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if path != "" {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func readRows(t *testing.T, path string, f rowfmt.Format) []tablets.Entry {
	t.Helper()
	in, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	src, err := rowfmt.NewReader(in, rowfmt.Config{Format: f})
	if err != nil {
		t.Fatal(err)
	}
	var out []tablets.Entry
	for {
		r, err := src.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tablets.Entry{Key: bytes.Clone(r.Key), Value: bytes.Clone(r.Value)})
	}
}

// TestIngestFormatsRoundTrip, on a real cluster: a table ingested from
// TSV, CSV, JSON Lines and Parquet files of awkward rows, in shuffled
// order, scans back in the same format to exactly the rows (for the text
// formats, to the bytes the format's writer makes of the sorted rows).
// A TSV larger than the sort buffer of --memory-mib 32 goes through
// spilled runs and scans back exactly too.
func TestIngestFormatsRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl := clustertest.Start(t, ctx, localcluster.Config{Coordinators: 1, Hosts: 1, ServersPerHost: 1, Heartbeat: 200 * time.Millisecond})
	scanctl := clustertest.BuildTool(t, ctx, "scanctl")
	run := func(stdout string, args ...string) {
		t.Helper()
		c := exec.CommandContext(ctx, scanctl, append(args, "--nats", cl.NATSURL(), "--timeout", "30s")...)
		var e bytes.Buffer
		c.Stdout, c.Stderr = io.Discard, &e
		if stdout != "" {
			f, err := os.Create(stdout)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			c.Stdout = f
		}
		if err := c.Run(); err != nil {
			t.Fatalf("scanctl %q: %v: %s", args, err, e.String())
		}
	}
	dir := t.TempDir()
	for _, f := range rowfmt.Formats {
		t.Run(string(f), func(t *testing.T) {
			rows := awkwardRows(3000, f == rowfmt.CSV, f == rowfmt.CSV)
			shuffled := slices.Clone(rows)
			rand.New(rand.NewPCG(3, 4)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			in := filepath.Join(dir, "in."+string(f))
			writeRows(t, in, f, shuffled)
			table := "fmt_" + string(f)
			args := []string{"ingest", "--table", table, "--splits", "3", "--block-size", "4096"}
			if f == rowfmt.TSV {
				// Not by its extension: "in.tsv" would say TSV anyway.
				args = append(args, "--format", "tsv")
			} else if f != rowfmt.Parquet {
				args = append(args, "--format", string(f))
			}
			run("", append(args, in)...)
			out := filepath.Join(dir, "out."+string(f))
			run(out, "scan", "--table", table, "--format", string(f))
			got := readRows(t, out, f)
			if len(got) != len(rows) {
				t.Fatalf("scanned %d rows, want %d", len(got), len(rows))
			}
			for i := range rows {
				if !bytes.Equal(got[i].Key, rows[i].Key) || !bytes.Equal(got[i].Value, rows[i].Value) {
					t.Fatalf("row %d = %q=%q, want %q=%q", i, got[i].Key, got[i].Value, rows[i].Key, rows[i].Value)
				}
			}
			if f != rowfmt.Parquet {
				b, _ := os.ReadFile(out)
				if want := writeRows(t, "", f, rows); !bytes.Equal(b, want) {
					t.Fatalf("scan output differs from the %s of the sorted rows", f)
				}
			}
		})
	}
	t.Run("spilled", func(t *testing.T) {
		const n = 150000 // about 12 MB: the 8 MiB sort buffer spills twice
		var buf bytes.Buffer
		w := rowfmt.NewTSVWriter(&buf)
		for _, i := range rand.New(rand.NewPCG(5, 6)).Perm(n) {
			_ = w.Write(tablets.RowKey(i), tablets.RowValue(i))
		}
		_ = w.Close()
		in := filepath.Join(dir, "big.tsv")
		if err := os.WriteFile(in, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		run("", "ingest", "--table", "big", "--splits", "4", "--memory-mib", "32", "--temp-dir", t.TempDir(), in)
		out := filepath.Join(dir, "big.out")
		run(out, "scan", "--table", "big")
		if want := writeRows(t, "", rowfmt.TSV, tablets.GenerateRows(n)); !bytes.Equal(mustRead(t, out), want) {
			t.Fatal("the spilled table does not scan back to its rows")
		}
	})
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestIngestBadRowsNamed: a bad or duplicate row fails the ingest with
// one line naming its line number; the table is not created.
func TestIngestBadRowsNamed(t *testing.T) {
	nats := embeddedNATS(t)
	dir := t.TempDir()
	for _, tc := range []struct{ name, in, want string }{
		{"dup.tsv", "a\t1\nb\t2\na\t3\n", "line 3 repeats key a of line 1"},
		{"esc.tsv", "a\t1\nb\\q\t2\n", `line 2: key: unknown escape \q`},
		{"dup.csv", "key,value\nx,\"multi\nline\"\ny,2\nx,3\n", "line 5 repeats key x of line 2"},
		{"bad.jsonl", "{\"key\":\"a\",\"value\":\"b\"}\n{\"key\":\"a\"}\n", "line 2: no value"},
	} {
		path := filepath.Join(dir, tc.name)
		if err := os.WriteFile(path, []byte(tc.in), 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := runCapture("ingest", "--table", "bad", path, "--nats", nats, "--timeout", "30s")
		if code != 1 || !strings.Contains(errOut, tc.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%s: exit %d, stderr %q; want exit 1 and one line with %q", tc.name, code, errOut, tc.want)
		}
	}
	if out := scanctlOK(t, "tables", "--nats", nats, "--timeout", "30s"); strings.Contains(out, "bad") {
		t.Errorf("table created by failed ingests: %q", out)
	}
}

// TestWatchdogBoundsStalls: the ingest's --timeout watchdog never fires
// while progress comes more often than its limit, however long that
// goes on, and fires once progress stops for longer.
func TestWatchdogBoundsStalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fired := make(chan struct{}, 1)
		w := newWatchdog(time.Second, func() { fired <- struct{}{} })
		defer w.stop()
		for range 60 { // 30 s of progress, every 0.5 s
			time.Sleep(500 * time.Millisecond)
			w.kick()
		}
		synctest.Wait()
		select {
		case <-fired:
			t.Fatal("the watchdog fired while the ingest made progress")
		default:
		}
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		select {
		case <-fired:
		default:
			t.Fatal("the watchdog did not fire after a 1.5 s stall (limit 1 s)")
		}
	})
}
