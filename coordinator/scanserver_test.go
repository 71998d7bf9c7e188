package coordinator

import (
	"bytes"
	"testing"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/scanserver"
	"github.com/scanplane/scanplane/tablets"
)

// Every RowBatch carries the cumulative row
// count and tablets.RowDigest of the rows sent; ScanFinished the totals.
// The rig client checks each batch and the finish against what it got.
func TestServerBatchesCarryCountAndChecksum(t *testing.T) {
	r := newRig(t, rigOpts{rows: 3000, tablets: 2})
	r.addServer("h1", 0, scanserver.DefaultScanServerConfig(), nil)
	for idx := range 2 {
		s := r.scan(r.request(idx))
		r.checkRows(s, idx)
		if len(s.batches) < 2 {
			t.Fatalf("tablet %d: %d batches; the test needs several", idx, len(s.batches))
		}
		if s.fin.GetRows() != uint64(len(s.rows)) || s.fin.GetChecksum() == 0 {
			t.Fatalf("tablet %d: finished with rows %d checksum %x, got %d rows", idx, s.fin.GetRows(), s.fin.GetChecksum(), len(s.rows))
		}
	}
}

// A Cancel{unless_streaming} for an attempt
// that already sent a RowBatch is ignored: the client may be reading it.
func TestServerIgnoresUnlessStreamingCancelOnceStreaming(t *testing.T) {
	r := newRig(t, rigOpts{rows: 2000, tablets: 1})
	srv := r.addServer("h1", 0, scanserver.DefaultScanServerConfig(), nil)
	p := r.newProbe()
	r.startScan(p, srv, "s1", 0, 1)
	p.wait(r, "batch 1", isBatch("s1", 1))
	r.as.Root.Send(srv, &messages.Cancel{RequestId: "s1", Attempt: 1, Reason: "test", UnlessStreaming: true})
	// Acknowledge every batch until the scan ends.
	acked := uint64(0)
	r.waitFor("the scan to finish", func() bool {
		for _, m := range p.all(isBatch("s1", 0)) {
			if b := m.(*messages.RowBatch); b.GetSeq() > acked {
				acked = b.GetSeq()
				r.as.Root.Send(srv, &messages.BatchAck{RequestId: "s1", Attempt: 1, Seq: acked})
			}
		}
		return len(p.all(isFinished("s1"))) > 0
	})
	fin := p.all(isFinished("s1"))[0].(*messages.ScanFinished)
	if fin.GetError() != messages.ErrorCode_ERROR_CODE_UNSPECIFIED {
		t.Fatalf("a streaming attempt was cancelled by an unless-streaming cancel: %v %s", fin.GetError(), fin.GetErrorMessage())
	}
	if want := len(r.truthOf(0)); fin.GetRows() != uint64(want) {
		t.Fatalf("finished with %d rows, want %d", fin.GetRows(), want)
	}
	// last_key is the last row sent (taken from the packed batch).
	if truth := r.truthOf(0); !bytes.Equal(fin.GetLastKey(), truth[len(truth)-1].Key) {
		t.Fatalf("finished with last_key %q, want %q", fin.GetLastKey(), truth[len(truth)-1].Key)
	}
}

// Before its first batch, an attempt (running or queued) is cancelled by
// a Cancel{unless_streaming}, and sends no batch afterwards.
func TestServerUnlessStreamingCancelsBeforeFirstBatch(t *testing.T) {
	r := newRig(t, rigOpts{rows: 2000, tablets: 1})
	gate := &gatedFetcher{inner: tablets.StoreFetcher{Store: r.store}, open: make(chan struct{})}
	cfg := scanserver.DefaultScanServerConfig()
	cfg.Workers = 1
	srv := r.addServer("h1", 0, cfg, gate)
	p := r.newProbe()
	r.startScan(p, srv, "run", 0, 4)
	p.wait(r, "run started", func(m any) bool { s, ok := m.(*messages.ScanStarted); return ok && s.GetRequestId() == "run" })
	r.startScan(p, srv, "queued", 0, 4)
	for _, id := range []string{"run", "queued"} {
		r.as.Root.Send(srv, &messages.Cancel{RequestId: id, Attempt: 1, Reason: "test", UnlessStreaming: true})
	}
	for _, id := range []string{"run", "queued"} {
		fin := p.wait(r, id+" finished", isFinished(id)).(*messages.ScanFinished)
		if fin.GetError() != messages.ErrorCode_ERROR_CODE_CANCELLED || !fin.GetCancelled() {
			t.Fatalf("%s: finished %v, want cancelled", id, fin.GetError())
		}
	}
	close(gate.open)
	// A later scan runs (the worker was released) and nothing of the
	// cancelled ones was streamed.
	r.startScan(p, srv, "after", 0, 64)
	p.wait(r, "after finished", isFinished("after"))
	if n := len(p.all(isBatch("run", 0))) + len(p.all(isBatch("queued", 0))); n != 0 {
		t.Fatalf("%d batches of cancelled attempts", n)
	}
}
