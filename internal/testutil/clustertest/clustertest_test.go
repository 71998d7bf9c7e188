package clustertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

// TestGet: Get sends the bearer token only when one is given and returns
// the status and body the server wrote.
func TestGet(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "method "+r.Method, http.StatusMethodNotAllowed)
			return
		}
		if h, ok := r.Header["Authorization"]; ok {
			if len(h) != 1 || h[0] != "Bearer tok" {
				http.Error(w, "bad header", http.StatusForbidden)
				return
			}
			_, _ = io.WriteString(w, "hello "+r.URL.Path)
			return
		}
		http.Error(w, "no token", http.StatusUnauthorized)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		bearer string
		code   int
		body   string
	}{
		{"", http.StatusUnauthorized, "no token\n"},
		{"tok", http.StatusOK, "hello /p"},
		{"other", http.StatusForbidden, "bad header\n"},
	} {
		code, body, err := Get(context.Background(), srv.Client(), srv.URL+"/p", tc.bearer)
		if err != nil || code != tc.code || body != tc.body {
			t.Errorf("bearer %q: %d %q %v; want %d %q", tc.bearer, code, body, err, tc.code, tc.body)
		}
	}
	if _, _, err := Get(context.Background(), srv.Client(), "http://\x7f", ""); err == nil {
		t.Error("a bad URL: no error")
	}
}

// TestCheckScan runs a one-host cluster with a small table: CheckScan
// passes the table's own rows, calls a changed value, a missing row and an
// extra row wrong answers (errors that wrap nothing), and a scan of an
// unknown table a failed scan (an error wrapping the scan's).
func TestCheckScan(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := Start(t, ctx, localcluster.Config{Hosts: 1, ServersPerHost: 1, Heartbeat: 200 * time.Millisecond})
	truth := tablets.GenerateRows(300)
	if tm := Ingest(t, ctx, cl.NATSURL(), nil, "ct", truth, 3); len(tm.GetTablets()) != 3 {
		t.Fatalf("%d tablets, want 3", len(tm.GetTablets()))
	}
	c := Client(t, ctx, cl.NATSURL(), nil)
	for _, r := range [][2]int{{0, 300}, {0, 1}, {17, 250}, {299, 300}} {
		if wrong, failed := CheckScan(ctx, c, "ct", truth, r[0], r[1], client.ScanOptions{}); wrong != nil || failed != nil {
			t.Fatalf("rows %v: %v, %v", r, wrong, failed)
		}
	}
	changed := append([]tablets.Entry(nil), truth...)
	changed[100] = tablets.Entry{Key: truth[100].Key, Value: []byte("other")}
	// Without truth[151], [149, 151) of it is the keys truth[149] to
	// truth[152], three rows of the table, not two.
	missing := append(append([]tablets.Entry(nil), truth[:151]...), truth[152:]...)
	// A row after the table's last: the scan returns all the table has.
	longer := append(append([]tablets.Entry(nil), truth...), tablets.Entry{Key: append(append([]byte(nil), truth[299].Key...), 0), Value: []byte("x")})
	for _, tc := range []struct {
		name  string
		truth []tablets.Entry
		a, b  int
		want  string
	}{
		{"changed value", changed, 0, 300, "row 100 is"},
		{"extra row", missing, 149, 151, "extra row"},
		{"row the truth lacks", missing, 0, 299, "row 151 is"},
		{"rows lost", longer, 0, 301, "300 rows and no error, want 301"},
	} {
		wrong, failed := CheckScan(ctx, c, "ct", tc.truth, tc.a, tc.b, client.ScanOptions{})
		if wrong == nil || !strings.Contains(wrong.Error(), tc.want) || errors.Unwrap(wrong) != nil || failed != nil {
			t.Errorf("%s: wrong %v, failed %v; want a wrong answer saying %q", tc.name, wrong, failed, tc.want)
		}
	}
	if wrong, failed := CheckScan(ctx, c, "nope", truth, 0, 300, client.ScanOptions{}); wrong != nil || failed == nil || errors.Unwrap(failed) == nil {
		t.Errorf("unknown table: wrong %v, failed %v; want a failed scan", wrong, failed)
	}
}

// TestLogTails: a failed test prints each process log's last lines
// without DEBUG, named by file.
func TestLogTails(t *testing.T) {
	dir := t.TempDir()
	var c strings.Builder
	for i := range 50 {
		fmt.Fprintf(&c, "time=x level=INFO msg=line%d\n", i)
		fmt.Fprintf(&c, "time=x level=DEBUG msg=debug%d\n", i)
	}
	if err := os.WriteFile(filepath.Join(dir, "coordinator1.log"), []byte(c.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "host1.log"), []byte("level=WARN msg=only\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got := logTails(dir, 3)
	want := "== coordinator1.log (50 lines, the last 3):\n" +
		"time=x level=INFO msg=line47\ntime=x level=INFO msg=line48\ntime=x level=INFO msg=line49\n" +
		"== host1.log (1 lines, the last 1):\nlevel=WARN msg=only\n"
	if got != want {
		t.Fatalf("logTails:\n%s\nwant:\n%s", got, want)
	}
}
