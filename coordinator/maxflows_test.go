package coordinator

import (
	"strings"
	"testing"

	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/servertest"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// TestMaxFlowsAnswersOverloaded: with MaxFlows scans running, a further
// request is answered OVERLOADED at once; once they end, requests run
// again.
func TestMaxFlowsAnswersOverloaded(t *testing.T) {
	r := newRig(t, rigOpts{rows: 100, tablets: 2, coord: func(c *CoordinatorConfig) { c.MaxFlows = 1 }})
	gate := testutil.NewGatedFetcher(tablets.StoreFetcher{Store: r.store})
	r.addServer("h1", 0, servertest.Default(), gate)
	blocked := r.start(r.request(0), false)
	r.waitFor("one flow running", func() bool { return r.co.counters.flows.Load() == 1 })
	s := r.scan(r.request(1))
	if s.err == nil || s.err.GetCode() != messages.ErrorCode_ERROR_CODE_OVERLOADED || !strings.Contains(s.err.GetMessage(), "MaxFlows 1") {
		t.Fatalf("second scan ended with %v, want OVERLOADED naming MaxFlows", s.err)
	}
	close(gate.Open)
	r.checkRows(r.wait(blocked), 0)
	r.waitFor("no flow running", func() bool { return r.co.counters.flows.Load() == 0 })
	r.checkRows(r.scan(r.request(1)), 1)
}
