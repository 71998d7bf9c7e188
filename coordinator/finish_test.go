package coordinator

import (
	"testing"

	"github.com/scanplane/scanplane/internal/testutil/servertest"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// TestOneRowScanEndsOnScanFinished: a client that sends no ScanDone for a
// scan it got whole (client.Client) leaves a tablet actor whose flow ends
// on the server's ScanFinished alone, and that ScanFinished, whose batch
// was the first and the last, gives the server's load what a first-data
// notice and an end would: a start latency sample, the answer, nothing in
// flight.
func TestOneRowScanEndsOnScanFinished(t *testing.T) {
	r := newRig(t, rigOpts{rows: 400, tablets: 2, noDone: true})
	r.addServer("h1", 0, servertest.Default(), nil)
	k := r.truth[123].Key
	req := r.request(0)
	idx := tablets.TabletFor(r.table.GetSplitPoints(), k)
	req.Tablet = r.table.GetTablets()[idx].GetRef()
	req.Range = &messages.KeyRange{Start: k, End: append(k[:len(k):len(k)], 0)}
	s := r.scan(req)
	if s.err != nil || s.protoErr != "" || len(s.rows) != 1 {
		t.Fatalf("scan: err %v %s, %d rows", s.err, s.protoErr, len(s.rows))
	}
	if s.fin == nil || s.fin.GetBatches() != 1 {
		t.Fatalf("finished %v, want one batch carrying the end", s.fin)
	}
	r.waitFor("no flow left", func() bool { return r.co.counters.flows.Load() == 0 })
	r.waitFor("the server's load after the scan", func() bool {
		v := r.co.board.View().Server("h1/0")
		return v != nil && v.InFlight == 0 && v.StartLatency > 0 && v.UnansweredSince.IsZero() && !v.LastAnswer.IsZero()
	})
}
