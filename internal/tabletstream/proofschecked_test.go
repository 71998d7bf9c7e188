package tabletstream

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// provenAttempt plays a scan server attempt of a verified stream
// (ScanRequest.proofs_checked): packed rows, cumulative row counts, the
// prover's proofs, and no checksum.
type provenAttempt struct {
	*attempt
	served []served
	next   int
}

func newProvenAttempt(t *testing.T, req string, server string, files []*messages.FileRef, f memFetcher, after []byte) *provenAttempt {
	t.Helper()
	return &provenAttempt{attempt: newAttempt(req, 1, server), served: serve(t, files, f, tablets.Range{}, after, 0, 7)}
}

// message returns the attempt's next message (a RowBatch, or the
// ScanFinished with the end's proofs), or nil after the last.
func (a *provenAttempt) message() any {
	if a.next >= len(a.served) {
		return nil
	}
	s := a.served[a.next]
	a.next++
	if len(s.rows) == 0 {
		return &messages.ScanFinished{RequestId: a.req, Attempt: a.attempt.attempt, Server: a.server, Rows: a.digest.Rows(),
			Batches: a.seq, Proofs: s.proofs}
	}
	a.seq++
	var packed []byte
	for _, e := range s.rows {
		packed = tablets.AppendPackedRow(packed, e.Key, e.Value)
	}
	a.digest.Count(len(s.rows))
	b := &messages.RowBatch{RequestId: a.req, Attempt: a.attempt.attempt, Seq: a.seq, PackedRows: packed, Server: a.server,
		ServerPid: a.pid, RowCount: a.digest.Rows(), Proofs: s.proofs}
	if a.next == len(a.served) {
		b.Finished = &messages.ScanFinished{RequestId: a.req, Attempt: a.attempt.attempt, Server: a.server, Rows: a.digest.Rows(),
			Batches: a.seq}
	}
	return b
}

// deliverUntil hands r the attempt's messages intact until a row was
// yielded, and returns the next batch that carries proofs, not delivered.
func (a *provenAttempt) deliverUntil(t *testing.T, r *run) *messages.RowBatch {
	t.Helper()
	for {
		m := a.message()
		if m == nil {
			t.Fatal("the attempt ended before a batch to damage")
		}
		if b, ok := m.(*messages.RowBatch); ok && len(r.yielded) > 0 && len(b.Proofs) > 0 && b.Finished == nil {
			return b
		}
		r.do(r.s.OnMessage(t0, m))
	}
}

// firstValueByte is the offset in b's packed rows of the last byte of
// its first row's value, which the batch's first proof covers.
func firstValueByte(b *messages.RowBatch) int {
	rows, _ := tablets.UnpackRows(b.PackedRows, 0)
	return tablets.PackedRowSize(len(rows[0].Key), len(rows[0].Value)) - 1
}

func verifiedRun(t *testing.T) (*run, []*messages.FileRef, memFetcher, []tablets.Entry) {
	t.Helper()
	files, f, truth := verifyTablet(t, 300, 120, 600)
	roots, err := Roots(&messages.TabletMeta{Files: files})
	if err != nil {
		t.Fatal(err)
	}
	cfg := streamConfig()
	cfg.Verify, cfg.Roots, cfg.MaxResumes = true, roots, 3
	r := newRun(t, cfg)
	r.do(r.s.Start(t0))
	if req, _ := r.request(); !req.ProofsChecked {
		t.Fatalf("a verified stream's request %v does not say proofs_checked", req)
	}
	return r, files, f, truth
}

// TestVerifiedStreamLeavesChecksumToProofs: a verified stream asks the
// server to leave the checksum out (proofs_checked) and yields every row
// of batches that carry row counts and proofs but no checksum.
func TestVerifiedStreamLeavesChecksumToProofs(t *testing.T) {
	r, files, f, truth := verifiedRun(t)
	a := newProvenAttempt(t, "r1", "s1", files, f, nil)
	for m := a.message(); m != nil && !r.done; m = a.message() {
		r.do(r.s.OnMessage(t0, m))
		if r.err != nil || r.s.Stats().Rejected > 0 {
			t.Fatalf("%v (stats %+v)", r.err, r.s.Stats())
		}
	}
	if !r.done || !equalEntries(r.yielded, truth) {
		t.Fatalf("done %v, %d rows yielded, want the %d of the ingest", r.done, len(r.yielded), len(truth))
	}
}

// TestVerifiedStreamRefusesTransportFaults: in a verified stream without
// checksums, a batch damaged on the way fails its proofs (or its count,
// or its decoding) and is handled as a checksum mismatch is: nothing of
// it is yielded, the stream resumes after the last yielded key avoiding
// the server, and the resumed stream delivers exactly the rows. A server
// whose batches arrive damaged every time ends the stream with the
// resume limit's error.
func TestVerifiedStreamRefusesTransportFaults(t *testing.T) {
	faults := map[string]func(b *messages.RowBatch){
		"a value byte flipped": func(b *messages.RowBatch) { b.PackedRows[firstValueByte(b)] ^= 1 },
		"a key byte flipped":   func(b *messages.RowBatch) { b.PackedRows[2] ^= 0x10 },
		"rows swapped": func(b *messages.RowBatch) {
			rows, _ := tablets.UnpackRows(b.PackedRows, 0)
			rows[1], rows[2] = rows[2], rows[1]
			b.PackedRows = repack(rows)
		},
		"a row lost": func(b *messages.RowBatch) {
			rows, _ := tablets.UnpackRows(b.PackedRows, 0)
			b.PackedRows = repack(append(rows[:1:1], rows[2:]...))
		},
		"bytes cut": func(b *messages.RowBatch) { b.PackedRows = b.PackedRows[:len(b.PackedRows)-3] },
		"a proof's sibling byte flipped": func(b *messages.RowBatch) {
			s := bytes.Clone(b.Proofs[0].SiblingsPacked)
			s[0] ^= 1
			b.Proofs[0].SiblingsPacked = s
		},
	}
	for name, damage := range faults {
		t.Run(name, func(t *testing.T) {
			r, files, f, truth := verifiedRun(t)
			a := newProvenAttempt(t, "r1", "s1", files, f, nil)
			bad := a.deliverUntil(t, r)
			yielded := len(r.yielded)
			damage(bad)
			acts := r.do(r.s.OnMessage(t0, bad))
			if len(find(acts, ActYield)) != 0 || len(r.yielded) != yielded {
				t.Fatalf("a damaged batch was yielded: %v", acts)
			}
			if kinds(acts) != "send-cancel,send-done,send-request" {
				t.Fatalf("damaged batch: %v, want cancel + abandon + resume", acts)
			}
			last := r.yielded[len(r.yielded)-1].Key
			req, coord := r.request()
			if coord != coordA || !bytes.Equal(req.ResumeAfter, last) || len(req.AvoidServers) != 1 || req.AvoidServers[0] != "s1" || !req.ProofsChecked {
				t.Fatalf("resume %v to %s: want after %s on the same coordinator, avoiding s1", req, coord, last)
			}
			if st := r.s.Stats(); st.Rejected != 1 || st.Resumes != 1 {
				t.Fatalf("stats %+v", st)
			}
			b := newProvenAttempt(t, req.RequestId, "s2", files, f, last)
			for m := b.message(); m != nil && !r.done; m = b.message() {
				r.do(r.s.OnMessage(t0, m))
			}
			if !r.done || r.err != nil || !equalEntries(r.yielded, truth) {
				t.Fatalf("done %v, err %v: %d rows yielded, want the %d of the ingest in order", r.done, r.err, len(r.yielded), len(truth))
			}
		})
	}
	t.Run("every time", func(t *testing.T) {
		r, files, f, _ := verifiedRun(t)
		id := "r1"
		for i := 0; r.err == nil; i++ {
			if i > 10 {
				t.Fatal("the stream resumes without end")
			}
			var after []byte
			if n := len(r.yielded); n > 0 {
				after = r.yielded[n-1].Key
			}
			// The attempt's first batch damaged, the rest intact: its
			// damaged rows may wait for a later batch's proof.
			a := newProvenAttempt(t, id, "s1", files, f, after)
			yielded := len(r.yielded)
			b := a.message().(*messages.RowBatch)
			faults["a value byte flipped"](b)
			r.last = nil
			for m := any(b); m != nil && r.err == nil && len(find(r.last, ActSendRequest)) == 0; m = a.message() {
				r.do(r.s.OnMessage(t0, m))
				if r.done {
					t.Fatal("a stream with a damaged row finished")
				}
			}
			if len(r.yielded) != yielded {
				t.Fatalf("%d rows of a damaged attempt yielded", len(r.yielded)-yielded)
			}
			if r.err == nil {
				req, _ := r.request()
				id = req.RequestId
			}
		}
		var se *ScanError
		if !errors.As(r.err, &se) || se.Code != messages.ErrorCode_ERROR_CODE_RESUME_LIMIT || !strings.Contains(se.Message, "4 times") {
			t.Fatalf("err %v: want the resume limit's error", r.err)
		}
	})
}

// TestVerifiedStreamChecksCountsOnly: a verified stream compares the row
// counts, not the checksum. It takes the batches of a server that puts
// the checksum in anyway (one that does not know proofs_checked), and
// refuses a count that does not match, in a batch or in ScanFinished,
// naming the counts and no checksum, which it does not compute.
func TestVerifiedStreamChecksCountsOnly(t *testing.T) {
	// withChecksum gives m the checksum an older server sends.
	withChecksum := func(dig *tablets.RowDigest, m any) {
		switch m := m.(type) {
		case *messages.RowBatch:
			rows, err := tablets.UnpackRows(m.PackedRows, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range rows {
				dig.Add(e.Key, e.Value)
			}
			m.Checksum = dig.Sum()
			if m.Finished != nil {
				m.Finished.Checksum = dig.Sum()
			}
		case *messages.ScanFinished:
			m.Checksum = dig.Sum()
		}
	}
	t.Run("checksums sent", func(t *testing.T) {
		r, files, f, truth := verifiedRun(t)
		a := newProvenAttempt(t, "r1", "s1", files, f, nil)
		var dig tablets.RowDigest
		for m := a.message(); m != nil && !r.done; m = a.message() {
			withChecksum(&dig, m)
			r.do(r.s.OnMessage(t0, m))
			if r.err != nil || r.s.Stats().Rejected > 0 {
				t.Fatalf("%v (stats %+v)", r.err, r.s.Stats())
			}
		}
		if !r.done || !equalEntries(r.yielded, truth) {
			t.Fatalf("done %v, %d rows yielded, want the %d of the ingest", r.done, len(r.yielded), len(truth))
		}
	})
	reason := func(t *testing.T, acts []StreamAction) string {
		t.Helper()
		cs := find(acts, ActSendCancel)
		if len(cs) != 1 {
			t.Fatalf("actions %v, want one cancel", acts)
		}
		return cs[0].Msg.(*messages.Cancel).GetReason()
	}
	t.Run("a batch's count off", func(t *testing.T) {
		r, files, f, _ := verifiedRun(t)
		a := newProvenAttempt(t, "r1", "s1", files, f, nil)
		var dig tablets.RowDigest
		b := a.message().(*messages.RowBatch)
		withChecksum(&dig, b)
		b.RowCount++
		if got, want := reason(t, r.do(r.s.OnMessage(t0, b))), fmt.Sprintf("batch 1: %d rows received, server counts %d", b.RowCount-1, b.RowCount); got != want {
			t.Fatalf("refused because %q, want %q", got, want)
		}
	})
	t.Run("ScanFinished's count off", func(t *testing.T) {
		r, files, f, _ := verifiedRun(t)
		a := newProvenAttempt(t, "r1", "s1", files, f, nil)
		var dig tablets.RowDigest
		var fin *messages.ScanFinished
		for m := a.message(); m != nil; m = a.message() {
			withChecksum(&dig, m)
			if b, ok := m.(*messages.RowBatch); ok && b.Finished != nil {
				fin, b.Finished = b.Finished, nil
				r.do(r.s.OnMessage(t0, b))
				continue
			}
			if sf, ok := m.(*messages.ScanFinished); ok {
				fin = sf
				continue
			}
			r.do(r.s.OnMessage(t0, m))
		}
		if fin == nil || r.done || r.err != nil || r.s.Stats().Rejected > 0 {
			t.Fatalf("before ScanFinished: done %v, err %v, stats %+v", r.done, r.err, r.s.Stats())
		}
		fin.Rows++
		want := fmt.Sprintf("finished with %d batches, %d rows; received %d, %d", fin.Batches, fin.Rows, fin.Batches, fin.Rows-1)
		if got := reason(t, r.do(r.s.OnMessage(t0, fin))); got != want {
			t.Fatalf("refused because %q, want %q", got, want)
		}
	})
}
