package tabletstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// The tests below drive TabletStream message by message, like the shell
// (Rows) and the protocol harness do, against attempts that compute the
// batch counts and checksums a scan server computes.

var t0 = time.Unix(1_000_000, 0)

const (
	coordA = "127.0.0.1:8090"
	coordB = "127.0.0.1:8091"
)

func testRows(n int) []*messages.Row {
	rows := make([]*messages.Row, n)
	for i := range rows {
		rows[i] = &messages.Row{Key: fmt.Appendf(nil, "k%04d", i), Value: fmt.Appendf(nil, "v%d", i)}
	}
	return rows
}

func streamConfig() StreamConfig {
	n := 0
	return StreamConfig{Client: &messages.Pid{Address: "127.0.0.1:7000", Id: "client"}, Window: 4,
		MaxRequestTime: time.Hour, StallTimeout: 2 * time.Second, IdleTimeout: 60 * time.Second,
		CoordinatorWait: 3 * time.Second, MaxResumes: 10, Coordinators: []string{coordA, coordB},
		RequestID: func() string { n++; return fmt.Sprintf("r%d", n) }}
}

var testRef = &messages.TabletRef{Table: "t", Generation: 1, Index: 0}

// run is a stream under test with what it yielded and sent.
type run struct {
	t       *testing.T
	s       *TabletStream
	yielded []tablets.Entry
	acts    []StreamAction // every action so far
	last    []StreamAction // the last step's
	done    bool
	err     error
}

// streaming returns a started stream of n test rows whose attempt 1 on
// s1 has delivered the first 4 (accepted, yielded).
func streaming(t *testing.T, n int) (*run, *attempt, []*messages.Row) {
	t.Helper()
	rows := testRows(n)
	r := newRun(t, streamConfig())
	r.do(r.s.Start(t0))
	a := newAttempt("r1", 1, "s1")
	r.do(r.s.OnMessage(t0, a.batch(rows[:4])))
	return r, a, rows
}

func newRun(t *testing.T, cfg StreamConfig) *run {
	return &run{t: t, s: NewTabletStream(cfg, testRef, tablets.Range{})}
}

func (r *run) do(acts []StreamAction) []StreamAction {
	r.t.Helper()
	if r.done || r.err != nil {
		if len(acts) > 0 {
			r.t.Fatalf("actions after the end: %v", acts)
		}
	}
	r.last = acts
	r.acts = append(r.acts, acts...)
	for _, a := range acts {
		switch a.Kind {
		case ActYield:
			r.yielded = append(r.yielded, a.Rows...)
		case ActFinish:
			r.done = true
		case ActFail:
			r.err = a.Err
		}
	}
	return acts
}

// request returns the ScanRequest the last step sent (fails if none).
func (r *run) request() (*messages.ScanRequest, string) {
	r.t.Helper()
	for _, a := range r.last {
		if a.Kind == ActSendRequest {
			return a.Msg.(*messages.ScanRequest), a.Coordinator
		}
	}
	r.t.Fatalf("no ScanRequest sent; actions %v", r.last)
	return nil, ""
}

func kinds(acts []StreamAction) string {
	var b []string
	for _, a := range acts {
		b = append(b, a.Kind.String())
	}
	return strings.Join(b, ",")
}

func find(acts []StreamAction, k StreamActionKind) []StreamAction {
	var out []StreamAction
	for _, a := range acts {
		if a.Kind == k {
			out = append(out, a)
		}
	}
	return out
}

// attempt plays one scan server attempt: it sends rows after resume_after
// in batches with cumulative counts and checksums, like scanserver/scanserver.go.
type attempt struct {
	req     string
	attempt uint32
	server  string
	pid     *messages.Pid
	seq     uint64
	digest  tablets.RowDigest
}

func newAttempt(req string, n uint32, server string) *attempt {
	return &attempt{req: req, attempt: n, server: server, pid: &messages.Pid{Address: server, Id: "srv"}}
}

func (a *attempt) batch(rows []*messages.Row) *messages.RowBatch {
	a.seq++
	for _, r := range rows {
		a.digest.Add(r.Key, r.Value)
	}
	return &messages.RowBatch{RequestId: a.req, Attempt: a.attempt, Seq: a.seq, Rows: rows, Server: a.server, ServerPid: a.pid,
		RowCount: a.digest.Rows(), Checksum: a.digest.Sum()}
}

func (a *attempt) finished() *messages.ScanFinished {
	return &messages.ScanFinished{RequestId: a.req, Attempt: a.attempt, Server: a.server, Rows: a.digest.Rows(),
		Batches: a.seq, Checksum: a.digest.Sum()}
}

func (a *attempt) failed(code messages.ErrorCode) *messages.ScanFinished {
	f := a.finished()
	f.Error, f.ErrorMessage = code, "boom"
	return f
}

func sameRows(t *testing.T, got []tablets.Entry, want []*messages.Row) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d rows yielded, want %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i].Key, want[i].Key) || !bytes.Equal(got[i].Value, want[i].Value) {
			t.Fatalf("row %d is %s=%s, want %s=%s", i, got[i].Key, got[i].Value, want[i].Key, want[i].Value)
		}
	}
}

func TestStreamHappyPath(t *testing.T) {
	rows := testRows(10)
	r := newRun(t, streamConfig())
	r.do(r.s.Start(t0))
	req, coord := r.request()
	if coord != coordA || req.RequestId != "r1" || req.ResumeAfter != nil || req.Window != 4 || req.Client.GetId() != "client" {
		t.Fatalf("first request %v to %s", req, coord)
	}
	if got, want := time.Duration(req.TimeoutMs)*time.Millisecond, time.Hour; got != want {
		t.Fatalf("request timeout %v, want MaxRequestTime = %v", got, want)
	}
	if w := r.s.NextWakeup(); !w.Equal(t0.Add(60 * time.Second)) {
		t.Fatalf("wakeup %v, want the idle timeout", w)
	}
	a := newAttempt("r1", 1, "s1")
	acts := r.do(r.s.OnMessage(t0.Add(time.Millisecond), a.batch(rows[:4])))
	if kinds(acts) != "send-ack,yield" || acts[0].Server != a.pid || acts[0].Msg.(*messages.BatchAck).Seq != 1 {
		t.Fatalf("first batch: %v", acts)
	}
	if w := r.s.NextWakeup(); !w.Equal(t0.Add(time.Millisecond + 2*time.Second)) {
		t.Fatalf("wakeup %v, want the stall timeout after the last batch", w)
	}
	r.do(r.s.OnMessage(t0.Add(2*time.Millisecond), a.batch(rows[4:])))
	acts = r.do(r.s.OnMessage(t0.Add(3*time.Millisecond), a.finished()))
	if kinds(acts) != "send-done,finish" {
		t.Fatalf("finish: %v, want a ScanDone (the winner sent more than one batch)", acts)
	}
	done := acts[0].Msg.(*messages.ScanDone)
	if acts[0].Coordinator != coordA || done.WinnerAttempt != 1 || done.Abandoned || done.RequestId != "r1" {
		t.Fatalf("ScanDone %v to %s", done, acts[0].Coordinator)
	}
	sameRows(t, r.yielded, rows)
	if !r.s.Done() || !r.s.NextWakeup().IsZero() {
		t.Fatal("a finished stream needs no timer")
	}
	if st := r.s.Stats(); st.Requests != 1 || st.Batches != 2 || st.Rows != 10 || st.Resumes != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestStreamOneWinner: the client alone decides the
// winner — the first RowBatch seen — cancels other attempts' streams
// straight at their servers, ignores the losers' ends, and names the
// winner, which sent two batches, in ScanDone.
func TestStreamOneWinner(t *testing.T) {
	rows := testRows(6)
	r := newRun(t, streamConfig())
	r.do(r.s.Start(t0))
	a1, a2 := newAttempt("r1", 1, "s1"), newAttempt("r1", 2, "s2")
	acts := r.do(r.s.OnMessage(t0, a2.batch(rows[:3])))
	if kinds(acts) != "send-ack,yield" {
		t.Fatalf("winner's batch: %v", acts)
	}
	// The loser streamed too (the tablet actor's cancel of it is
	// unless_streaming): the client cancels it, once.
	acts = r.do(r.s.OnMessage(t0, a1.batch(rows[:3])))
	if kinds(acts) != "send-cancel" || acts[0].Server != a1.pid {
		t.Fatalf("loser's batch: %v", acts)
	}
	if c := acts[0].Msg.(*messages.Cancel); c.RequestId != "r1" || c.Attempt != 1 || c.UnlessStreaming {
		t.Fatalf("cancel %v: want an unconditional cancel of attempt 1", c)
	}
	if acts := r.do(r.s.OnMessage(t0, a1.batch(rows[3:]))); len(acts) != 0 {
		t.Fatalf("second loser batch: %v, want nothing (cancelled already)", acts)
	}
	for _, m := range []*messages.ScanFinished{a1.finished(), a1.failed(messages.ErrorCode_ERROR_CODE_CANCELLED), a1.failed(messages.ErrorCode_ERROR_CODE_STORAGE)} {
		if acts := r.do(r.s.OnMessage(t0, m)); len(acts) != 0 {
			t.Fatalf("loser's end %v: %v, want it ignored", m.Error, acts)
		}
	}
	r.do(r.s.OnMessage(t0, a2.batch(rows[3:])))
	acts = r.do(r.s.OnMessage(t0, a2.finished()))
	if kinds(acts) != "send-done,finish" || acts[0].Msg.(*messages.ScanDone).WinnerAttempt != 2 {
		t.Fatalf("finish: %v", acts)
	}
	sameRows(t, r.yielded, rows)
	if n := len(find(r.acts, ActSendRequest)); n != 1 {
		t.Fatalf("%d requests: a healthy loser must not cause a resume", n)
	}
}

// TestStreamVerifiesBatches: a batch whose rows do not
// match its cumulative row count and checksum is never yielded; the
// stream resumes after the last key of the last verified batch, avoiding
// that server, and the end result is exactly the rows.
func TestStreamVerifiesBatches(t *testing.T) {
	cases := map[string]func(b *messages.RowBatch){
		"a row missing":   func(b *messages.RowBatch) { b.Rows = append(b.Rows[:1], b.Rows[2:]...) },
		"a value altered": func(b *messages.RowBatch) { b.Rows[1].Value = []byte("evil") },
		"a key altered":   func(b *messages.RowBatch) { b.Rows[2].Key = append(bytes.Clone(b.Rows[2].Key), 'x') },
		"a row repeated":  func(b *messages.RowBatch) { b.Rows = append(b.Rows[:2], b.Rows[1:]...) },
		"rows swapped":    func(b *messages.RowBatch) { b.Rows[0], b.Rows[1] = b.Rows[1], b.Rows[0] },
		"an extra row": func(b *messages.RowBatch) {
			b.Rows = append(b.Rows, &messages.Row{Key: []byte("k0099"), Value: []byte("x")})
		},
		"packed, truncated":      func(b *messages.RowBatch) { pack(b); b.PackedRows = b.PackedRows[:len(b.PackedRows)-1] },
		"packed, a byte flipped": func(b *messages.RowBatch) { pack(b); b.PackedRows[len(b.PackedRows)/2] ^= 1 },
		"packed, a length too long": func(b *messages.RowBatch) {
			pack(b)
			b.PackedRows[0] = 200 // the first key's length: beyond the batch
		},
		"both rows and packed": func(b *messages.RowBatch) { rows := b.Rows; pack(b); b.Rows = rows },
		"row count off":        func(b *messages.RowBatch) { b.RowCount++ },
		"checksum off":         func(b *messages.RowBatch) { b.Checksum ^= 1 },
		"no checksum (zeroed)": func(b *messages.RowBatch) { b.RowCount, b.Checksum = 0, 0 },
	}
	for name, corrupt := range cases {
		t.Run(name, func(t *testing.T) {
			r, a, rows := streaming(t, 12)
			bad := a.batch(cloneRows(rows[4:8]))
			corrupt(bad)
			acts := r.do(r.s.OnMessage(t0, bad))
			if len(find(acts, ActYield)) != 0 {
				t.Fatalf("a corrupt batch was yielded: %v", acts)
			}
			if kinds(acts) != "send-cancel,send-done,send-request" {
				t.Fatalf("corrupt batch: %v, want cancel + abandon + resume", acts)
			}
			if d := acts[1].Msg.(*messages.ScanDone); !d.Abandoned || d.WinnerAttempt != 1 {
				t.Fatalf("ScanDone %v", d)
			}
			req, coord := r.request()
			if coord != coordA || !bytes.Equal(req.ResumeAfter, rows[3].Key) || len(req.AvoidServers) != 1 || req.AvoidServers[0] != "s1" || req.ResumeCount != 1 {
				t.Fatalf("resume %v to %s: want after %s on the same coordinator, avoiding s1", req, coord, rows[3].Key)
			}
			// The rest of the stream, from the resume point, through the
			// same attempt number on another server.
			b := newAttempt(req.RequestId, 1, "s2")
			r.do(r.s.OnMessage(t0, b.batch(rows[4:9])))
			r.do(r.s.OnMessage(t0, b.batch(rows[9:])))
			r.do(r.s.OnMessage(t0, b.finished()))
			if !r.done {
				t.Fatalf("not done: %v", r.last)
			}
			sameRows(t, r.yielded, rows)
			if st := r.s.Stats(); st.Rejected != 1 || st.Resumes != 1 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// pack moves a batch's rows into packed_rows, as the scan server sends them.
func pack(b *messages.RowBatch) {
	for _, r := range b.Rows {
		b.PackedRows = tablets.AppendPackedRow(b.PackedRows, r.Key, r.Value)
	}
	b.Rows = nil
}

// TestStreamPackedRows: batches whose rows come packed
// (RowBatch.packed_rows, as scan servers send them) and batches with rows
// (older servers, the protocol simulation) are verified and yielded alike.
func TestStreamPackedRows(t *testing.T) {
	rows := testRows(10)
	r := newRun(t, streamConfig())
	r.do(r.s.Start(t0))
	a := newAttempt("r1", 1, "s1")
	b1 := a.batch(cloneRows(rows[:4]))
	pack(b1)
	if kinds(r.do(r.s.OnMessage(t0, b1))) != "send-ack,yield" {
		t.Fatalf("packed batch: %v", r.last)
	}
	r.do(r.s.OnMessage(t0, a.batch(cloneRows(rows[4:7]))))
	b3 := a.batch(cloneRows(rows[7:]))
	pack(b3)
	b3.Finished = a.finished()
	if kinds(r.do(r.s.OnMessage(t0, b3))) != "yield,send-done,finish" {
		t.Fatalf("packed final batch: %v", r.last)
	}
	sameRows(t, r.yielded, rows)
	if st := r.s.Stats(); st.Rejected != 0 || st.Batches != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func cloneRows(rows []*messages.Row) []*messages.Row {
	out := make([]*messages.Row, len(rows))
	for i, r := range rows {
		out[i] = &messages.Row{Key: bytes.Clone(r.Key), Value: bytes.Clone(r.Value)}
	}
	return out
}

// TestStreamVerifiesFinish: ScanFinished of the winner must match what was
// accepted (batches, rows, checksum), else the stream resumes.
func TestStreamVerifiesFinish(t *testing.T) {
	cases := map[string]func(f *messages.ScanFinished){
		"last batch lost": func(f *messages.ScanFinished) { f.Batches++; f.Rows += 3 },
		"rows off":        func(f *messages.ScanFinished) { f.Rows-- },
		"checksum off":    func(f *messages.ScanFinished) { f.Checksum ^= 0x10 },
	}
	for name, corrupt := range cases {
		t.Run(name, func(t *testing.T) {
			r, a, rows := streaming(t, 8)
			f := a.finished()
			corrupt(f)
			acts := r.do(r.s.OnMessage(t0, f))
			if kinds(acts) != "send-cancel,send-done,send-request" {
				t.Fatalf("bad finish: %v", acts)
			}
			req, _ := r.request()
			if !bytes.Equal(req.ResumeAfter, rows[3].Key) {
				t.Fatalf("resume after %q", req.ResumeAfter)
			}
			b := newAttempt(req.RequestId, 1, "s2")
			r.do(r.s.OnMessage(t0, b.batch(rows[4:])))
			r.do(r.s.OnMessage(t0, b.finished()))
			sameRows(t, r.yielded, rows)
		})
	}
}

func TestStreamSeqRules(t *testing.T) {
	rows := testRows(9)
	r := newRun(t, streamConfig())
	r.do(r.s.Start(t0))
	a := newAttempt("r1", 1, "s1")
	b1 := a.batch(rows[:3])
	r.do(r.s.OnMessage(t0, b1))
	if acts := r.do(r.s.OnMessage(t0, b1)); len(acts) != 0 {
		t.Fatalf("a duplicated batch: %v, want it ignored", acts)
	}
	a.batch(rows[3:6]) // lost on the way
	acts := r.do(r.s.OnMessage(t0, a.batch(rows[6:])))
	if len(find(acts, ActYield)) != 0 || len(find(acts, ActSendRequest)) != 1 {
		t.Fatalf("a gap: %v, want a resume and nothing yielded", acts)
	}
	req, _ := r.request()
	if !bytes.Equal(req.ResumeAfter, rows[2].Key) {
		t.Fatalf("resume after %q", req.ResumeAfter)
	}
}

// TestStreamStall: a winner quiet for StallTimeout is resumed on another
// server, avoiding it.
func TestStreamStall(t *testing.T) {
	rows := testRows(6)
	r := newRun(t, streamConfig())
	r.do(r.s.Start(t0))
	a := newAttempt("r1", 1, "s1")
	r.do(r.s.OnMessage(t0.Add(time.Second), a.batch(rows[:3])))
	at := t0.Add(3 * time.Second)
	if w := r.s.NextWakeup(); !w.Equal(at) {
		t.Fatalf("wakeup %v, want %v", w, at)
	}
	if acts := r.do(r.s.OnTimer(at.Add(-time.Nanosecond))); len(acts) != 0 {
		t.Fatalf("early timer: %v", acts)
	}
	acts := r.do(r.s.OnTimer(at))
	if kinds(acts) != "send-cancel,send-done,send-request" {
		t.Fatalf("stall: %v", acts)
	}
	if c := acts[0].Msg.(*messages.Cancel); c.Attempt != 1 || acts[0].Server != a.pid {
		t.Fatalf("cancel %v", c)
	}
	req, _ := r.request()
	if !bytes.Equal(req.ResumeAfter, rows[2].Key) || len(req.AvoidServers) != 1 || req.AvoidServers[0] != "s1" {
		t.Fatalf("resume %v", req)
	}
	if w := r.s.NextWakeup(); !w.Equal(at.Add(60 * time.Second)) {
		t.Fatalf("after a resume the idle timeout runs again: %v", w)
	}
	// A straggler batch of the stalled request: cancelled, not yielded.
	acts = r.do(r.s.OnMessage(at, a.batch(rows[3:])))
	if len(acts) != 0 {
		t.Fatalf("straggler of a cancelled attempt: %v (it was cancelled already)", acts)
	}
	other := newAttempt("r1", 2, "s3")
	acts = r.do(r.s.OnMessage(at, other.batch(rows[3:])))
	if kinds(acts) != "send-cancel" || acts[0].Server != other.pid {
		t.Fatalf("straggler of another attempt of an old request: %v", acts)
	}
	b := newAttempt(req.RequestId, 1, "s2")
	r.do(r.s.OnMessage(at, b.batch(rows[3:])))
	r.do(r.s.OnMessage(at, b.finished()))
	sameRows(t, r.yielded, rows)
}

// TestStreamIdle: a request that has no data and hears nothing for
// IdleTimeout goes to the next coordinator, avoiding the silent one (the
// owner it was forwarded to, when it was), and names the silent one for
// the client's other streams; progress messages keep it
// waiting; with every coordinator silent the stream fails after
// CoordinatorWait, naming them.
func TestStreamIdle(t *testing.T) {
	cfg := streamConfig()
	cfg.IdleTimeout = 5 * time.Second
	r := newRun(t, cfg)
	r.do(r.s.Start(t0))
	if w := r.s.NextWakeup(); !w.Equal(t0.Add(5 * time.Second)) {
		t.Fatalf("wakeup %v", w)
	}
	// A progress message at +3s: the request is alive; wait on.
	r.do(r.s.OnMessage(t0.Add(3*time.Second), &messages.ScanProgress{RequestId: "r1", Coordinator: coordA, State: "waiting for a server"}))
	at := t0.Add(8 * time.Second)
	if w := r.s.NextWakeup(); !w.Equal(at) {
		t.Fatalf("wakeup after progress %v, want %v", w, at)
	}
	if !strings.Contains(r.s.Waiting(), "waiting for a server") {
		t.Fatalf("Waiting() = %q, want the coordinator's progress", r.s.Waiting())
	}
	acts := r.do(r.s.OnTimer(at))
	req, to := r.request()
	if kinds(acts) != "coordinator-silent,send-request" || acts[0].Coordinator != coordA || to != coordB || req.RequestId != "r2" || len(req.AvoidCoordinators) != 1 || req.AvoidCoordinators[0] != coordA {
		t.Fatalf("silent coordinator: %v", acts)
	}
	// B forwards to an owner that never answers: the owner is avoided
	// next, and B (the next one up) gets the request again.
	const owner = "127.0.0.1:8099"
	r.do(r.s.OnMessage(at, &messages.ScanRouted{RequestId: "r2", Owner: owner}))
	at = at.Add(5 * time.Second)
	acts = r.do(r.s.OnTimer(at))
	req, to = r.request()
	if kinds(acts) != "coordinator-silent,send-done,send-request" || acts[0].Coordinator != owner || to != coordB || !slices.Contains(req.AvoidCoordinators, owner) {
		t.Fatalf("silent owner: %v", acts)
	}
	// B silent too: nobody is left; the stream fails after CoordinatorWait.
	at = at.Add(5 * time.Second)
	if acts := r.do(r.s.OnTimer(at)); len(find(acts, ActSendRequest)) != 0 {
		t.Fatalf("every coordinator silent, yet: %v", acts)
	}
	r.do(r.s.OnTimer(at.Add(cfg.CoordinatorWait)))
	if !errors.Is(r.err, ErrNoCoordinator) || !strings.Contains(r.err.Error(), coordB) || !strings.Contains(r.err.Error(), "no answer") {
		t.Fatalf("idle error %v", r.err)
	}
}

// TestStreamOverloadedBacksOff: an OVERLOADED answer sends the request
// again after a jittered back-off that doubles; data resets it; after
// maxOverloaded answers in a row the stream fails with OVERLOADED.
func TestStreamOverloadedBacksOff(t *testing.T) {
	cfg := streamConfig()
	var asked []time.Duration
	cfg.Jitter = func(d time.Duration) time.Duration { asked = append(asked, d); return d }
	r := newRun(t, cfg)
	r.do(r.s.Start(t0))
	now := t0
	for i := range maxOverloaded {
		req, _ := r.request()
		r.do(r.s.OnMessage(now, &messages.ScanError{RequestId: req.RequestId, Code: messages.ErrorCode_ERROR_CODE_OVERLOADED, Message: "busy"}))
		if r.err != nil {
			t.Fatalf("answer %d failed the stream: %v", i+1, r.err)
		}
		want := min(overloadBackoff<<i, overloadBackoffMax)
		if w := r.s.NextWakeup(); !w.Equal(now.Add(want)) {
			t.Fatalf("answer %d: retry at %v, want +%v", i+1, w.Sub(now), want)
		}
		now = now.Add(want)
		if acts := r.do(r.s.OnTimer(now)); kinds(acts) != "send-request" {
			t.Fatalf("retry %d: %v", i+1, acts)
		}
	}
	if len(asked) != maxOverloaded {
		t.Fatalf("jitter asked %d times, want %d", len(asked), maxOverloaded)
	}
	req, _ := r.request()
	r.do(r.s.OnMessage(now, &messages.ScanError{RequestId: req.RequestId, Code: messages.ErrorCode_ERROR_CODE_OVERLOADED, Message: "busy"}))
	var se *ScanError
	if !errors.As(r.err, &se) || se.Code != messages.ErrorCode_ERROR_CODE_OVERLOADED {
		t.Fatalf("after %d OVERLOADED answers: %v, want the OVERLOADED error", maxOverloaded+1, r.err)
	}
}

// TestStreamCoordinatorLostBeforeData (item 6): the request goes again, with
// a new id, to the next coordinator; nothing goes to the lost one.
func TestStreamCoordinatorLostBeforeData(t *testing.T) {
	rows := testRows(4)
	r := newRun(t, streamConfig())
	r.do(r.s.Start(t0))
	acts := r.do(r.s.OnCoordinatorLost(t0.Add(time.Second), coordA, "endpoint terminated"))
	if kinds(acts) != "send-request" {
		t.Fatalf("lost before data: %v, want only a new request (nothing to the dead coordinator)", acts)
	}
	req, coord := r.request()
	if coord != coordB || req.RequestId != "r2" || req.ResumeCount != 0 {
		t.Fatalf("re-sent %v to %s", req, coord)
	}
	// A late answer of the first request's attempt is cancelled.
	old := newAttempt("r1", 1, "s1")
	if acts := r.do(r.s.OnMessage(t0, old.batch(rows[:2]))); kinds(acts) != "send-cancel" {
		t.Fatalf("old request's batch: %v", acts)
	}
	a := newAttempt("r2", 1, "s2")
	r.do(r.s.OnMessage(t0, a.batch(rows)))
	acts = r.do(r.s.OnMessage(t0, a.finished()))
	if kinds(acts) != "finish" {
		t.Fatalf("finish: %v", acts)
	}
	sameRows(t, r.yielded, rows)
	if st := r.s.Stats(); st.Resends != 1 || st.Resumes != 0 || st.Requests != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestStreamCoordinatorLostAfterData: a stream flowing from a scan server
// continues; its ScanDone is not sent to the dead coordinator.
func TestStreamCoordinatorLostAfterData(t *testing.T) {
	rows := testRows(6)
	cfg := streamConfig()
	cfg.Coordinators = []string{coordA}
	r := newRun(t, cfg)
	r.do(r.s.Start(t0))
	a := newAttempt("r1", 1, "s1")
	r.do(r.s.OnMessage(t0, a.batch(rows[:3])))
	if acts := r.do(r.s.OnCoordinatorLost(t0, coordA, "endpoint terminated")); len(acts) != 0 {
		t.Fatalf("lost after data: %v, want the stream to continue", acts)
	}
	r.do(r.s.OnMessage(t0, a.batch(rows[3:])))
	acts := r.do(r.s.OnMessage(t0, a.finished()))
	if kinds(acts) != "finish" {
		t.Fatalf("finish: %v, want no ScanDone to the lost coordinator", acts)
	}
	sameRows(t, r.yielded, rows)
}

// TestStreamNoCoordinator: the only coordinator is lost and none comes back
// within CoordinatorWait: one line naming the lost coordinator.
func TestStreamNoCoordinator(t *testing.T) {
	cfg := streamConfig()
	cfg.Coordinators = []string{coordA}
	r := newRun(t, cfg)
	r.do(r.s.Start(t0))
	lostAt := t0.Add(time.Second)
	if acts := r.do(r.s.OnCoordinatorLost(lostAt, coordA, "endpoint terminated")); len(acts) != 0 {
		t.Fatalf("lost: %v, want waiting", acts)
	}
	if w := r.s.NextWakeup(); !w.Equal(lostAt.Add(3 * time.Second)) {
		t.Fatalf("wakeup %v, want lost + CoordinatorWait", w)
	}
	if acts := r.do(r.s.OnTimer(lostAt.Add(2 * time.Second))); len(acts) != 0 {
		t.Fatalf("early: %v", acts)
	}
	acts := r.do(r.s.OnTimer(lostAt.Add(3 * time.Second)))
	if kinds(acts) != "fail" {
		t.Fatalf("wait over: %v", acts)
	}
	want := "client: no coordinator: coordinator 127.0.0.1:8090 was lost (endpoint terminated) and no other answered within 3s (it was the only coordinator this client knew)"
	if r.err.Error() != want || !errors.Is(r.err, ErrNoCoordinator) {
		t.Fatalf("error %q, want %q", r.err, want)
	}
}

// TestStreamCoordinatorBack: the same coordinator coming back (a restart on
// the same address) gets the request again.
func TestStreamCoordinatorBack(t *testing.T) {
	cfg := streamConfig()
	cfg.Coordinators = []string{coordA}
	r := newRun(t, cfg)
	r.do(r.s.Start(t0))
	r.do(r.s.OnCoordinatorLost(t0, coordA, "restarted (new incarnation)"))
	acts := r.do(r.s.OnCoordinatorUp(t0.Add(time.Second), coordA))
	req, coord := r.request()
	if kinds(acts) != "send-request" || coord != coordA || req.RequestId != "r2" {
		t.Fatalf("back: %v", acts)
	}
	rows := testRows(3)
	a := newAttempt("r2", 1, "s1")
	r.do(r.s.OnMessage(t0, a.batch(rows)))
	r.do(r.s.OnMessage(t0, a.finished()))
	sameRows(t, r.yielded, rows)
}

// TestStreamStartsWithCoordinatorsLost: a stream that starts while every
// coordinator is known lost waits for one, then fails naming it.
func TestStreamStartsWithCoordinatorsLost(t *testing.T) {
	cfg := streamConfig()
	cfg.Lost = map[string]string{coordA: "endpoint terminated", coordB: "endpoint terminated"}
	r := newRun(t, cfg)
	if acts := r.do(r.s.Start(t0)); len(acts) != 0 {
		t.Fatalf("start: %v", acts)
	}
	r.do(r.s.OnTimer(t0.Add(3 * time.Second)))
	if r.err == nil || !strings.Contains(r.err.Error(), "coordinator "+coordA+" was lost") || !strings.Contains(r.err.Error(), "also lost: "+coordB) {
		t.Fatalf("error %v", r.err)
	}
}

// TestStreamResumeWhileCoordinatorLost: a flowing stream that breaks after
// its coordinator died asks the next one.
func TestStreamResumeWhileCoordinatorLost(t *testing.T) {
	rows := testRows(6)
	r := newRun(t, streamConfig())
	r.do(r.s.Start(t0))
	a := newAttempt("r1", 1, "s1")
	r.do(r.s.OnMessage(t0, a.batch(rows[:3])))
	r.do(r.s.OnCoordinatorLost(t0, coordA, "endpoint terminated"))
	acts := r.do(r.s.OnMessage(t0, a.failed(messages.ErrorCode_ERROR_CODE_STORAGE)))
	if kinds(acts) != "send-cancel,send-request" {
		t.Fatalf("resume: %v, want no ScanDone to the lost coordinator", acts)
	}
	req, coord := r.request()
	if coord != coordB || !bytes.Equal(req.ResumeAfter, rows[2].Key) {
		t.Fatalf("resume %v to %s", req, coord)
	}
}

func TestStreamResumeLimit(t *testing.T) {
	cfg := streamConfig()
	cfg.MaxResumes = 2
	r := newRun(t, cfg)
	r.do(r.s.Start(t0))
	rows := testRows(3)
	now := t0
	for i := range 3 {
		req, _ := r.request()
		a := newAttempt(req.RequestId, 1, fmt.Sprintf("s%d", i))
		r.do(r.s.OnMessage(now, a.batch(rows[i:i+1])))
		now = now.Add(2 * time.Second)
		r.do(r.s.OnTimer(now))
	}
	var se *ScanError
	if !errors.As(r.err, &se) || se.Code != messages.ErrorCode_ERROR_CODE_RESUME_LIMIT || !strings.Contains(se.Message, "3 times") {
		t.Fatalf("error %v", r.err)
	}
	sameRows(t, r.yielded, rows)
}

// TestStreamDeadline: every request carries the scan's deadline, and the
// stream fails when it passes, abandoning its request.
func TestStreamDeadline(t *testing.T) {
	cfg := streamConfig()
	cfg.Deadline = t0.Add(5 * time.Second)
	r := newRun(t, cfg)
	r.do(r.s.Start(t0))
	req, _ := r.request()
	if got := time.Duration(req.TimeoutMs) * time.Millisecond; got != 5*time.Second {
		t.Fatalf("request timeout %v, want the scan's time left, 5s", got)
	}
	if w := r.s.NextWakeup(); !w.Equal(cfg.Deadline) {
		t.Fatalf("wakeup %v", w)
	}
	acts := r.do(r.s.OnTimer(cfg.Deadline))
	if kinds(acts) != "send-done,fail" || !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %v, err %v", acts, r.err)
	}
	// Nothing answered the request: no coordinator did (as when the one
	// reached forwarded it to a member that died), and the error says so.
	if !errors.Is(r.err, ErrNoCoordinator) || !strings.Contains(r.err.Error(), "sent to coordinator") {
		t.Fatalf("deadline without an answer: %v, want ErrNoCoordinator naming the coordinator", r.err)
	}
	// Rows were flowing: the deadline is only a deadline.
	r = newRun(t, cfg)
	r.do(r.s.Start(t0))
	req, _ = r.request()
	a := newAttempt(req.RequestId, 1, "s1")
	r.do(r.s.OnMessage(t0, a.batch(testRows(2))))
	r.do(r.s.OnTimer(cfg.Deadline))
	if !errors.Is(r.err, context.DeadlineExceeded) || errors.Is(r.err, ErrNoCoordinator) {
		t.Fatalf("deadline while reading: %v, want DeadlineExceeded only", r.err)
	}
	// A stream started after its deadline fails at once.
	r = newRun(t, cfg)
	if acts := r.do(r.s.Start(cfg.Deadline)); kinds(acts) != "fail" {
		t.Fatalf("late start: %v", acts)
	}
}

func TestStreamErrors(t *testing.T) {
	for _, tc := range []struct {
		code   messages.ErrorCode
		resume bool
	}{
		// A scan server's error is never final: the coordinator retries
		// it on other hosts and answers ScanError when they agree.
		{messages.ErrorCode_ERROR_CODE_CORRUPT_BLOCK, true},
		{messages.ErrorCode_ERROR_CODE_BAD_REQUEST, true},
		{messages.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED, true},
		{messages.ErrorCode_ERROR_CODE_STALE_GENERATION, true},
		{messages.ErrorCode_ERROR_CODE_STORAGE, true},
		{messages.ErrorCode_ERROR_CODE_CANCELLED, true},
		{messages.ErrorCode_ERROR_CODE_SHUTTING_DOWN, true},
	} {
		r := newRun(t, streamConfig())
		r.do(r.s.Start(t0))
		a := newAttempt("r1", 1, "s1")
		r.do(r.s.OnMessage(t0, a.batch(testRows(2))))
		acts := r.do(r.s.OnMessage(t0, a.failed(tc.code)))
		if got := len(find(acts, ActSendRequest)) == 1; got != tc.resume {
			t.Errorf("%v: %v, want resume=%v", tc.code, acts, tc.resume)
		}
		var se *ScanError
		if !tc.resume && (!errors.As(r.err, &se) || se.Code != tc.code) {
			t.Errorf("%v: error %v", tc.code, r.err)
		}
	}
	// ScanError from the coordinator ends the stream with its code.
	r := newRun(t, streamConfig())
	r.do(r.s.Start(t0))
	r.do(r.s.OnMessage(t0, &messages.ScanError{RequestId: "r0", Code: messages.ErrorCode_ERROR_CODE_NO_SERVERS}))
	if r.err != nil {
		t.Fatal("a ScanError of another request must be ignored")
	}
	r.do(r.s.OnMessage(t0, &messages.ScanError{RequestId: "r1", Code: messages.ErrorCode_ERROR_CODE_NO_SERVERS, Message: "group batch has no servers"}))
	var se *ScanError
	if !errors.As(r.err, &se) || se.Code != messages.ErrorCode_ERROR_CODE_NO_SERVERS {
		t.Fatalf("error %v", r.err)
	}
	// The block store failing on every server: the coordinator's STORAGE
	// error reaches the caller named, with its message.
	r = newRun(t, streamConfig())
	r.do(r.s.Start(t0))
	r.do(r.s.OnMessage(t0, &messages.ScanError{RequestId: "r1", Code: messages.ErrorCode_ERROR_CODE_STORAGE,
		Message: "servers on 3 hosts failed reading the block store; last error: no answer within 10s"}))
	if !errors.As(r.err, &se) || se.Code != messages.ErrorCode_ERROR_CODE_STORAGE ||
		!strings.Contains(r.err.Error(), "ERROR_CODE_STORAGE: servers on 3 hosts failed reading the block store") {
		t.Fatalf("error %v", r.err)
	}
	// An attempt failing before any data is the tablet actor's to retry.
	r = newRun(t, streamConfig())
	r.do(r.s.Start(t0))
	if acts := r.do(r.s.OnMessage(t0, newAttempt("r1", 1, "s1").failed(messages.ErrorCode_ERROR_CODE_STORAGE))); len(acts) != 0 {
		t.Fatalf("failed attempt without data: %v", acts)
	}
}

// TestStreamLostBatchesBeforeWinner: an attempt that ends after sending
// batches none of which arrived: resume at once rather than wait.
func TestStreamLostBatchesBeforeWinner(t *testing.T) {
	r := newRun(t, streamConfig())
	r.do(r.s.Start(t0))
	a := newAttempt("r1", 1, "s1")
	a.batch(testRows(3))
	acts := r.do(r.s.OnMessage(t0, a.finished()))
	if len(find(acts, ActSendRequest)) != 1 || len(find(acts, ActYield)) != 0 {
		t.Fatalf("%v", acts)
	}
}

func TestStreamEmptyPiece(t *testing.T) {
	r := newRun(t, streamConfig())
	r.do(r.s.Start(t0))
	acts := r.do(r.s.OnMessage(t0, newAttempt("r1", 1, "s1").finished()))
	if kinds(acts) != "finish" {
		t.Fatalf("empty: %v", acts)
	}
}

// TestStreamBadKeysResume: a batch whose checksum matches (the server
// itself is wrong) but whose keys leave the tablet's range or go back is
// refused, wherever in the batch the bad key is: nothing of it is
// yielded, and the stream resumes after the last yielded key, avoiding
// the server.
func TestStreamBadKeysResume(t *testing.T) {
	rows := testRows(8)
	key := func(k string) *messages.Row { return &messages.Row{Key: []byte(k), Value: []byte("v")} }
	for name, tc := range map[string]struct {
		first, second []*messages.Row
		yielded       int // rows yielded before the bad batch
	}{
		"before the start":       {rows[1:3], rows[3:4], 0},
		"first past the end":     {rows[2:4], rows[5:6], 2},
		"last past the end":      {rows[2:4], []*messages.Row{rows[4], rows[5]}, 2},
		"first before the last":  {rows[2:4], []*messages.Row{rows[3], rows[4]}, 2},
		"a repeat in the middle": {rows[2:4], []*messages.Row{rows[4], key("k0004"), key("k0004a")}, 2},
		"back in the middle":     {rows[2:4], []*messages.Row{key("k0003a"), key("k0003"), rows[4]}, 2},
	} {
		t.Run(name, func(t *testing.T) {
			r := &run{t: t, s: NewTabletStream(streamConfig(), testRef, tablets.Range{Start: []byte("k0002"), End: []byte("k0005")})}
			r.do(r.s.Start(t0))
			a := newAttempt("r1", 1, "s1")
			r.do(r.s.OnMessage(t0, a.batch(tc.first)))
			r.do(r.s.OnMessage(t0, a.batch(tc.second)))
			acts := r.acts
			reqs := find(acts, ActSendRequest)
			if r.err != nil || len(r.yielded) != tc.yielded || r.s.Stats().Rejected != 1 || len(reqs) == 0 ||
				!slices.Contains(reqs[len(reqs)-1].Msg.(*messages.ScanRequest).GetAvoidServers(), "s1") {
				t.Fatalf("err %v, %d rows yielded, %d rejected, actions %v; want a resume avoiding s1 after %d rows",
					r.err, len(r.yielded), r.s.Stats().Rejected, acts, tc.yielded)
			}
		})
	}
}

// TestStreamLimit: a resume after the limit is reached ends the stream
// instead of asking for "0 = all" rows.
func TestStreamLimit(t *testing.T) {
	cfg := streamConfig()
	cfg.Limit = 3
	r := newRun(t, cfg)
	r.do(r.s.Start(t0))
	if req, _ := r.request(); req.Limit != 3 {
		t.Fatalf("limit %d", req.Limit)
	}
	a := newAttempt("r1", 1, "s1")
	r.do(r.s.OnMessage(t0, a.batch(testRows(3))))
	acts := r.do(r.s.OnTimer(t0.Add(2 * time.Second)))
	if len(find(acts, ActSendRequest)) != 0 || !r.done {
		t.Fatalf("stall at the limit: %v", acts)
	}
}

func TestStreamAbandon(t *testing.T) {
	r := newRun(t, streamConfig())
	r.do(r.s.Start(t0))
	a := newAttempt("r1", 1, "s1")
	r.do(r.s.OnMessage(t0, a.batch(testRows(2))))
	acts := r.do(r.s.Abandon(t0))
	if kinds(acts) != "send-cancel,send-done" || !acts[1].Msg.(*messages.ScanDone).Abandoned {
		t.Fatalf("abandon: %v", acts)
	}
	if acts := r.s.Abandon(t0); len(acts) != 0 {
		t.Fatal("second abandon")
	}
	// A batch after the end is cancelled at its server.
	if acts := r.s.OnMessage(t0, newAttempt("r1", 2, "s2").batch(nil)); kinds(acts) != "send-cancel" {
		t.Fatalf("after the end: %v", acts)
	}
}

// TestStreamFaultyTransport: random loss, duplication, corruption and
// stalls on the row stream; whatever happens, the stream yields exactly
// the rows in order, never a wrong row. Seeds are fixed; a failure names
// its seed.
func TestStreamFaultyTransport(t *testing.T) {
	truth := testRows(200)
	rejected, resumes := 0, 0
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		cfg := streamConfig()
		cfg.MaxResumes = 1000
		r := newRun(t, cfg)
		now := t0
		sent := 0 // requests seen
		countRequests := func() bool {
			n := len(find(r.acts, ActSendRequest))
			resumed := n > sent
			sent = n
			return resumed
		}
		r.do(r.s.Start(now))
		countRequests()
		for rounds := 0; !r.done && r.err == nil; rounds++ {
			if rounds > 2000 {
				t.Fatalf("seed %d: no end after %d requests", seed, rounds)
			}
			req := find(r.acts, ActSendRequest)[sent-1].Msg.(*messages.ScanRequest)
			i := 0
			for i < len(truth) && req.ResumeAfter != nil && bytes.Compare(truth[i].Key, req.ResumeAfter) <= 0 {
				i++
			}
			a := newAttempt(req.RequestId, 1, fmt.Sprintf("s%d", rng.IntN(5)))
		stream:
			for !r.done && r.err == nil {
				now = now.Add(time.Millisecond)
				n := min(1+rng.IntN(20), len(truth)-i)
				if n == 0 {
					r.do(r.s.OnMessage(now, a.finished()))
					countRequests()
					break
				}
				b := a.batch(cloneRows(truth[i : i+n]))
				i += n
				switch rng.IntN(12) {
				case 0: // lost
					continue
				case 1:
					b.Rows[rng.IntN(len(b.Rows))].Value = []byte("corrupt")
				case 2:
					b.Rows = b.Rows[1:]
				case 3: // duplicated
					r.do(r.s.OnMessage(now, b))
				case 4: // the server stalls
					now = now.Add(cfg.StallTimeout)
					r.do(r.s.OnTimer(now))
					if countRequests() {
						break stream
					}
					continue
				}
				r.do(r.s.OnMessage(now, b))
				if countRequests() {
					break stream
				}
			}
		}
		if r.err != nil {
			t.Fatalf("seed %d: %v", seed, r.err)
		}
		sameRows(t, r.yielded, truth)
		st := r.s.Stats()
		rejected += st.Rejected
		resumes += st.Resumes
	}
	if rejected < 300 || resumes < 600 {
		t.Fatalf("the faults hardly happened: %d batches rejected, %d resumes over 300 seeds", rejected, resumes)
	}
	t.Logf("%d batches rejected, %d resumes over 300 seeds", rejected, resumes)
}

// TestStreamByOwner: with ByOwner a tablet's request goes to its owner
// among the coordinators up (tablets.Owner, as the coordinators place
// tablet actors), and to the next owner when that one is lost.
func TestStreamByOwner(t *testing.T) {
	coords := []string{coordA, coordB, "127.0.0.1:8092"}
	id := tablets.Identity(testRef.Table, testRef.Generation, testRef.Index)
	owner := tablets.Owner(coords, id)
	cfg := streamConfig()
	cfg.Coordinators, cfg.ByOwner = coords, true
	r := newRun(t, cfg)
	r.do(r.s.Start(t0))
	if _, c := r.request(); c != owner {
		t.Fatalf("first request to %s, want the owner %s", c, owner)
	}
	r.do(r.s.OnCoordinatorLost(t0, owner, "lease expired"))
	rest := slices.DeleteFunc(slices.Clone(coords), func(a string) bool { return a == owner })
	req, c := r.request()
	if want := tablets.Owner(rest, id); c != want {
		t.Fatalf("re-sent to %s, want the next owner %s", c, want)
	}
	if !slices.Equal(req.AvoidCoordinators, []string{owner}) {
		t.Fatalf("avoid_coordinators %v, want [%s]", req.AvoidCoordinators, owner)
	}
}

// TestStreamRoutedToLostOwner: the router forwarded the request to a
// coordinator the client knows lost (the router's view lags): the request
// is sent again at once, naming the lost one; when the owner is lost
// later, before data, likewise; after data the stream continues.
func TestStreamRoutedToLostOwner(t *testing.T) {
	const coordC = "127.0.0.1:8092"
	cfg := streamConfig()
	cfg.Coordinators = []string{coordA, coordB, coordC}
	r := newRun(t, cfg)
	r.do(r.s.OnCoordinatorLost(t0, coordC, "lease expired"))
	r.do(r.s.Start(t0))
	if _, c := r.request(); c != coordA {
		t.Fatalf("first request to %s", c)
	}
	acts := r.do(r.s.OnMessage(t0, &messages.ScanRouted{RequestId: "r1", Owner: coordC}))
	if kinds(acts) != "send-done,send-request" {
		t.Fatalf("routed to a lost owner: %v, want ScanDone to the router and a new request", acts)
	}
	req, _ := r.request()
	if req.RequestId != "r2" || !slices.Equal(req.AvoidCoordinators, []string{coordC}) {
		t.Fatalf("re-sent %v", req)
	}
	// Routed to a live owner that is lost later, before data: re-sent.
	r.do(r.s.OnMessage(t0, &messages.ScanRouted{RequestId: "r2", Owner: coordB}))
	if len(r.last) != 0 {
		t.Fatalf("routed to a live owner: %v", r.last)
	}
	acts = r.do(r.s.OnCoordinatorLost(t0, coordB, "lease expired"))
	if kinds(acts) != "send-done,send-request" {
		t.Fatalf("owner lost before data: %v", acts)
	}
	req, _ = r.request()
	if req.RequestId != "r3" {
		t.Fatalf("re-sent %v", req)
	}
	// Routed to coordC? no: a stale ScanRouted of an old request is ignored.
	if acts := r.do(r.s.OnMessage(t0, &messages.ScanRouted{RequestId: "r1", Owner: coordC})); len(acts) != 0 {
		t.Fatalf("old request's ScanRouted: %v", acts)
	}
	rows := testRows(4)
	a := newAttempt("r3", 1, "s1")
	r.do(r.s.OnMessage(t0, &messages.ScanRouted{RequestId: "r3", Owner: coordA}))
	r.do(r.s.OnMessage(t0, a.batch(rows[:2])))
	if acts := r.do(r.s.OnCoordinatorLost(t0, coordA, "lease expired")); len(acts) != 0 {
		t.Fatalf("owner lost after data: %v, want the stream to continue", acts)
	}
	r.do(r.s.OnMessage(t0, a.batch(rows[2:])))
	r.do(r.s.OnMessage(t0, a.finished()))
	sameRows(t, r.yielded, rows)
	if !r.done {
		t.Fatal("not finished")
	}
}

// TestStreamCoordinatorShuttingDown: SHUTTING_DOWN from the coordinator
// (it leaves the cluster) re-sends a request without data elsewhere and
// lets a flowing stream go on.
func TestStreamCoordinatorShuttingDown(t *testing.T) {
	r := newRun(t, streamConfig())
	r.do(r.s.Start(t0))
	acts := r.do(r.s.OnMessage(t0, &messages.ScanError{RequestId: "r1", Code: messages.ErrorCode_ERROR_CODE_SHUTTING_DOWN}))
	if kinds(acts) != "send-request" || r.err != nil {
		t.Fatalf("shutting down before data: %v (err %v)", acts, r.err)
	}
	if _, c := r.request(); c != coordB {
		t.Fatalf("re-sent to %s", c)
	}
	rows := testRows(4)
	a := newAttempt("r2", 1, "s1")
	r.do(r.s.OnMessage(t0, a.batch(rows[:2])))
	if acts := r.do(r.s.OnMessage(t0, &messages.ScanError{RequestId: "r2", Code: messages.ErrorCode_ERROR_CODE_SHUTTING_DOWN})); len(acts) != 0 || r.err != nil {
		t.Fatalf("shutting down after data: %v (err %v)", acts, r.err)
	}
	r.do(r.s.OnMessage(t0, a.batch(rows[2:])))
	r.do(r.s.OnMessage(t0, a.finished()))
	sameRows(t, r.yielded, rows)
	if !r.done {
		t.Fatal("not finished")
	}
}

// finalBatch is a's last batch carrying its ScanFinished (RowBatch.finished),
// as a scan server sends it when the end is known as the batch goes out.
func (a *attempt) finalBatch(rows []*messages.Row) *messages.RowBatch {
	b := a.batch(rows)
	b.Finished = a.finished()
	return b
}

// TestStreamFinalBatch: a last batch carrying the ScanFinished
// ends the tablet at once: its rows are yielded, it is not acknowledged,
// and the coordinator gets no ScanDone when it was the only batch (the
// server's ScanFinished ends the flow), one naming the winner after more
// batches. A one-row scan is then one request and one batch on the
// client's side.
func TestStreamFinalBatch(t *testing.T) {
	for _, n := range []int{1, 7} {
		t.Run(fmt.Sprintf("%d rows", n), func(t *testing.T) {
			rows := testRows(n)
			r := newRun(t, streamConfig())
			r.do(r.s.Start(t0))
			a := newAttempt("r1", 1, "s1")
			var acts []StreamAction
			if n > 4 {
				r.do(r.s.OnMessage(t0, a.batch(rows[:4])))
				acts = r.do(r.s.OnMessage(t0, a.finalBatch(rows[4:])))
			} else {
				acts = r.do(r.s.OnMessage(t0, a.finalBatch(rows)))
			}
			want := "yield,finish"
			if n > 4 {
				want = "yield,send-done,finish"
			}
			if kinds(acts) != want {
				t.Fatalf("final batch: %v, want %s (no ack)", acts, want)
			}
			if n > 4 {
				if d := acts[1].Msg.(*messages.ScanDone); d.WinnerAttempt != 1 || d.Abandoned || acts[1].Coordinator != coordA {
					t.Fatalf("ScanDone %v to %s", d, acts[1].Coordinator)
				}
			}
			sameRows(t, r.yielded, rows)
			if !r.s.Done() || !r.s.NextWakeup().IsZero() {
				t.Fatal("a finished stream needs no timer")
			}
			// A late separate ScanFinished (a server that sent both) is ignored.
			if acts := r.s.OnMessage(t0, a.finished()); len(acts) != 0 {
				t.Fatalf("ScanFinished after a final batch: %v", acts)
			}
		})
	}
}

// TestStreamVerifiesFinalBatch: the ScanFinished inside a last batch must
// agree with the batch (same request and attempt, a success, batches =
// seq, rows and checksum = the batch's); else nothing of the batch is
// yielded and the stream resumes after the last verified key, avoiding
// the server, with an error naming the field.
func TestStreamVerifiesFinalBatch(t *testing.T) {
	cases := map[string]struct {
		corrupt func(f *messages.ScanFinished)
		field   string
	}{
		"request id": {func(f *messages.ScanFinished) { f.RequestId = "other" }, "finished.request_id"},
		"attempt":    {func(f *messages.ScanFinished) { f.Attempt = 2 }, "finished.attempt"},
		"error":      {func(f *messages.ScanFinished) { f.Error = messages.ErrorCode_ERROR_CODE_STORAGE }, "finished.error"},
		"batches":    {func(f *messages.ScanFinished) { f.Batches++ }, "finished.batches"},
		"rows":       {func(f *messages.ScanFinished) { f.Rows-- }, "finished.rows"},
		"checksum":   {func(f *messages.ScanFinished) { f.Checksum ^= 1 }, "finished.checksum"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r, a, rows := streaming(t, 8)
			b := a.finalBatch(rows[4:])
			tc.corrupt(b.Finished)
			if err := checkFinalBatch(b); err == nil || !errors.Is(err, ErrStream) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("checkFinalBatch: %v, want ErrStream naming %s", err, tc.field)
			}
			acts := r.do(r.s.OnMessage(t0, b))
			if len(find(acts, ActYield)) != 0 || kinds(acts) != "send-cancel,send-done,send-request" {
				t.Fatalf("bad final batch: %v, want no yield, cancel + abandon + resume", acts)
			}
			req, _ := r.request()
			if !bytes.Equal(req.ResumeAfter, rows[3].Key) || len(req.AvoidServers) != 1 || req.AvoidServers[0] != "s1" {
				t.Fatalf("resume %v", req)
			}
			c := newAttempt(req.RequestId, 1, "s2")
			r.do(r.s.OnMessage(t0, c.finalBatch(rows[4:])))
			if !r.done {
				t.Fatalf("not done: %v", r.last)
			}
			sameRows(t, r.yielded, rows)
		})
	}
}

// TestStreamOwnsResumeKey: the caller owns the rows it was given and may
// overwrite their bytes; a later resume still starts after the true last
// key, and the order check still compares against it.
func TestStreamOwnsResumeKey(t *testing.T) {
	rows := testRows(6)
	r := newRun(t, streamConfig())
	r.do(r.s.Start(t0))
	a := newAttempt("r1", 1, "s1")
	acts := r.do(r.s.OnMessage(t0, a.batch(rows[:3])))
	want := bytes.Clone(rows[2].Key)
	for _, y := range find(acts, ActYield) {
		for _, row := range y.Rows {
			for i := range row.Key {
				row.Key[i] = 0xff // the caller reuses the key's bytes
			}
		}
	}
	r.do(r.s.OnTimer(t0.Add(time.Hour)))
	req, _ := r.request()
	if !bytes.Equal(req.ResumeAfter, want) {
		t.Fatalf("resume_after %q, want %q", req.ResumeAfter, want)
	}
	b := newAttempt(req.RequestId, 1, "s2")
	r.do(r.s.OnMessage(t0.Add(time.Hour), b.batch(rows[3:])))
	r.do(r.s.OnMessage(t0.Add(time.Hour), b.finished()))
	if r.err != nil || !r.done {
		t.Fatalf("after the resume: err %v, done %v", r.err, r.done)
	}
}

// TestStreamCoalescedAcks: with a window of 16 the stream acknowledges the
// first batch at once and then one batch in AckEvery(16), cumulatively, so
// no more than AckEvery-1 batches it verified are unacknowledged, and the
// server's window never closes on batches the client holds.
func TestStreamCoalescedAcks(t *testing.T) {
	cfg := streamConfig()
	cfg.Window = 16
	every := uint64(AckEvery(cfg.Window))
	if every < 2 || every > uint64(cfg.Window) {
		t.Fatalf("AckEvery(%d) = %d, want in [2, %d]", cfg.Window, every, cfg.Window)
	}
	rows := testRows(40)
	r := newRun(t, cfg)
	r.do(r.s.Start(t0))
	a := newAttempt("r1", 1, "s1")
	var acked []uint64
	for i := range 20 {
		acts := r.do(r.s.OnMessage(t0, a.batch(rows[2*i:2*i+2])))
		for _, ack := range find(acts, ActSendAck) {
			acked = append(acked, ack.Msg.(*messages.BatchAck).Seq)
		}
		last := uint64(0)
		if len(acked) > 0 {
			last = acked[len(acked)-1]
		}
		if a.seq-last >= every {
			t.Fatalf("after batch %d the last ack is for %d (acks %v): %d unacknowledged", a.seq, last, acked, a.seq-last)
		}
	}
	if len(acked) == 0 || acked[0] != 1 {
		t.Fatalf("acks %v: want the first batch acknowledged at once", acked)
	}
	if want := 1 + (20-1)/int(every); len(acked) != want {
		t.Fatalf("acks %v: %d, want %d", acked, len(acked), want)
	}
	r.do(r.s.OnMessage(t0, a.finished()))
	sameRows(t, r.yielded, rows)
}
