package scanserver

import (
	"bytes"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
)

// oneRowScan sends StartScan for the first row of tablet 0 alone; p plays
// the client and the tablet actor.
func (r *rig) oneRowScan(p *probe, id string) []byte {
	tm := r.table.GetTablets()[0]
	key := r.truthOf(0)[0].Key
	r.as.Root.Send(r.servers[0], &messages.StartScan{RequestId: id, Attempt: 1, Client: wire.FromPID(p.pid), TabletActor: wire.FromPID(p.pid),
		Tablet: tm.GetRef(), Files: tm.GetFiles(), Range: &messages.KeyRange{Start: key, End: append(bytes.Clone(key), 0)},
		BusyTimeoutUs: time.Minute.Microseconds()})
	return key
}

// A scan whose first batch is also its last sends the client
// one RowBatch carrying the ScanFinished and the tablet actor the
// ScanFinished alone — no ScanStarted{first_data}, no separate
// ScanFinished to the client, no ack awaited. (The accept notice may
// still go out if the read outlasted AcceptNoticeDelay on this shared
// machine; never a first-data notice.)
func TestServerOneRowScanMessages(t *testing.T) {
	r := newRig(t, rigOpts{rows: 500, tablets: 2})
	r.addServer("h1", 0, DefaultScanServerConfig(), nil)
	p := r.newProbe()
	key := r.oneRowScan(p, "one")
	p.wait(r, "the batch", isBatch("one", 0))
	p.wait(r, "ScanFinished", isFinished("one"))
	batches, fins := p.all(isBatch("one", 0)), p.all(isFinished("one"))
	if len(batches) != 1 || len(fins) != 1 {
		t.Fatalf("%d batches and %d ScanFinished, want one each (the client's inside the batch)", len(batches), len(fins))
	}
	b := batches[0].(*messages.RowBatch)
	f := b.GetFinished()
	if rows := rowsOf(b); len(rows) != 1 || !bytes.Equal(rows[0].Key, key) || f == nil || len(b.GetRows()) != 0 {
		t.Fatalf("batch %v: want the one row, carrying the ScanFinished", b)
	}
	if f.GetError() != messages.ErrorCode_ERROR_CODE_UNSPECIFIED || f.GetBatches() != 1 || f.GetRows() != 1 || f.GetChecksum() != b.GetChecksum() ||
		f.GetRequestId() != "one" || f.GetAttempt() != 1 {
		t.Fatalf("finished in the batch %v does not match the batch %v", f, b)
	}
	if tf := fins[0].(*messages.ScanFinished); tf.GetBatches() != 1 || tf.GetRows() != 1 || tf.GetChecksum() != f.GetChecksum() {
		t.Fatalf("the tablet actor's ScanFinished %v", tf)
	}
	for _, m := range p.all(isStarted("one")) {
		if m.(*messages.ScanStarted).GetFirstData() {
			t.Fatalf("ScanStarted{first_data} sent for a scan whose first batch was its last: %v", m)
		}
	}
}

// The accept notice is held back only briefly. A scan waiting
// for a slow read gets its ScanStarted{first_data: false} out while the
// read still blocks, so the tablet actor's busy timeout sees it accepted;
// once the read completes, the last batch carries the end.
func TestServerAcceptNoticeWhileReadIsSlow(t *testing.T) {
	r := newRig(t, rigOpts{rows: 500, tablets: 2})
	gate := testutil.NewGatedFetcher(tablets.StoreFetcher{Store: r.store})
	r.addServer("h1", 0, DefaultScanServerConfig(), gate)
	p := r.newProbe()
	r.oneRowScan(p, "slow")
	s := p.wait(r, "the accept notice", isStarted("slow")).(*messages.ScanStarted)
	if s.GetFirstData() || len(p.all(isBatch("slow", 0))) != 0 {
		t.Fatalf("notice %v before any batch, want first_data false", s)
	}
	close(gate.Open)
	p.wait(r, "ScanFinished", isFinished("slow"))
	if b := p.wait(r, "the batch", isBatch("slow", 0)).(*messages.RowBatch); b.GetFinished() == nil {
		t.Fatalf("last batch %v carries no ScanFinished", b)
	}
	if n := len(p.all(isStarted("slow"))); n != 1 {
		t.Fatalf("%d ScanStarted, want the accept notice only", n)
	}
}

// A scan that ends without a batch (an empty range) sends ScanFinished to
// both the client and the tablet actor; a batch-less end implies the
// accept notice.
func TestServerEmptyScanFinishesSeparately(t *testing.T) {
	r := newRig(t, rigOpts{rows: 500, tablets: 2})
	r.addServer("h1", 0, DefaultScanServerConfig(), nil)
	p := r.newProbe()
	tm := r.table.GetTablets()[0]
	key := append(bytes.Clone(r.truthOf(0)[0].Key), 0)
	r.as.Root.Send(r.servers[0], &messages.StartScan{RequestId: "empty", Attempt: 1, Client: wire.FromPID(p.pid), TabletActor: wire.FromPID(p.pid),
		Tablet: tm.GetRef(), Files: tm.GetFiles(), Range: &messages.KeyRange{Start: key, End: append(bytes.Clone(key), 0)},
		BusyTimeoutUs: time.Minute.Microseconds()})
	p.wait(r, "ScanFinished", isFinished("empty"))
	r.waitFor("both ScanFinished", func() bool { return len(p.all(isFinished("empty"))) == 2 })
	if n := len(p.all(isBatch("empty", 0))); n != 0 {
		t.Fatalf("%d batches for an empty range", n)
	}
}

// An attempt the server holds, sent again by another tablet actor (a
// second flow of the request at another coordinator), is answered busy
// to that actor, so it goes on elsewhere instead of waiting for an
// answer; sent again by its own tablet actor it is a duplicate delivery,
// answered nothing.
func TestServerSameAttemptFromAnotherTabletActor(t *testing.T) {
	r := newRig(t, rigOpts{rows: 2000, tablets: 1})
	r.addServer("h1", 0, DefaultScanServerConfig(), nil)
	owner, other := r.newProbe(), r.newProbe()
	tm := r.table.GetTablets()[0]
	start := func(tablet *probe) {
		r.as.Root.Send(r.servers[0], &messages.StartScan{RequestId: "twice", Attempt: 1, Client: wire.FromPID(owner.pid), TabletActor: wire.FromPID(tablet.pid),
			Tablet: tm.GetRef(), Files: tm.GetFiles(), Range: &messages.KeyRange{}, BatchRows: 10, Window: 1,
			BusyTimeoutUs: time.Minute.Microseconds()})
	}
	isBusy := func(m any) bool {
		b, ok := m.(*messages.Busy)
		return ok && b.GetRequestId() == "twice" && b.GetAttempt() == 1
	}
	start(owner)
	owner.wait(r, "the first batch (the scan then waits for its ack)", isBatch("twice", 1))
	start(owner)
	start(other)
	other.wait(r, "Busy to the other tablet actor", isBusy)
	if n := len(owner.all(isBusy)); n != 0 {
		t.Fatalf("the attempt's own tablet actor got %d Busy for a duplicate delivery, want 0", n)
	}
	if n := len(owner.all(isBatch("twice", 0))); n != 1 {
		t.Fatalf("%d batches, want 1: the duplicates started nothing", n)
	}
}
