package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/wire"
)

// flooder is a client that asks for scans and never acknowledges a batch:
// an attacker (roles_attacker_test.go) on its own address, named as the
// client of every ScanRequest it sends, that swallows what arrives.
type flooder struct {
	a *attacker
}

func newFlooder(t *testing.T) *flooder { return &flooder{a: newAttacker(t, nil)} }

// batches is the number of RowBatches that reached the flooder.
func (f *flooder) batches() int { return f.a.received("scanplane.internal.v1.RowBatch") }

// flood sends ScanRequests for the tablets of tm to the router at addr,
// rate a second, for d.
func (f *flooder) flood(addr string, tm *messages.TableMeta, rate int, d time.Duration) int {
	router := actor.NewPID(addr, wire.RouterName)
	client := wire.FromPID(f.a.pid("sink"))
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.Now().Add(d)
	n := 0
	for time.Now().Before(end) {
		<-tick.C
		ref := tm.Tablets[n%len(tm.Tablets)].GetRef()
		_ = f.a.send(router, nil, &messages.ScanRequest{RequestId: fmt.Sprintf("flood-%d", n), Client: client, Tablet: ref,
			Range: &messages.KeyRange{}, TimeoutMs: 300000}) // a broken stream opens again at the next send
		n++
	}
	return n
}

// TestStartScanFloodEndsWithIt: a client that asks for scans at a high
// rate and never acknowledges a batch holds no scan server's workers or
// queue beyond a bound, so that scans of an honest client complete again
// within 5 s of the flood's end. The honest scan's own time, taken
// before the flood on the same machine, is added to that bound and
// bounds each scan (at least 3 s, 4 times it), so that a slow machine
// is not taken for a held server. E2E_FLOOD sets the flood's length
// (default 10s; the hardening goal is stated for 20s).
func TestStartScanFloodEndsWithIt(t *testing.T) {
	ctx := context.Background()
	clustertest.SkipShort(t)
	floodFor := 10 * time.Second
	if s := os.Getenv("E2E_FLOOD"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("E2E_FLOOD %q: %v", s, err)
		}
		floodFor = d
	}
	fx := startWith(t, 2, 2, 100000, 4)
	tm := fx.meta
	if err := fx.scan(ctx, 0, len(fx.truth)); err != nil {
		t.Fatalf("scan before the flood: %v", err)
	}
	var base time.Duration // the slowest of three honest scans before the flood
	for range 3 {
		t0 := time.Now()
		if wrong, err := clustertest.CheckScan(ctx, fx.c, table, fx.truth, 1000, 31000, client.ScanOptions{}); wrong != nil || err != nil {
			t.Fatalf("scan before the flood: wrong %v, err %v", wrong, err)
		}
		base = max(base, time.Since(t0))
	}
	scanTimeout, bound := max(3*time.Second, 4*base), 5*time.Second+base

	fl := newFlooder(t)
	start := time.Now()
	floodEnd := make(chan time.Time, 1)
	go func() {
		n := fl.flood(fx.cl.CoordinatorAddr(), tm, 200, floodFor)
		t.Logf("flood: %d ScanRequests in %v", n, floodFor)
		floodEnd <- time.Now()
	}()

	// Honest scans of one tablet's rows (beyond a window of batches),
	// each bounded, back to back, until 20 in a row succeed after the
	// flood ended.
	var end time.Time
	var recovered time.Duration
	okRun, failed, okDuring := 0, 0, 0
	if !testutil.Poll(floodFor+90*time.Second, func() bool {
		if end.IsZero() {
			select {
			case end = <-floodEnd:
			default:
			}
		}
		sctx, cancel := context.WithTimeout(ctx, scanTimeout)
		wrong, ferr := clustertest.CheckScan(sctx, fx.c, table, fx.truth, 1000, 31000, client.ScanOptions{})
		cancel()
		if wrong != nil {
			t.Fatalf("wrong answer: %v", wrong)
		}
		now := time.Now()
		if ferr != nil {
			okRun = 0
			if failed++; failed%10 == 1 {
				t.Logf("%v after the flood's start: %v", time.Since(start).Round(time.Millisecond), ferr)
			}
			return false
		}
		if end.IsZero() {
			okDuring++
			return false
		}
		if okRun == 0 {
			recovered = max(0, now.Sub(end))
		}
		okRun++
		return okRun == 20
	}) {
		t.Fatalf("scans did not recover within %v of the flood's end (%d failed, %d succeeded during the flood)", 90*time.Second, failed, okDuring)
	}
	t.Logf("recovered %v after the flood's end; %d scans failed, %d succeeded during the flood; %d batches reached the flooder; an honest scan took %v before the flood",
		recovered.Round(time.Millisecond), failed, okDuring, fl.batches(), base.Round(time.Millisecond))
	if recovered > bound {
		t.Errorf("scans completed again %v after the flood's end, want <= %v (5 s and an honest scan's %v)", recovered.Round(time.Millisecond), bound.Round(time.Millisecond), base.Round(time.Millisecond))
	}
}
