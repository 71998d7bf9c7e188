package coordinator_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/wire"
)

// recorder stands in for a client and a tablet actor: it records what
// arrives and acknowledges every batch unless told not to (ids starting
// with "hold").
type recorder struct {
	mu   sync.Mutex
	msgs []any
	pid  *actor.PID
	root *actor.RootContext
}

func newRecorder(t *testing.T) *recorder {
	s := actorSystem(t)
	r := &recorder{root: s.Actors.Root}
	r.pid = s.Actors.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *messages.RowBatch:
			if !strings.HasPrefix(m.RequestId, "hold") {
				c.Send(wire.ToPID(m.ServerPid), &messages.BatchAck{RequestId: m.RequestId, Attempt: m.Attempt, Seq: m.Seq})
			}
			r.add(m)
		case *messages.ScanStarted, *messages.ScanFinished, *messages.ScanError, *messages.Busy:
			r.add(m)
		}
	}))
	t.Cleanup(func() { s.Actors.Root.Stop(r.pid) })
	return r
}

func (r *recorder) add(m any) {
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
}

func (r *recorder) wait(t *testing.T, what string, pred func(any) bool) any {
	t.Helper()
	var got any
	waitFor(t, what, 30*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, m := range r.msgs {
			if pred(m) {
				got = m
				return true
			}
		}
		return false
	})
	return got
}

func (r *recorder) count(pred func(any) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if pred(m) {
			n++
		}
	}
	return n
}

func scanErrorFor(id string) func(any) bool {
	return func(m any) bool { e, ok := m.(*messages.ScanError); return ok && e.RequestId == id }
}

// TestOutOfBoundsRequestsRefused: bounded wire input. Over real
// coordinator and scanserver processes, a StartScan sent straight to a
// scan server and a ScanRequest sent to the coordinator with a 1024 × 4 MiB
// window or an end key before the start key are answered BAD_REQUEST
// naming the field; a Cancel that does not name the attempt cancels
// nothing; and both processes go on serving valid scans, checked against
// the ground truth.
func TestOutOfBoundsRequestsRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts coordinator and scanserver processes")
	}
	tc := startCluster(t, clusterOpts{hosts: 1, servers: 1, rows: 2000, tablets: 1})
	rec := newRecorder(t)
	self := wire.FromPID(rec.pid)
	server := serverPID(tc, 0, 0)
	tm := tc.table.Tablets[0]
	start := func(id string, mod func(*messages.StartScan)) {
		m := &messages.StartScan{RequestId: id, Attempt: 1, Client: self, TabletActor: self, Tablet: tm.Ref,
			Files: tm.Files, Range: &messages.KeyRange{}, BatchRows: 100, BusyTimeoutUs: time.Minute.Microseconds()}
		mod(m)
		rec.root.Send(server, m)
	}

	// At the scan server.
	for _, bc := range []struct {
		id   string
		mod  func(*messages.StartScan)
		want string
	}{
		{"huge-window", func(m *messages.StartScan) { m.Window, m.BatchBytes = 1024, 4<<20 }, "window 1024 is over 256"},
		{"in-flight", func(m *messages.StartScan) { m.Window, m.BatchBytes = 64, 4<<20 }, "bytes in flight"},
		{"inverted", func(m *messages.StartScan) { m.Range = &messages.KeyRange{Start: []byte("row2"), End: []byte("row1")} }, "range: "},
		{"long-key", func(m *messages.StartScan) { m.Range = &messages.KeyRange{Start: make([]byte, wire.MaxKeyLen+1)} }, "range.start"},
	} {
		start(bc.id, bc.mod)
		f := rec.wait(t, "the answer to "+bc.id, finished(bc.id)).(*messages.ScanFinished)
		if f.Error != messages.ErrorCode_ERROR_CODE_BAD_REQUEST || !strings.Contains(f.ErrorMessage, bc.want) {
			t.Errorf("%s: finished with %v %q, want BAD_REQUEST naming %q", bc.id, f.Error, f.ErrorMessage, bc.want)
		}
		if rec.count(batchOf(bc.id)) != 0 {
			t.Errorf("%s: rows streamed for a refused StartScan", bc.id)
		}
	}
	start("valid", func(*messages.StartScan) {})
	if f := rec.wait(t, "the valid scan's end", finished("valid")).(*messages.ScanFinished); f.Error != 0 || f.Rows != uint64(len(tc.truth)) {
		t.Fatalf("valid scan after the refused ones: %v", f)
	}

	// A Cancel names the request and the attempt: one naming another
	// attempt, or none, leaves the stream running (it sends its next
	// batch once acknowledged); the right one ends it.
	start("hold-1", func(m *messages.StartScan) { m.Window = 1; m.BatchRows = 10 })
	b := rec.wait(t, "hold-1's first batch", batchOf("hold-1")).(*messages.RowBatch)
	rec.root.Send(server, &messages.Cancel{RequestId: "hold-1", Reason: "no attempt"})
	rec.root.Send(server, &messages.Cancel{RequestId: "hold-1", Attempt: 2, Reason: "another attempt"})
	rec.root.Send(server, &messages.BatchAck{RequestId: "hold-1", Attempt: 1, Seq: b.Seq})
	waitFor(t, "hold-1's second batch", 30*time.Second, func() bool { return rec.count(batchOf("hold-1")) >= 2 })
	if rec.count(finished("hold-1")) != 0 {
		t.Fatal("a Cancel without the attempt ended the scan")
	}
	rec.root.Send(server, &messages.Cancel{RequestId: "hold-1", Attempt: 1, Reason: "test"})
	if f := rec.wait(t, "hold-1 cancelled", finished("hold-1")).(*messages.ScanFinished); !f.Cancelled {
		t.Fatalf("hold-1 after its Cancel: %v", f)
	}

	// At the coordinator's router.
	router := actor.NewPID(tc.cl.CoordinatorAddr(0), wire.RouterName)
	for _, bc := range []struct {
		id   string
		mod  func(*messages.ScanRequest)
		want string
	}{
		{"req-huge-window", func(m *messages.ScanRequest) { m.Window, m.BatchBytes = 1024, 4<<20 }, "window 1024 is over 256"},
		{"req-inverted", func(m *messages.ScanRequest) {
			m.Range = &messages.KeyRange{Start: []byte("row2"), End: []byte("row1")}
		}, "range: "},
		{"req-batch-rows", func(m *messages.ScanRequest) { m.BatchRows = 1 << 30 }, "batch_rows"},
	} {
		m := &messages.ScanRequest{RequestId: bc.id, Client: self, Tablet: tm.Ref, Range: &messages.KeyRange{},
			TimeoutMs: 60000}
		bc.mod(m)
		rec.root.Send(router, m)
		e := rec.wait(t, "the answer to "+bc.id, scanErrorFor(bc.id)).(*messages.ScanError)
		if e.Code != messages.ErrorCode_ERROR_CODE_BAD_REQUEST || !strings.Contains(e.Message, bc.want) {
			t.Errorf("%s: %v %q, want BAD_REQUEST naming %q", bc.id, e.Code, e.Message, bc.want)
		}
	}
	c := tc.client(nil)
	tc.check(c, 0, len(tc.truth), client.ScanOptions{})
	tc.check(c, 17, 1234, client.ScanOptions{})
}

// TestClientWindowWithinServerLimit: the client library refuses a window
// the servers would refuse.
func TestClientWindowWithinServerLimit(t *testing.T) {
	cfg := client.DefaultConfig()
	cfg.Window = wire.MaxWindow + 1
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "Window") {
		t.Fatalf("client Window %d: %v", cfg.Window, err)
	}
}
