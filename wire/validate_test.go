package wire

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/scanplane/scanplane/messages"
	"google.golang.org/protobuf/proto"
)

// checkCases runs validate on base changed by each case: "" wants it
// accepted, anything else an error wrapping ErrBadMessage whose text
// contains it (the field's name).
func checkCases[M proto.Message](t *testing.T, name string, validate func(M) error, base M, cases []struct {
	mod  func(M)
	want string
}) {
	t.Helper()
	if err := validate(base); err != nil {
		t.Fatalf("%s: the valid base message refused: %v", name, err)
	}
	for i, tc := range cases {
		m := proto.CloneOf(base)
		tc.mod(m)
		err := validate(m)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s case %d: refused %v: %v", name, i, m, err)
		case tc.want != "" && err == nil:
			t.Errorf("%s case %d: accepted, want an error naming %q", name, i, tc.want)
		case tc.want != "" && (!strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrBadMessage)):
			t.Errorf("%s case %d: error %q (ErrBadMessage: %v), want one naming %q", name, i, err, errors.Is(err, ErrBadMessage), tc.want)
		}
	}
}

type caseOf[M any] = struct {
	mod  func(M)
	want string
}

func TestValidateScanRequest(t *testing.T) {
	base := &messages.ScanRequest{RequestId: "c1-00112233445566778899aabbccddeeff", Client: &messages.Pid{Address: "127.0.0.1:1", Id: "client"},
		Tablet: &messages.TabletRef{Table: "t", Generation: 1, PrevEndRow: []byte("a"), EndRow: []byte("m")},
		Range:  &messages.KeyRange{Start: []byte("b"), End: []byte("c")}, Hints: map[string]string{"scan_type": "interactive"}}
	long := strings.Repeat("x", MaxNameLen+1)
	checkCases(t, "ScanRequest", ValidateScanRequest, base, []caseOf[*messages.ScanRequest]{
		{func(m *messages.ScanRequest) {}, ""},
		{func(m *messages.ScanRequest) { m.RequestId = "" }, "request_id is empty"},
		{func(m *messages.ScanRequest) { m.RequestId = strings.Repeat("r", MaxRequestIDLen+1) }, "request_id"},
		{func(m *messages.ScanRequest) { m.Client = nil }, "client pid is missing"},
		{func(m *messages.ScanRequest) { m.Client.Address = long }, "client.address"},
		{func(m *messages.ScanRequest) { m.Tablet = nil }, "tablet is missing"},
		{func(m *messages.ScanRequest) { m.Tablet.Table = "" }, "tablet.table is empty"},
		{func(m *messages.ScanRequest) { m.Tablet.Table = long }, "tablet.table"},
		{func(m *messages.ScanRequest) { m.Tablet.Generation = 0 }, "tablet.generation"},
		{func(m *messages.ScanRequest) { m.Tablet.EndRow = key(MaxKeyLen + 1) }, "tablet.end_row"},
		{func(m *messages.ScanRequest) { m.Tablet.PrevEndRow = key(MaxKeyLen + 1) }, "tablet.prev_end_row"},
		// Keys: the longest key is fine, one byte more is not.
		{func(m *messages.ScanRequest) { m.Range.Start, m.Range.End = key(MaxKeyLen), nil }, ""},
		{func(m *messages.ScanRequest) { m.Range.Start = key(MaxKeyLen + 1) }, "range.start"},
		{func(m *messages.ScanRequest) { m.Range.End = key(MaxKeyLen + 1) }, "range.end"},
		{func(m *messages.ScanRequest) { m.ResumeAfter = key(MaxKeyLen + 1) }, "resume_after"},
		// An end key before the start key.
		{func(m *messages.ScanRequest) { m.Range.Start, m.Range.End = []byte("z"), []byte("a") }, "range: "},
		{func(m *messages.ScanRequest) { m.Range.Start, m.Range.End = []byte("b"), []byte("b") }, ""},
		{func(m *messages.ScanRequest) { m.Range = nil }, ""}, // open: the whole tablet
		{func(m *messages.ScanRequest) { m.ResumeAfter = []byte("c") }, "resume_after is at or beyond"},
		// Flow control.
		{func(m *messages.ScanRequest) { m.Window = MaxWindow }, ""},
		{func(m *messages.ScanRequest) { m.Window = MaxWindow + 1 }, "window"},
		{func(m *messages.ScanRequest) { m.Window, m.BatchBytes = 1024, 4<<20 }, "window 1024"},
		{func(m *messages.ScanRequest) { m.Window, m.BatchBytes = 16, 4<<20 }, ""}, // 64 MiB
		{func(m *messages.ScanRequest) { m.Window, m.BatchBytes = 17, 4<<20 }, "in flight"},
		{func(m *messages.ScanRequest) { m.BatchBytes = 5 << 20 }, "batch_bytes"},
		{func(m *messages.ScanRequest) { m.BatchBytes = 100 }, "batch_bytes"},
		{func(m *messages.ScanRequest) { m.BatchRows = MaxBatchRows + 1 }, "batch_rows"},
		{func(m *messages.ScanRequest) { m.BatchRows = MaxBatchRows }, ""},
		// Lists and strings.
		{func(m *messages.ScanRequest) { m.AvoidServers = make([]string, MaxAvoidServers+1) }, "avoid_servers"},
		{func(m *messages.ScanRequest) { m.AvoidServers = []string{long} }, "avoid_servers[0]"},
		{func(m *messages.ScanRequest) { m.AvoidCoordinators = make([]string, MaxAvoidCoordinators+1) }, "avoid_coordinators"},
		{func(m *messages.ScanRequest) { m.AvoidCoordinators = []string{"a", long} }, "avoid_coordinators[1]"},
		{func(m *messages.ScanRequest) { m.ForwardedBy = long }, "forwarded_by"},
		{func(m *messages.ScanRequest) { m.Hints["scan_type"] = long }, "hints[scan_type]"},
		{func(m *messages.ScanRequest) { m.Hints[long] = "v" }, "hints key"},
		{func(m *messages.ScanRequest) {
			for i := range MaxHints {
				m.Hints[strings.Repeat("h", i+1)] = "v"
			}
		}, "hints has 33 entries"},
	})
}

func TestValidateStartScan(t *testing.T) {
	pid := &messages.Pid{Address: "127.0.0.1:1", Id: "x"}
	base := &messages.StartScan{RequestId: "r", Attempt: 1, Client: pid, TabletActor: pid, Tablet: &messages.TabletRef{Table: "t", Generation: 1},
		Files: []*messages.FileRef{{Id: "f1"}}, Range: &messages.KeyRange{Start: []byte("a"), End: []byte("b")}, Server: "h/0"}
	checkCases(t, "StartScan", ValidateStartScan, base, []caseOf[*messages.StartScan]{
		{func(m *messages.StartScan) { m.RequestId = "" }, "request_id is empty"},
		{func(m *messages.StartScan) { m.Attempt = 0 }, "attempt"},
		{func(m *messages.StartScan) { m.Client = nil }, "client pid"},
		{func(m *messages.StartScan) { m.TabletActor = nil }, "tablet_actor pid"},
		{func(m *messages.StartScan) {
			m.TabletActor = &messages.Pid{Address: "a:1", Id: strings.Repeat("i", 300)}
		}, "tablet_actor.id"},
		{func(m *messages.StartScan) { m.Tablet = nil }, "tablet is missing"},
		{func(m *messages.StartScan) { m.Files = append(m.Files, &messages.FileRef{}) }, "files[1].id is empty"},
		{func(m *messages.StartScan) { m.Files = make([]*messages.FileRef, MaxFiles+1) }, "files has"},
		{func(m *messages.StartScan) { m.Server = strings.Repeat("s", 300) }, "server"},
		{func(m *messages.StartScan) { m.Range.Start, m.Range.End = []byte("b"), []byte("a") }, "range: "},
		{func(m *messages.StartScan) { m.Range.End = key(MaxKeyLen + 1) }, "range.end"},
		{func(m *messages.StartScan) { m.ResumeAfter = key(MaxKeyLen + 1) }, "resume_after"},
		{func(m *messages.StartScan) { m.Window, m.BatchBytes = 1024, 4<<20 }, "window 1024"},
		{func(m *messages.StartScan) { m.Window = MaxWindow }, ""},
		{func(m *messages.StartScan) { m.BatchRows = MaxBatchRows + 1 }, "batch_rows"},
	})
}

// TestValidateFlow: window × batch bytes in flight, zero fields taking the
// server's defaults.
func TestValidateFlow(t *testing.T) {
	for _, tc := range []struct {
		window, rows, bytes uint32
		defWindow, defBytes int
		want                string
	}{
		{0, 0, 0, 4, 256 << 10, ""},
		{MaxWindow, 0, 0, 4, 256 << 10, ""},          // 256 × 256 KiB = 64 MiB
		{MaxWindow, 0, 0, 4, 512 << 10, "in flight"}, // a server with bigger batches
		{0, 0, 4 << 20, 16, 256 << 10, ""},           // 16 × 4 MiB
		{0, 0, 4 << 20, 17, 256 << 10, "in flight"},  // its default window
		{1024, 0, 4 << 20, 4, 256 << 10, "window 1024 is over 256"},
		{MaxWindow + 1, 0, 1024, 4, 256 << 10, "window"},
		{1, MaxBatchRows + 1, 0, 4, 256 << 10, "batch_rows"},
		{1, 0, MinBatchBytes - 1, 4, 256 << 10, "batch_bytes"},
		{1, 0, MaxBatchBytes + 1, 4, 256 << 10, "batch_bytes"},
		{1, 0, math.MaxUint32, 4, 256 << 10, "batch_bytes"},
	} {
		err := ValidateFlow(tc.window, tc.rows, tc.bytes, tc.defWindow, tc.defBytes)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("ValidateFlow(%d, %d, %d; defaults %d, %d) = %v, want %q", tc.window, tc.rows, tc.bytes, tc.defWindow, tc.defBytes, err, tc.want)
		}
	}
}

func TestValidateCancelAckDone(t *testing.T) {
	checkCases(t, "Cancel", ValidateCancel, &messages.Cancel{RequestId: "r", Attempt: 2, Reason: "why"}, []caseOf[*messages.Cancel]{
		{func(m *messages.Cancel) { m.Attempt = 0 }, "attempt must be >= 1"}, // no wildcard
		{func(m *messages.Cancel) { m.RequestId = strings.Repeat("r", 257) }, "request_id"},
		{func(m *messages.Cancel) { m.Reason = strings.Repeat("x", MaxReasonLen+1) }, "reason"},
		{func(m *messages.Cancel) { m.UnlessStreaming = true }, ""},
	})
	checkCases(t, "BatchAck", ValidateBatchAck, &messages.BatchAck{RequestId: "r", Attempt: 1, Seq: 1}, []caseOf[*messages.BatchAck]{
		{func(m *messages.BatchAck) { m.RequestId = "" }, "request_id"},
		{func(m *messages.BatchAck) { m.Attempt = 0 }, "attempt"},
		{func(m *messages.BatchAck) { m.Seq = 0 }, "seq"},
	})
	checkCases(t, "ScanDone", ValidateScanDone, &messages.ScanDone{RequestId: "r", WinnerAttempt: 1, Tablet: &messages.TabletRef{Table: "t", Generation: 1}},
		[]caseOf[*messages.ScanDone]{
			{func(m *messages.ScanDone) { m.RequestId = "" }, "request_id"},
			{func(m *messages.ScanDone) { m.Tablet = nil }, "tablet is missing"},
			{func(m *messages.ScanDone) { m.Tablet.Table = "" }, "tablet.table"},
			{func(m *messages.ScanDone) { m.Tablet.EndRow = key(MaxKeyLen + 1) }, "tablet.end_row"},
			{func(m *messages.ScanDone) { m.ForwardedBy = strings.Repeat("f", 300) }, "forwarded_by"},
		})
}

// TestValidateHeartbeatCounts: the counts and the interval a heartbeat
// carries are bounded (a forged one cannot put NaN or 2^32 into the load
// view); a leaving heartbeat needs only its names.
func TestValidateHeartbeatCounts(t *testing.T) {
	base := &messages.Heartbeat{Host: "h", Server: "h/0", Pid: &messages.Pid{Address: "127.0.0.1:1", Id: "s"}, Workers: 4, Active: 4,
		QueueLen: 10, IntervalMs: 1000, CacheHitRatio: 0.5}
	for i, tc := range []struct {
		mod  func(*messages.Heartbeat)
		want string
	}{
		{func(m *messages.Heartbeat) {}, ""},
		{func(m *messages.Heartbeat) { m.Workers = 0 }, "workers 0"},
		{func(m *messages.Heartbeat) { m.Workers, m.Active = MaxWorkers+1, 0 }, "workers"},
		{func(m *messages.Heartbeat) { m.Active = 5 }, "active 5 is more than workers 4"},
		{func(m *messages.Heartbeat) { m.QueueLen = MaxQueueLen + 1 }, "queue_len"},
		{func(m *messages.Heartbeat) { m.CacheHitRatio = math.NaN() }, "cache_hit_ratio"},
		{func(m *messages.Heartbeat) { m.CacheHitRatio = 1.5 }, "cache_hit_ratio"},
		{func(m *messages.Heartbeat) { m.CacheHitRatio = -0.1 }, "cache_hit_ratio"},
		{func(m *messages.Heartbeat) { m.IntervalMs = 9 }, "interval_ms"},
		{func(m *messages.Heartbeat) { m.IntervalMs = 3600_001 }, "interval_ms"},
		// 2^63/10^6+1 ms overflowed the old Duration arithmetic into range.
		{func(m *messages.Heartbeat) { m.IntervalMs = math.MaxInt64/1_000_000 + 1000 }, "interval_ms"},
		{func(m *messages.Heartbeat) { m.IntervalMs = math.MinInt64 }, "interval_ms"},
		{func(m *messages.Heartbeat) { m.Workers, m.Leaving, m.IntervalMs = 0, true, 0 }, ""},
	} {
		m := proto.CloneOf(base)
		tc.mod(m)
		err := ValidateHeartbeat(m)
		if (err == nil) != (tc.want == "") || (err != nil && (!strings.Contains(err.Error(), tc.want) || !errors.Is(err, errBadHeartbeat))) {
			t.Errorf("case %d: validateHeartbeat = %v, want %q", i, err, tc.want)
		}
	}
	for i, tc := range []struct {
		s    *messages.LoadSignal
		want string
	}{
		{&messages.LoadSignal{Host: "h", Server: "h/0", QueueLen: 3, RequestId: "r", Table: "t", Origin: "h/0"}, ""},
		{&messages.LoadSignal{Host: "h", Server: "h/0", QueueLen: MaxQueueLen + 1}, "queue_len"},
		{&messages.LoadSignal{Host: "h", Server: "h/0", Table: strings.Repeat("t", 300)}, "table"},
		{&messages.LoadSignal{Host: "h", Server: "h/0", Origin: strings.Repeat("o", 300)}, "origin"},
		{&messages.LoadSignal{Host: "h", Server: "h/0", RequestId: strings.Repeat("r", 300)}, "request_id"},
		{&messages.LoadSignal{Server: "h/0"}, "host or server is empty"},
	} {
		err := ValidateSignal(tc.s)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("signal case %d: validateSignal = %v, want %q", i, err, tc.want)
		}
	}
}

func key(n int) []byte { return []byte(strings.Repeat("k", n)) }
