package e2e

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

const table = "e2e"

type fixture struct {
	t     testing.TB
	cl    *localcluster.Cluster
	c     *client.Client
	truth []tablets.Entry
	meta  *messages.TableMeta // the table as ingested
}

// start brings up 3 hosts × 2 servers (real processes), ingests 100 000
// rows over 8 tablets into JetStream and connects a client.
func start(t testing.TB) *fixture { return startWith(t, 3, 2, 100000, 8) }

func startWith(t testing.TB, hosts, servers, rows, tabletsN int) *fixture {
	t.Helper()
	dataDir := t.TempDir()
	// HostMetrics: every scanserver serves /metrics and /debug/pprof/ on
	// an ephemeral loopback port (its ready file's http), so that
	// scripts/profile.sh can profile one under the benchmarks.
	cl := clustertest.Start(t, context.Background(), localcluster.Config{Hosts: hosts, ServersPerHost: servers, DataDir: dataDir,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 60 * time.Second, LogLevel: os.Getenv("E2E_CHILD_LOG_LEVEL"), HostMetrics: true})
	t.Cleanup(func() { logTails(t, dataDir) }) // runs first: the processes are still up
	f := &fixture{t: t, cl: cl, truth: tablets.GenerateRows(rows)}

	f.meta = ingest(t, cl.NATSURL(), f.truth, tabletsN)
	if len(f.meta.Tablets) < tabletsN {
		t.Fatalf("%d tablets", len(f.meta.Tablets))
	}
	f.c = clustertest.Client(t, context.Background(), cl.NATSURL(), func(cfg *client.Config) { cfg.StallTimeout = time.Second })
	return f
}

// logTails prints, when t failed, the last lines of every child's log
// (DataDir/logs), which the test's temporary directory takes with it; with
// E2E_LOGS=DIR it also copies the whole logs to DIR/TESTNAME/.
func logTails(t testing.TB, dataDir string) {
	if !t.Failed() {
		return
	}
	keep := os.Getenv("E2E_LOGS")
	logs, _ := filepath.Glob(filepath.Join(dataDir, "logs", "*.log"))
	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		if keep != "" {
			dir := filepath.Join(keep, strings.ReplaceAll(t.Name(), "/", "_"))
			if err := os.MkdirAll(dir, 0o755); err == nil {
				_ = os.WriteFile(filepath.Join(dir, filepath.Base(l)), data, 0o644)
			}
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		lines = lines[max(0, len(lines)-40):]
		t.Logf("last %d lines of %s:\n%s", len(lines), filepath.Base(l), strings.Join(lines, "\n"))
	}
}

// ingest writes rows as table into the cluster behind natsURL (blocks and
// metadata in JetStream) over n tablets.
func ingest(t testing.TB, natsURL string, rows []tablets.Entry, n int) *messages.TableMeta {
	t.Helper()
	return clustertest.Ingest(t, context.Background(), natsURL, nil, table, rows, n)
}

// scan scans truth[a:b] and returns an error unless the rows are exactly
// those, in order, each once: a wrong answer (wrapping nothing) or else a
// failed scan (wrapping the scan's error).
func (f *fixture) scan(ctx context.Context, a, b int) error {
	wrong, failed := f.checkScan(ctx, a, b)
	if wrong != nil {
		return wrong
	}
	return failed
}

// checkScan scans truth[a:b] and tells a wrong answer from a failed scan
// (clustertest.CheckScan).
func (f *fixture) checkScan(ctx context.Context, a, b int) (wrong, failed error) {
	return clustertest.CheckScan(ctx, f.c, table, f.truth, a, b, client.ScanOptions{})
}

// randomRange: mostly short scans, some long, some spanning many tablets.
func randomRange(r *rand.Rand, n int) (int, int) {
	a := r.IntN(n)
	l := 1 + r.IntN(200)
	switch r.IntN(10) {
	case 0:
		l = 1 + r.IntN(30000)
	case 1:
		l = 0
	}
	return a, min(a+l, n)
}

// run runs n random scans on `workers` goroutines; onProgress is called
// with the number done after each scan.
func (f *fixture) run(n, workers int, seed uint64, onProgress func(done int64)) []error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var (
		mu   sync.Mutex
		errs []error
		done atomic.Int64
		wg   sync.WaitGroup
	)
	jobs := make(chan [2]int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if err := f.scan(ctx, j[0], j[1]); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
				d := done.Add(1)
				if onProgress != nil {
					onProgress(d)
				}
			}
		}()
	}
	r := rand.New(rand.NewPCG(seed, 1))
	for i := 0; i < n; i++ {
		a, b := randomRange(r, len(f.truth))
		jobs <- [2]int{a, b}
	}
	close(jobs)
	wg.Wait()
	return errs
}

func TestRandomScansMatchGroundTruth(t *testing.T) {
	f := start(t)
	if err := f.scan(context.Background(), 0, len(f.truth)); err != nil {
		t.Fatal(err)
	}
	errs := f.run(200, 4, 1, nil)
	for _, err := range errs {
		t.Error(err)
	}
	st, err := f.cl.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.ScansFailed != 0 {
		t.Fatalf("coordinator reports %d failed scans", st.ScansFailed)
	}
	// The floor under a scan: every scan-server process answers a ping
	// (its echo actor); a process without one (the coordinator) does not.
	for i := 0; i < f.cl.Hosts(); i++ {
		if d, err := f.c.Ping(context.Background(), f.cl.Host(i).Ready.Actor); err != nil || d <= 0 {
			t.Fatalf("ping host %d: %v, %v", i, d, err)
		}
	}
	if _, err := f.c.Ping(context.Background(), f.cl.CoordinatorAddr()); err == nil {
		t.Fatal("ping of the coordinator, which has no echo actor, succeeded")
	}

	// Faults mid-run: one scanserver process stopped (hung), another killed.
	var once1, once2 sync.Once
	errs = f.run(200, 4, 2, func(done int64) {
		if done == 40 {
			once1.Do(func() {
				if err := f.cl.Signal(0, syscall.SIGSTOP); err != nil {
					t.Error(err)
				}
			})
		}
		if done == 80 {
			once2.Do(func() {
				if err := f.cl.Kill(1); err != nil {
					t.Error(err)
				}
			})
		}
	})
	st, err = f.cl.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_ = f.cl.Signal(0, syscall.SIGCONT)
	for _, err := range errs {
		t.Error(err)
	}
	killed := localcluster.HostName(1)
	for _, s := range st.Servers {
		t.Logf("%s %s alive=%v dispatched=%d timeouts=%d errors=%.0f", s.Host, s.Id, s.Alive, s.Dispatched, s.Timeouts, s.Errors)
		if s.Host == killed && s.Alive {
			t.Errorf("killed host %s still alive in the coordinator's view", killed)
		}
	}
	t.Logf("coordinator: dispatches=%d timeouts=%d busy=%d failed=%d", st.Dispatches, st.Timeouts, st.Busy, st.ScansFailed)
	// And the survivors still serve full scans.
	if err := f.scan(context.Background(), 0, len(f.truth)); err != nil {
		t.Fatal(err)
	}
}
