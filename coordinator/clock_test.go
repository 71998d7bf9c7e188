package coordinator

import (
	"fmt"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/servertest"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// skewed is a clock skew from the real time.
func skewed(d time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(d) }
}

// TestClockSkewChangesNothing runs scans whose requests have 2 s left
// while the coordinator's and the scan server's clocks disagree by 10 s
// either way: requests carry time left, so every scan returns its rows.
// A scan whose server never answers still fails DEADLINE_EXCEEDED, at its
// deadline on the coordinator's clock.
func TestClockSkewChangesNothing(t *testing.T) {
	for _, sk := range []struct{ coord, server time.Duration }{{5 * time.Second, -5 * time.Second}, {-5 * time.Second, 5 * time.Second}} {
		t.Run(fmt.Sprintf("coordinator%+v/server%+v", sk.coord, sk.server), func(t *testing.T) {
			r := newRig(t, rigOpts{rows: 200, tablets: 2, coord: func(c *CoordinatorConfig) { c.Clock = skewed(sk.coord) }})
			cfg := servertest.Default()
			cfg.Clock = skewed(sk.server)
			r.addServer("h1", 0, cfg, nil)
			for idx := range 2 {
				req := r.request(idx)
				req.TimeoutMs = 2000
				r.checkRows(r.scan(req), idx)
			}
			// A server that never answers (its reads block): the scan fails
			// at the request's deadline, not before and not 5 s later.
			r2 := newRig(t, rigOpts{rows: 50, tablets: 1, coord: func(c *CoordinatorConfig) { c.Clock = skewed(sk.coord) }})
			gate := testutil.NewGatedFetcher(tablets.StoreFetcher{Store: r2.store})
			t.Cleanup(func() { close(gate.Open) })
			r2.addServer("h1", 0, cfg, gate)
			req := r2.request(0)
			req.TimeoutMs = 300
			start := time.Now()
			s := r2.scan(req)
			took := time.Since(start)
			if s.err == nil || s.err.GetCode() != messages.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED {
				t.Fatalf("blocked scan ended with %v (fin %v), want DEADLINE_EXCEEDED", s.err, s.fin)
			}
			if took < 300*time.Millisecond {
				t.Fatalf("blocked scan failed after %v, before its 300ms timeout", took)
			}
		})
	}
}
