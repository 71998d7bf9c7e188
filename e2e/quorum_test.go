package e2e

import (
	"context"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

// scanResult is one scan of quorumScans: when it started and ended, and
// its error (nil: exactly the rows asked for).
type scanResult struct {
	start, end time.Time
	err        error
}

// TestQuorumLossNamedEarly: three coordinators (each a node of the
// embedded NATS cluster) and four workers of one client scanning back to
// back; two of the coordinators are SIGSTOPped (the NATS cluster loses
// its quorum) and, E2E_PAUSE later (default 20s), SIGCONTed. A scan
// fails with ErrNoCoordinator within 10 s of the pause (docs/coordinators.md,
// "Losing two of three": the paused nodes fall silent for 2 s, the quorum
// is named after 1 s more) rather than hanging until its 30 s deadline, and scans
// started 5 s after SIGCONT succeed: no failures linger once the quorum
// is back.
func TestQuorumLossNamedEarly(t *testing.T) {
	clustertest.SkipShort(t)
	pause := 20 * time.Second
	if s := os.Getenv("E2E_PAUSE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("E2E_PAUSE %q: %v", s, err)
		}
		pause = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute+pause)
	defer cancel()
	cl := clustertest.Start(t, ctx, localcluster.Config{Coordinators: 3, Hosts: 2, ServersPerHost: 1,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 60 * time.Second})
	truth := tablets.GenerateRows(20000)
	ingest(t, cl.NATSURL(), truth, 4)
	coords := cl.CoordinatorAddrs()
	c := clustertest.Client(t, ctx, cl.NATSURL(), func(cfg *client.Config) {
		cfg.Coordinators = coords
		cfg.StallTimeout = time.Second
	})
	if wrong, failed := clustertest.CheckScan(ctx, c, table, truth, 0, len(truth), client.ScanOptions{}); wrong != nil || failed != nil {
		t.Fatalf("scan before the pause: %v %v", wrong, failed)
	}

	var mu sync.Mutex
	var results []scanResult
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				a := (w*5000 + i*997) % (len(truth) - 1000)
				sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
				r := scanResult{start: time.Now()}
				wrong, failed := clustertest.CheckScan(sctx, c, table, truth, a, a+1000, client.ScanOptions{})
				scancel()
				r.end = time.Now()
				if wrong != nil {
					t.Errorf("wrong answer: %v", wrong)
				}
				r.err = failed
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
				if failed != nil {
					// Pace a client that fails at once (every coordinator
					// lost): the outcome, not the rate, is checked.
					select {
					case <-time.After(50 * time.Millisecond):
					case <-stop:
					}
				}
			}
		}()
	}
	wait := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	wait(2 * time.Second)
	stopped := time.Now()
	for _, i := range []int{1, 2} {
		if err := cl.SignalCoordinator(i, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, i := range []int{1, 2} {
			_ = cl.SignalCoordinator(i, syscall.SIGCONT)
		}
	}()
	wait(pause)
	resumed := time.Now()
	for _, i := range []int{1, 2} {
		if err := cl.SignalCoordinator(i, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	wait(25 * time.Second)
	close(stop)
	wg.Wait()

	var firstErr time.Duration = -1
	var firstErrMsg error
	okBefore, failedDuring, failedAfter, okAfter := 0, 0, 0, 0
	var lastFailAfter, firstOKAfter time.Duration = -1, -1
	for _, r := range results {
		switch {
		case r.end.Before(stopped):
			if r.err == nil {
				okBefore++
			}
		case r.err != nil && (firstErr < 0 || r.end.Sub(stopped) < firstErr):
			firstErr, firstErrMsg = r.end.Sub(stopped), r.err
		}
		if r.end.After(stopped) && r.end.Before(resumed) && r.err != nil {
			failedDuring++
		}
		if r.end.After(resumed) {
			if r.err != nil {
				failedAfter++
				if d := r.end.Sub(resumed); d > lastFailAfter {
					lastFailAfter = d
				}
			} else {
				okAfter++
				if d := r.end.Sub(resumed); firstOKAfter < 0 || d < firstOKAfter {
					firstOKAfter = d
				}
			}
		}
	}
	t.Logf("pause %v: first error %v after the pause (%v); %d failed during it; after SIGCONT %d failed (last %v after), %d succeeded (first %v after); %d succeeded before",
		pause, firstErr.Round(time.Millisecond), firstErrMsg, failedDuring, failedAfter, lastFailAfter.Round(time.Millisecond), okAfter, firstOKAfter.Round(time.Millisecond), okBefore)
	if firstErr < 0 || firstErr > 10*time.Second {
		t.Errorf("first error %v after two of three coordinators stopped, want within 10s", firstErr.Round(time.Millisecond))
	}
	// Scans started 5 s after the quorum is back (JetStream elects its
	// leaders; the client finds its coordinators again) succeed.
	late := 0
	for _, r := range results {
		if r.start.After(resumed.Add(5*time.Second)) && r.err != nil {
			late++
			if late == 1 {
				t.Logf("a scan started 5s after SIGCONT failed: %v", r.err)
			}
		}
	}
	if late > 0 || okAfter == 0 {
		t.Errorf("%d scans started 5s after SIGCONT failed, %d succeeded after it", late, okAfter)
	}
}
