// Package clustertest is the test support for tests that run scanplane's
// real processes: it builds the coordinator and scanserver from the source
// tree once per test binary, starts a localcluster for a test (skipped
// under -short, stopped when the test ends), builds other commands of the
// tree, ingests rows through NATS, starts a client, checks a scan against
// the ground truth, and reads an HTTP endpoint with a bearer token or a
// role's certificate. Only _test.go files import it.
package clustertest

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// DefaultTimeout bounds a build or a cluster start whose context has no
// deadline, so that a hung one fails the test instead of waiting for go
// test's -timeout.
const DefaultTimeout = 5 * time.Minute

// bounded returns ctx, with DefaultTimeout if it has no deadline.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, DefaultTimeout)
}

// SkipShort skips t under -short: for a test that does costly work
// before it calls Start.
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real processes (skipped with -short)")
	}
}

var bins struct {
	mu  sync.Mutex
	dir string
}

// Binaries returns the directory of the coordinator and scanserver built
// from the source tree the working directory is in
// (localcluster.BuildFromSource), built at the first call of the test
// binary that succeeds; a failed build fails t and is tried again by the
// next call.
func Binaries(t testing.TB, ctx context.Context) string {
	t.Helper()
	bins.mu.Lock()
	defer bins.mu.Unlock()
	if bins.dir == "" {
		ctx, cancel := bounded(ctx)
		defer cancel()
		dir, err := localcluster.BuildFromSource(ctx)
		if err != nil {
			t.Fatal(err)
		}
		bins.dir = dir
	}
	return bins.dir
}

// Start skips t under -short, else starts the cluster cfg describes and
// closes it when t ends (t.Cleanup; a test, not a benchmark, logs how
// long the close took). An empty cfg.BinDir is Binaries, an empty
// cfg.DataDir a new t.TempDir(). ctx bounds the build and the start
// (DefaultTimeout if it has no deadline); a failure fails t.
func Start(t testing.TB, ctx context.Context, cfg localcluster.Config) *localcluster.Cluster {
	t.Helper()
	SkipShort(t)
	return StartAlways(t, ctx, cfg)
}

// StartAlways is Start that runs under -short too: for the integration
// tests that `go test -short` keeps (CONTRIBUTING.md, Tests).
func StartAlways(t testing.TB, ctx context.Context, cfg localcluster.Config) *localcluster.Cluster {
	t.Helper()
	ctx, cancel := bounded(ctx)
	defer cancel()
	if cfg.BinDir == "" {
		cfg.BinDir = Binaries(t, ctx)
	}
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	cl, err := localcluster.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	logs := filepath.Join(cfg.DataDir, "logs")
	t.Cleanup(func() {
		if t.Failed() {
			// The data directory is usually a t.TempDir(), gone after
			// the test: what the processes logged is printed here.
			t.Logf("the cluster's process logs, last %d lines each (no DEBUG):\n%s", failedLogLines, logTails(logs, failedLogLines))
		}
		t0 := time.Now()
		cl.Close()
		if _, bench := t.(*testing.B); !bench { // a benchmark's log is printed always, amid its results
			t.Logf("cluster closed in %v", time.Since(t0).Round(time.Millisecond))
		}
	})
	return cl
}

// failedLogLines is how many lines of each process's log a failed test
// prints.
const failedLogLines = 40

// logTails returns, for every *.log file in dir (a cluster's logs
// directory), its name and its last n lines that are not DEBUG.
func logTails(dir string, n int) string {
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintf(&b, "== %s: %v\n", filepath.Base(f), err)
			continue
		}
		var lines []string
		for _, l := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
			if l != "" && !strings.Contains(l, "level=DEBUG") {
				lines = append(lines, l)
			}
		}
		fmt.Fprintf(&b, "== %s (%d lines, the last %d):\n", filepath.Base(f), len(lines), min(n, len(lines)))
		for _, l := range lines[max(0, len(lines)-n):] {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// BuildTool builds the command ./cmd/NAME of the source tree the working
// directory is in into a new t.TempDir() and returns its path. ctx bounds
// the build (DefaultTimeout if it has no deadline); a failure fails t.
func BuildTool(t testing.TB, ctx context.Context, name string) string {
	t.Helper()
	ctx, cancel := bounded(ctx)
	defer cancel()
	root, err := localcluster.SourceRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator), "./cmd/"+name)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/%s: %v\n%s", name, err, out)
	}
	return filepath.Join(dir, name)
}

// Ingest writes rows as table into the JetStream behind natsURL over n
// tablets (otherwise tablets.DefaultIngestConfig), connecting with tlsCfg
// (nil = plain), and returns the table's metadata; a failure fails t.
func Ingest(t testing.TB, ctx context.Context, natsURL string, tlsCfg *tls.Config, table string, rows []tablets.Entry, n int) *messages.TableMeta {
	t.Helper()
	icfg := tablets.DefaultIngestConfig()
	icfg.Tablets = n
	return IngestOn(t, ctx, Connect(t, ctx, natsURL, tlsCfg), table, rows, icfg)
}

// IngestOn writes rows as table with icfg into the block and metadata
// stores of conn and returns the table's metadata; a failure fails t.
func IngestOn(t testing.TB, ctx context.Context, conn *bus.Conn, table string, rows []tablets.Entry, icfg tablets.IngestConfig) *messages.TableMeta {
	t.Helper()
	store, meta := Stores(t, ctx, conn)
	tm, err := tablets.Ingest(ctx, store, meta, table, rows, icfg)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// Connect connects to the NATS behind natsURL with tlsCfg (nil = plain)
// and closes the connection when t ends; a failure fails t.
func Connect(t testing.TB, ctx context.Context, natsURL string, tlsCfg *tls.Config) *bus.Conn {
	t.Helper()
	bc := bus.DefaultConfig()
	bc.URL, bc.TLS = natsURL, tlsCfg
	conn, err := bus.Connect(ctx, bc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}

// Stores returns conn's block and metadata stores; a failure fails t.
func Stores(t testing.TB, ctx context.Context, conn *bus.Conn) (*bus.BlockStore, *bus.MetaStore) {
	t.Helper()
	store, err := conn.BlockStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := conn.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return store, meta
}

// Client starts a client of the cluster behind natsURL, with
// client.DefaultConfig changed by mod (if not nil), and closes it when t
// ends (closing it earlier is fine); a failure fails t.
func Client(t testing.TB, ctx context.Context, natsURL string, mod func(*client.Config)) *client.Client {
	t.Helper()
	cfg := client.DefaultConfig()
	cfg.NATSURL = natsURL
	if mod != nil {
		mod(&cfg)
	}
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// CheckScan scans truth[a:b] of table through c (truth: the table's rows
// in key order) and tells a wrong answer (a row that is not the next row
// of truth, an extra row, or fewer rows with no error: data lost) from a
// failed scan (an error after only right rows; it wraps the scan's error,
// a wrong answer wraps none). Both nil: exactly truth[a:b], in order, each
// once.
func CheckScan(ctx context.Context, c *client.Client, table string, truth []tablets.Entry, a, b int, opts client.ScanOptions) (wrong, failed error) {
	rng := tablets.Range{}
	if a > 0 {
		rng.Start = truth[a].Key
	}
	if b < len(truth) {
		rng.End = truth[b].Key
	}
	rows := c.Scan(ctx, table, rng, opts)
	defer rows.Close()
	i := a
	for rows.Next() {
		r := rows.Row()
		if i >= b {
			return fmt.Errorf("scan %s: extra row %q", rng, r.Key), nil
		}
		if !bytes.Equal(r.Key, truth[i].Key) || !bytes.Equal(r.Value, truth[i].Value) {
			return fmt.Errorf("scan %s: row %d is %q, want %q", rng, i-a, r.Key, truth[i].Key), nil
		}
		i++
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("scan %s after %d of %d rows: %w", rng, i-a, b-a, err)
	}
	if i != b {
		return fmt.Errorf("scan %s: %d rows and no error, want %d", rng, i-a, b-a), nil
	}
	return nil, nil
}

// HTTPClient is secrets.HTTPClient(dir, role) with a 10 s timeout,
// its idle connections closed when t ends; an error fails t.
func HTTPClient(t testing.TB, dir, role string) *http.Client {
	t.Helper()
	c, err := secrets.HTTPClient(dir, role)
	if err != nil {
		t.Fatal(err)
	}
	c.Timeout = 10 * time.Second
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// Get sends GET url with c, with the header "Authorization: Bearer
// BEARER" unless bearer is empty, and returns the response's status code
// and body. err is the request's or the body's error.
func Get(ctx context.Context, c *http.Client, url, bearer string) (code int, body string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}
