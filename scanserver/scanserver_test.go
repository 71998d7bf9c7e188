package scanserver

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// Every RowBatch carries the cumulative row count and tablets.RowDigest
// of the rows sent; ScanFinished the totals. Each is checked against the
// rows received and the ground truth.
func TestServerBatchesCarryCountAndChecksum(t *testing.T) {
	r := newRig(t, rigOpts{rows: 3000, tablets: 2})
	srv := r.addServer("h1", 0, DefaultScanServerConfig(), nil)
	p := r.newProbe()
	for idx := range 2 {
		id := fmt.Sprintf("s%d", idx)
		r.startScan(p, srv, id, idx, 4)
		batches, fin := r.drain(p, srv, id)
		if len(batches) < 2 {
			t.Fatalf("tablet %d: %d batches; the test needs several", idx, len(batches))
		}
		var dig tablets.RowDigest
		var got []tablets.Entry
		for i, b := range batches {
			if b.GetSeq() != uint64(i+1) {
				t.Fatalf("tablet %d: batch %d has seq %d", idx, i+1, b.GetSeq())
			}
			for _, row := range rowsOf(b) {
				dig.Add(row.Key, row.Value)
				got = append(got, row)
			}
			if b.GetRowCount() != dig.Rows() || b.GetChecksum() != dig.Sum() {
				t.Fatalf("tablet %d batch %d: row_count %d checksum %x, received %d rows checksum %x",
					idx, b.GetSeq(), b.GetRowCount(), b.GetChecksum(), dig.Rows(), dig.Sum())
			}
		}
		want := r.truthOf(idx)
		if len(got) != len(want) {
			t.Fatalf("tablet %d: %d rows, want %d", idx, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i].Key, want[i].Key) || !bytes.Equal(got[i].Value, want[i].Value) {
				t.Fatalf("tablet %d: row %d is %q, want %q", idx, i, got[i].Key, want[i].Key)
			}
		}
		if fin.GetRows() != dig.Rows() || fin.GetChecksum() != dig.Sum() || fin.GetBatches() != uint64(len(batches)) {
			t.Fatalf("tablet %d: finished with rows %d checksum %x batches %d, received %d rows checksum %x in %d batches",
				idx, fin.GetRows(), fin.GetChecksum(), fin.GetBatches(), dig.Rows(), dig.Sum(), len(batches))
		}
	}
}

// A scan whose client checks the proofs (StartScan.proofs_checked) of a
// table with block roots carries the row counts and proofs, and no
// checksum (0), in its batches and its ScanFinished; the same scan of
// the files without block roots, which no proof covers, carries the
// checksum whatever the request says.
func TestServerLeavesChecksumToProofs(t *testing.T) {
	r := newRig(t, rigOpts{rows: 3000, tablets: 1})
	srv := r.addServer("h1", 0, DefaultScanServerConfig(), nil)
	p := r.newProbe()
	for _, roots := range []bool{true, false} {
		id := fmt.Sprintf("roots-%v", roots)
		r.startScanWith(p, srv, id, 0, 4, func(m *messages.StartScan) {
			m.ProofsChecked = true
			if !roots {
				files := make([]*messages.FileRef, len(m.Files))
				for i, f := range m.Files {
					files[i] = proto.CloneOf(f)
					files[i].BlockRoots = nil
				}
				m.Files = files
			}
		})
		batches, fin := r.drain(p, srv, id)
		if len(batches) < 2 {
			t.Fatalf("%s: %d batches; the test needs several", id, len(batches))
		}
		var dig tablets.RowDigest
		proofs := 0
		for _, b := range batches {
			for _, row := range rowsOf(b) {
				dig.Add(row.Key, row.Value)
			}
			proofs += len(b.GetProofs())
			want := dig.Sum()
			if roots {
				want = 0
			}
			if b.GetRowCount() != dig.Rows() || b.GetChecksum() != want {
				t.Fatalf("%s batch %d: row_count %d checksum %x, want %d and %x", id, b.GetSeq(), b.GetRowCount(), b.GetChecksum(), dig.Rows(), want)
			}
		}
		if roots != (proofs > 0) {
			t.Fatalf("%s: %d proofs", id, proofs)
		}
		if want := r.truthOf(0); dig.Rows() != uint64(len(want)) || fin.GetRows() != dig.Rows() || fin.GetChecksum() != batches[len(batches)-1].GetChecksum() {
			t.Fatalf("%s: %d rows received, finished with rows %d checksum %x; want %d rows", id, dig.Rows(), fin.GetRows(), fin.GetChecksum(), len(want))
		}
	}
}

// A proven scan's batches end at block ends: each but the last holds the
// whole blocks that fit in its batch_rows, its proofs cover all its rows,
// and the next block would not have fit.
func TestServerProvenBatchesEndAtBlockEnds(t *testing.T) {
	r := newRig(t, rigOpts{rows: 3000, tablets: 1})
	srv := r.addServer("h1", 0, DefaultScanServerConfig(), nil)
	p := r.newProbe()
	const batchRows = 250
	r.startScanWith(p, srv, "s", 0, 4, func(m *messages.StartScan) { m.BatchRows, m.ProofsChecked = batchRows, true })
	batches, _ := r.drain(p, srv, "s")
	if len(batches) < 3 {
		t.Fatalf("%d batches; the test needs several", len(batches))
	}
	for i, b := range batches[:len(batches)-1] {
		rows, proven := len(rowsOf(b)), 0
		for _, pr := range b.GetProofs() {
			proven += int(pr.GetRows())
		}
		ps, next := b.GetProofs(), batches[i+1].GetProofs()
		if len(ps) == 0 || len(next) == 0 {
			t.Fatalf("batch %d or the next has no proof", b.GetSeq())
		}
		last := ps[len(ps)-1]
		if rows > batchRows || proven != rows || int(last.GetFirst())+len(mustUnpack(t, last.GetHead()))+int(last.GetRows()) != int(last.GetLeaves()) ||
			rows+int(next[0].GetLeaves()) <= batchRows {
			t.Fatalf("batch %d: %d rows, %d proven, its last proof %v, the next block %d rows: want whole blocks up to %d rows",
				b.GetSeq(), rows, proven, last, next[0].GetLeaves(), batchRows)
		}
	}
}

// A proven scan that leaves batch_rows to the server: each batch but the
// last holds whole blocks up to the first block end at or past the
// server's BatchRows, so block ends do not make its batches smaller.
func TestServerProvenBatchesPastServerBatchRows(t *testing.T) {
	r := newRig(t, rigOpts{rows: 3000, tablets: 1})
	cfg := DefaultScanServerConfig()
	const batchRows = 250
	cfg.BatchRows = batchRows
	srv := r.addServer("h1", 0, cfg, nil)
	p := r.newProbe()
	r.startScanWith(p, srv, "s", 0, 4, func(m *messages.StartScan) { m.BatchRows, m.ProofsChecked = 0, true })
	batches, fin := r.drain(p, srv, "s")
	if len(batches) < 3 || fin.GetRows() != uint64(len(r.truthOf(0))) {
		t.Fatalf("%d batches, %d rows; the test needs several batches of all %d rows", len(batches), fin.GetRows(), len(r.truthOf(0)))
	}
	for _, b := range batches[:len(batches)-1] {
		rows, proven := len(rowsOf(b)), 0
		ps := b.GetProofs()
		for _, pr := range ps {
			proven += int(pr.GetRows())
		}
		if len(ps) == 0 {
			t.Fatalf("batch %d has no proof", b.GetSeq())
		}
		last := ps[len(ps)-1]
		if proven != rows || int(last.GetFirst())+len(mustUnpack(t, last.GetHead()))+int(last.GetRows()) != int(last.GetLeaves()) ||
			rows < batchRows || rows-int(last.GetRows()) >= batchRows || rows > 2*batchRows {
			t.Fatalf("batch %d: %d rows, %d proven, its last proof %v: want whole blocks up to the first block end at or past %d rows",
				b.GetSeq(), rows, proven, last, batchRows)
		}
	}
}

func mustUnpack(t *testing.T, b []byte) []tablets.Entry {
	t.Helper()
	rows, err := tablets.UnpackRows(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// ScanFinished.duration_us is taken on ScanServerConfig.Clock, the
// clock the server decides with: a clock that stands still gives 0.
func TestServerDurationOnConfiguredClock(t *testing.T) {
	r := newRig(t, rigOpts{rows: 500, tablets: 1})
	still := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := DefaultScanServerConfig()
	cfg.Clock = func() time.Time { return still }
	srv := r.addServer("h1", 0, cfg, nil)
	p := r.newProbe()
	r.startScan(p, srv, "d", 0, 64)
	_, fin := r.drain(p, srv, "d")
	if fin.GetError() != messages.ErrorCode_ERROR_CODE_UNSPECIFIED || fin.GetDurationUs() != 0 {
		t.Fatalf("finished %v (%s) with duration_us %d, want 0 on a clock that stands still", fin.GetError(), fin.GetErrorMessage(), fin.GetDurationUs())
	}
}

// A Cancel{unless_streaming} for an attempt
// that already sent a RowBatch is ignored: the client may be reading it.
func TestServerIgnoresUnlessStreamingCancelOnceStreaming(t *testing.T) {
	r := newRig(t, rigOpts{rows: 2000, tablets: 1})
	srv := r.addServer("h1", 0, DefaultScanServerConfig(), nil)
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
	gate := testutil.NewGatedFetcher(tablets.StoreFetcher{Store: r.store})
	cfg := DefaultScanServerConfig()
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
	close(gate.Open)
	// A later scan runs (the worker was released) and nothing of the
	// cancelled ones was streamed.
	r.startScan(p, srv, "after", 0, 64)
	p.wait(r, "after finished", isFinished("after"))
	if n := len(p.all(isBatch("run", 0))) + len(p.all(isBatch("queued", 0))); n != 0 {
		t.Fatalf("%d batches of cancelled attempts", n)
	}
}
