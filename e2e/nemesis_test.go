package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

var (
	nemesisDuration = flag.Duration("nemesis.duration", 2*time.Minute, "how long TestNemesis injects faults")
	nemesisSeed     = flag.Uint64("nemesis.seed", 0, "TestNemesis's random seed (0: from the clock, logged)")
)

// faultKinds are what the nemesis does, one at a time.
var faultKinds = []string{"kill coordinator", "pause coordinator", "kill host", "pause host", "reload"}

// nemesisFault is one fault: its kind, target and when it ran.
type nemesisFault struct {
	kind, target string
	start, end   time.Time // end: the cluster was whole again
}

// nemesisScan is one scan a worker ran.
type nemesisScan struct {
	start, end    time.Time
	wrong, failed error
}

// TestNemesis runs scanctl up's cluster (three coordinators under
// supervision, three hosts of two scan servers), four clients running
// verified random scans, and a nemesis that for -nemesis.duration kills
// and pauses coordinators and hosts at random (one at a time, so never
// two coordinators at once) and reloads the profiles. Every scan must
// return exactly the rows of its range (0 wrong) and succeed (0 failed);
// the longest time without a completed scan is reported per fault kind.
func TestNemesis(t *testing.T) {
	clustertest.SkipShort(t)
	seed := *nemesisSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("nemesis seed %d, duration %v", seed, *nemesisDuration)
	rng := rand.New(rand.NewPCG(seed, seed>>1|1))
	ctx, cancel := context.WithTimeout(context.Background(), *nemesisDuration+5*time.Minute)
	defer cancel()
	profiles := filepath.Join(t.TempDir(), "profiles.json")
	if err := os.WriteFile(profiles, []byte(`[{"isDefault": true, "policy": "adaptive",
  "attemptPlans": [{"servers": "1", "busyTimeout": "33ms"}, {"servers": "100%", "busyTimeout": "100ms"}]}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	cl := clustertest.Start(t, ctx, localcluster.Config{Coordinators: 3, Hosts: 3, ServersPerHost: 2, Profiles: profiles, DataDir: dataDir,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 90 * time.Second})
	t.Cleanup(func() { logTails(t, dataDir) }) // runs first: the processes are still up
	superviseCtx, stopSupervise := context.WithCancel(ctx)
	supervised := make(chan error, 1)
	go func() {
		supervised <- cl.Supervise(superviseCtx, localcluster.SuperviseConfig{Out: logWriter{t}, MinBackoff: 200 * time.Millisecond, MaxBackoff: 2 * time.Second})
	}()
	defer func() { stopSupervise(); <-supervised }()
	truth := tablets.GenerateRows(50000)
	ingest(t, cl.NATSURL(), truth, 8)

	// Four clients scan until the nemesis is done.
	var (
		mu    sync.Mutex
		scans []nemesisScan
		wg    sync.WaitGroup
	)
	scanCtx, stopScans := context.WithCancel(ctx)
	// What the clients saw of the coordinators (lost, up again), shown
	// when a scan failed.
	var clientLog lockedBuffer
	clientLogger := slog.New(slog.NewTextHandler(&clientLog, &slog.HandlerOptions{Level: slog.LevelInfo}))
	clients := make([]*client.Client, 4)
	for w := range clients {
		clients[w] = clustertest.Client(t, ctx, cl.NATSURL(), func(c *client.Config) {
			c.StallTimeout, c.Logger = time.Second, clientLogger.With("client", w)
		})
	}
	control := clustertest.Client(t, ctx, cl.NATSURL(), nil)
	for w, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed+uint64(w), 7))
			for scanCtx.Err() == nil {
				a, b := randomRange(r, len(truth))
				sctx, scancel := context.WithTimeout(scanCtx, 60*time.Second)
				start := time.Now()
				wrong, failed := clustertest.CheckScan(sctx, c, table, truth, a, b, client.ScanOptions{})
				scancel()
				if scanCtx.Err() != nil {
					return // stopped mid-scan: not a result
				}
				mu.Lock()
				scans = append(scans, nemesisScan{start: start, end: time.Now(), wrong: wrong, failed: failed})
				mu.Unlock()
			}
		}()
	}

	var faults []nemesisFault
	deadline := time.Now().Add(*nemesisDuration)
	for time.Now().Before(deadline) {
		f := nemesisFault{kind: faultKinds[rng.IntN(len(faultKinds))], start: time.Now()}
		pause := time.Duration(1+rng.IntN(5)) * time.Second
		switch f.kind {
		case "kill coordinator":
			i := rng.IntN(cl.Coordinators())
			f.target = fmt.Sprintf("c%d", i)
			if err := cl.KillCoordinator(i); err != nil {
				t.Fatal(err)
			}
		case "pause coordinator":
			i := rng.IntN(cl.Coordinators())
			f.target = fmt.Sprintf("c%d for %v", i, pause)
			nemesisPause(t, ctx, func(sig syscall.Signal) error { return cl.SignalCoordinator(i, sig) }, pause)
		case "kill host":
			i := rng.IntN(cl.Hosts())
			f.target = fmt.Sprintf("h%d", i)
			if err := cl.Kill(i); err != nil {
				t.Fatal(err)
			}
		case "pause host":
			i := rng.IntN(cl.Hosts())
			f.target = fmt.Sprintf("h%d for %v", i, pause)
			nemesisPause(t, ctx, func(sig syscall.Signal) error { return cl.Signal(i, sig) }, pause)
		case "reload":
			f.target = "all coordinators"
			// ReloadAll asks the coordinators that hold a lease. Right
			// after a NATS node was lost, JetStream elects the lease
			// bucket's leader for seconds, a lease may lapse, and its
			// coordinator rejoins under a new one: ask again until every
			// coordinator answers.
			var res []client.ReloadResult
			var err error
			asks := 0
			testutil.Poll(60*time.Second, func() bool {
				asks++
				res, err = control.ReloadAll(ctx)
				return err == nil && len(res) == cl.Coordinators()
			})
			if asks > 1 {
				t.Logf("reload: every coordinator answered at the %dth ask", asks)
			}
			if err != nil || len(res) != cl.Coordinators() {
				t.Fatalf("reload: %v, %v; want every coordinator's answer within 60 s", res, err)
			}
			for _, r := range res {
				if r.Err != nil {
					t.Fatalf("reload: %s: %v", r.Coordinator, r.Err)
				}
			}
		}
		t.Logf("%s %s %s (%v)", f.start.Format("15:04:05.000"), f.kind, f.target, time.Since(f.start).Round(time.Millisecond))
		// The cluster is whole again before the next fault.
		if err := nemesisWhole(ctx, cl); err != nil {
			t.Fatalf("after %s %s: %v", f.kind, f.target, err)
		}
		f.end = time.Now()
		faults = append(faults, f)
	}
	stopScans()
	wg.Wait()
	report := nemesisReport(faults, scans)
	t.Log("\n" + report)
	var wrong, failed []string
	for _, s := range scans {
		switch {
		case s.wrong != nil:
			wrong = append(wrong, s.wrong.Error())
		case s.failed != nil:
			failed = append(failed, fmt.Sprintf("%s (+%v): %v", s.start.Format("15:04:05.000"), s.end.Sub(s.start).Round(time.Millisecond), s.failed))
		}
	}
	if len(wrong) > 0 {
		t.Errorf("%d scans returned wrong rows, first: %s", len(wrong), wrong[0])
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d scans failed:\n%s", len(failed), len(scans), strings.Join(failed[:min(len(failed), 10)], "\n"))
		lines := strings.Split(strings.TrimSpace(clientLog.String()), "\n")
		t.Logf("last %d lines the clients logged:\n%s", min(len(lines), 80), strings.Join(lines[max(len(lines)-80, 0):], "\n"))
	}
	if len(scans) == 0 {
		t.Fatal("no scan completed")
	}
}

// logWriter writes each line to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// nemesisPause stops a process with SIGSTOP and continues it after d.
func nemesisPause(t *testing.T, ctx context.Context, signal func(syscall.Signal) error, d time.Duration) {
	t.Helper()
	if err := signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-time.After(d): // the fault's length, a scenario parameter
	case <-ctx.Done():
	}
	if err := signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// nemesisWhole waits until every host process runs (supervision restarts
// a killed one after a back-off) and every coordinator runs and sees all
// six scan servers.
func nemesisWhole(ctx context.Context, cl *localcluster.Cluster) error {
	running := func() bool {
		for i := range cl.Hosts() {
			if p := cl.Host(i); p == nil || !p.Alive() {
				return false
			}
		}
		return true
	}
	if !testutil.Poll(90*time.Second, running) {
		return errors.New("a host process is not running 90 s after the fault")
	}
	for i := range cl.Coordinators() {
		if err := cl.WaitCoordinatorBack(ctx, i, 6, 90*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// nemesisReport tabulates, per fault kind: faults, scans that started
// during them, failed, wrong, and the longest gap without a completed
// scan inside a fault of that kind.
func nemesisReport(faults []nemesisFault, scans []nemesisScan) string {
	ends := make([]time.Time, 0, len(scans))
	for _, s := range scans {
		if s.wrong == nil && s.failed == nil {
			ends = append(ends, s.end)
		}
	}
	sort.Slice(ends, func(i, j int) bool { return ends[i].Before(ends[j]) })
	type row struct {
		faults, scans, failed, wrong int
		gap                          time.Duration
	}
	rows := map[string]*row{}
	for _, k := range faultKinds {
		rows[k] = &row{}
	}
	for _, f := range faults {
		r := rows[f.kind]
		r.faults++
		for _, s := range scans {
			if s.start.Before(f.start) || s.start.After(f.end) {
				continue
			}
			r.scans++
			if s.wrong != nil {
				r.wrong++
			} else if s.failed != nil {
				r.failed++
			}
		}
		// The longest stretch in [start, end] without a completed scan.
		last := f.start
		for _, e := range ends {
			if e.Before(f.start) {
				continue
			}
			if e.After(f.end) {
				break
			}
			r.gap = max(r.gap, e.Sub(last))
			last = e
		}
		r.gap = max(r.gap, f.end.Sub(last))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| fault | faults | scans during | failed | wrong | longest gap |\n|---|---|---|---|---|---|\n")
	total := row{}
	for _, k := range faultKinds {
		r := rows[k]
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %v |\n", k, r.faults, r.scans, r.failed, r.wrong, r.gap.Round(10*time.Millisecond))
		total.faults += r.faults
	}
	failed, wrong := 0, 0
	for _, s := range scans {
		if s.wrong != nil {
			wrong++
		} else if s.failed != nil {
			failed++
		}
	}
	fmt.Fprintf(&b, "| all | %d | %d | %d | %d | |\n", total.faults, len(scans), failed, wrong)
	return b.String()
}
