package wire

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// Limits on what a message from the network may carry. Every handler of
// a network message checks them with the Validate functions below before
// it acts: a request beyond them is answered BAD_REQUEST naming the field
// (ScanRequest: ScanError; StartScan: ScanFinished), a Cancel, BatchAck,
// ScanDone, heartbeat or load signal beyond them is dropped and counted or
// logged (they have no reply). docs/security.md lists them.
const (
	// MaxRequestIDLen bounds request ids (clients make 128 random bits,
	// 46 characters with their prefix).
	MaxRequestIDLen = 256
	// MaxNameLen bounds table, host, server, zone, group, incarnation and
	// actor address and id strings, file ids and coordinator addresses.
	MaxNameLen = 256
	// MaxKeyLen bounds every key a message carries (range bounds,
	// resume_after, tablet bounds): the longest key a table may hold.
	MaxKeyLen = tablets.MaxKeyLen
	// MaxWindow bounds the unacknowledged batches a scan may ask for.
	MaxWindow = 256
	// MaxBatchRows bounds the rows per batch a scan may ask for.
	MaxBatchRows = 100_000
	// MinBatchBytes and MaxBatchBytes bound the bytes per batch a scan
	// may ask for (0 = the server's default).
	MinBatchBytes = 1 << 10
	MaxBatchBytes = 4 << 20
	// MaxInFlightBytes bounds window × batch bytes: what one scan may have
	// sent and not acknowledged (a 1024 × 4 MiB window is 4 GiB).
	MaxInFlightBytes = 64 << 20
	// MaxFiles bounds the files of one tablet in a StartScan.
	MaxFiles = 1024
	// MaxManifests bounds the manifests of one tablet in a StartScan
	// (tablets.MaxManifestBytes each: 16 GiB of file lists).
	MaxManifests = 32768
	// MaxHints bounds a ScanRequest's hints; each key and value is at
	// most MaxNameLen bytes.
	MaxHints = 32
	// MaxAvoidServers and MaxAvoidCoordinators bound a ScanRequest's
	// avoid lists (the client keeps at most 16 servers).
	MaxAvoidServers      = 64
	MaxAvoidCoordinators = 16
	// MaxReasonLen bounds a Cancel's reason.
	MaxReasonLen = 1024
	// MaxWorkers bounds a heartbeat's workers, active and queue_len and a
	// load signal's queue_len.
	MaxWorkers  = 1 << 12
	MaxQueueLen = 1 << 20
)

// Heartbeat intervals outside [minHeartbeat, maxHeartbeat] are refused.
const (
	minHeartbeat = 10 * time.Millisecond
	MaxHeartbeat = time.Hour
)

// maxNameLen is MaxNameLen under its older name.
const maxNameLen = MaxNameLen

// ErrBadMessage is wrapped by every error of the Validate functions; the
// error's text is just the bad field and why.
var ErrBadMessage = errors.New("wire: bad wire message")

// errBadHeartbeat is the sentinel of every heartbeat validation error.
var errBadHeartbeat = errors.New("wire: bad heartbeat")

type badField struct{ msg string }

func (e *badField) Error() string { return e.msg }

func (e *badField) Unwrap() error { return ErrBadMessage }

func bad(format string, a ...any) error { return &badField{fmt.Sprintf(format, a...)} }

// checkNames checks that each named string is at most MaxNameLen bytes.
func checkNames(fields ...string) error {
	for i := 0; i+1 < len(fields); i += 2 {
		if len(fields[i+1]) > MaxNameLen {
			return bad("%s is %d bytes, longer than %d", fields[i], len(fields[i+1]), MaxNameLen)
		}
	}
	return nil
}

// checkKeys checks that each named key is at most MaxKeyLen bytes.
func checkKeys(keys ...any) error {
	for i := 0; i+1 < len(keys); i += 2 {
		if k := keys[i+1].([]byte); len(k) > MaxKeyLen {
			return bad("%s is %d bytes, longer than %d (the longest key)", keys[i].(string), len(k), MaxKeyLen)
		}
	}
	return nil
}

// checkRequestID checks a request id: non-empty, at most MaxRequestIDLen.
func checkRequestID(id string) error {
	switch {
	case id == "":
		return bad("request_id is empty")
	case len(id) > MaxRequestIDLen:
		return bad("request_id is %d bytes, longer than %d", len(id), MaxRequestIDLen)
	}
	return nil
}

// checkTimeout checks a timeout_ms: 0 (none) up to MaxTimeout.
func checkTimeout(ms int64) error {
	if ms < 0 || ms > MaxTimeout.Milliseconds() {
		return bad("timeout_ms %d is outside [0, %d] (%v)", ms, MaxTimeout.Milliseconds(), MaxTimeout)
	}
	return nil
}

// checkPid checks an actor pid's strings (a missing pid passes).
func checkPid(name string, p *messages.Pid) error {
	return checkNames(name+".address", p.GetAddress(), name+".id", p.GetId())
}

// The flow control a scan server applies by default: DefaultWindow
// unacknowledged batches of at most DefaultBatchBytes each.
const (
	DefaultWindow     = 4
	DefaultBatchBytes = 256 << 10
)

// ValidateFlow checks a scan's flow control: window (0 = defWindow) at
// most MaxWindow batches, batchRows at most MaxBatchRows, batchBytes (0 =
// defBatchBytes) 0 or in [MinBatchBytes, MaxBatchBytes], and window ×
// batch bytes at most MaxInFlightBytes. The defaults are the scan
// server's configuration (DefaultWindow and DefaultBatchBytes where it is not known).
func ValidateFlow(window, batchRows, batchBytes uint32, defWindow, defBatchBytes int) error {
	switch {
	case window > MaxWindow:
		return bad("window %d is over %d batches", window, MaxWindow)
	case batchRows > MaxBatchRows:
		return bad("batch_rows %d is over %d", batchRows, MaxBatchRows)
	case batchBytes != 0 && (batchBytes < MinBatchBytes || batchBytes > MaxBatchBytes):
		return bad("batch_bytes %d is outside [%d, %d] (0 = the server's default)", batchBytes, MinBatchBytes, MaxBatchBytes)
	}
	w, b := int64(window), int64(batchBytes)
	if w == 0 {
		w = int64(defWindow)
	}
	if b == 0 {
		b = int64(defBatchBytes)
	}
	if w*b > MaxInFlightBytes {
		return bad("window %d × batch_bytes %d = %d bytes in flight, over %d (%d MiB)", w, b, w*b, MaxInFlightBytes, MaxInFlightBytes>>20)
	}
	return nil
}

// checkRange checks a key range: bounds at most MaxKeyLen, start <= end.
func checkRange(r *messages.KeyRange) (tablets.Range, error) {
	rng := tablets.Range{Start: r.GetStart(), End: r.GetEnd()}
	if err := checkKeys("range.start", rng.Start, "range.end", rng.End); err != nil {
		return rng, err
	}
	if err := rng.Validate(); err != nil {
		return rng, bad("range: %v", err)
	}
	return rng, nil
}

// checkTablet checks a tablet reference's table name and bounds.
func checkTablet(t *messages.TabletRef) error {
	if err := checkNames("tablet.table", t.GetTable()); err != nil {
		return err
	}
	return checkKeys("tablet.prev_end_row", t.GetPrevEndRow(), "tablet.end_row", t.GetEndRow())
}

// ValidateScanRequest checks a ScanRequest from the network (at the
// coordinator's router), naming the bad field.
func ValidateScanRequest(m *messages.ScanRequest) error {
	if err := checkRequestID(m.GetRequestId()); err != nil {
		return err
	}
	switch {
	case ToPID(m.GetClient()) == nil:
		return bad("client pid is missing")
	case m.GetTablet() == nil:
		return bad("tablet is missing")
	case m.GetTablet().GetTable() == "":
		return bad("tablet.table is empty")
	case m.GetTablet().GetGeneration() == 0:
		return bad("tablet.generation must be >= 1")
	case len(m.GetAvoidServers()) > MaxAvoidServers:
		return bad("avoid_servers has %d entries, more than %d", len(m.GetAvoidServers()), MaxAvoidServers)
	case len(m.GetAvoidCoordinators()) > MaxAvoidCoordinators:
		return bad("avoid_coordinators has %d entries, more than %d", len(m.GetAvoidCoordinators()), MaxAvoidCoordinators)
	case len(m.GetHints()) > MaxHints:
		return bad("hints has %d entries, more than %d", len(m.GetHints()), MaxHints)
	}
	if err := checkTimeout(m.GetTimeoutMs()); err != nil {
		return err
	}
	if err := checkPid("client", m.GetClient()); err != nil {
		return err
	}
	if err := checkTablet(m.GetTablet()); err != nil {
		return err
	}
	if err := checkNames("forwarded_by", m.GetForwardedBy()); err != nil {
		return err
	}
	for i, s := range m.GetAvoidServers() {
		if err := checkNames(fmt.Sprintf("avoid_servers[%d]", i), s); err != nil {
			return err
		}
	}
	for i, s := range m.GetAvoidCoordinators() {
		if err := checkNames(fmt.Sprintf("avoid_coordinators[%d]", i), s); err != nil {
			return err
		}
	}
	for k, v := range m.GetHints() {
		if err := checkNames("hints key", k, "hints["+k[:min(len(k), 40)]+"]", v); err != nil {
			return err
		}
	}
	if err := ValidateFlow(m.GetWindow(), m.GetBatchRows(), m.GetBatchBytes(), DefaultWindow, DefaultBatchBytes); err != nil {
		return err
	}
	r, err := checkRange(m.GetRange())
	if err != nil {
		return err
	}
	if err := checkKeys("resume_after", m.GetResumeAfter()); err != nil {
		return err
	}
	if after := m.GetResumeAfter(); len(after) > 0 && len(r.End) > 0 && bytes.Compare(after, r.End) >= 0 {
		return bad("resume_after is at or beyond the range end")
	}
	return nil
}

// ValidateStartScan checks a StartScan from the network (at the scan
// server), naming the bad field. Flow control is checked against the
// default server configuration here; the server checks it again against
// its own (ValidateFlow).
func ValidateStartScan(m *messages.StartScan) error {
	if err := checkRequestID(m.GetRequestId()); err != nil {
		return err
	}
	switch {
	case m.GetAttempt() == 0:
		return bad("attempt must be >= 1")
	case ToPID(m.GetClient()) == nil:
		return bad("client pid is missing")
	case ToPID(m.GetTabletActor()) == nil:
		return bad("tablet_actor pid is missing")
	case m.GetTablet() == nil:
		return bad("tablet is missing")
	case len(m.GetFiles()) > MaxFiles:
		return bad("files has %d entries, more than %d", len(m.GetFiles()), MaxFiles)
	case len(m.GetManifests()) > MaxManifests:
		return bad("manifests has %d entries, more than %d", len(m.GetManifests()), MaxManifests)
	case len(m.GetManifests()) > 0 && len(m.GetFiles()) > 0:
		return bad("both files and manifests")
	}
	for i, mf := range m.GetManifests() {
		if len(mf.GetDigest()) != sha256.Size {
			return bad("manifests[%d].digest has %d bytes, want %d", i, len(mf.GetDigest()), sha256.Size)
		}
	}
	if err := checkTimeout(m.GetTimeoutMs()); err != nil {
		return err
	}
	if err := checkPid("client", m.GetClient()); err != nil {
		return err
	}
	if err := checkPid("tablet_actor", m.GetTabletActor()); err != nil {
		return err
	}
	if err := checkTablet(m.GetTablet()); err != nil {
		return err
	}
	if err := checkNames("server", m.GetServer()); err != nil {
		return err
	}
	if _, err := checkRange(m.GetRange()); err != nil {
		return err
	}
	if err := checkKeys("resume_after", m.GetResumeAfter()); err != nil {
		return err
	}
	if err := ValidateFlow(m.GetWindow(), m.GetBatchRows(), m.GetBatchBytes(), DefaultWindow, DefaultBatchBytes); err != nil {
		return err
	}
	for i, f := range m.GetFiles() {
		if f.GetId() == "" {
			return bad("files[%d].id is empty", i)
		}
		if err := checkNames(fmt.Sprintf("files[%d].id", i), f.GetId()); err != nil {
			return err
		}
	}
	return nil
}

// ValidateCancel checks a Cancel with a request id (an empty one is a
// connection probe, answered apart): a Cancel names one attempt of one
// request, both must match (no wildcard: request ids are unguessable, and
// a Cancel cannot reach an attempt it does not name).
func ValidateCancel(m *messages.Cancel) error {
	if err := checkRequestID(m.GetRequestId()); err != nil {
		return err
	}
	switch {
	case m.GetAttempt() == 0:
		return bad("attempt must be >= 1 (a Cancel names the request id and the attempt)")
	case len(m.GetReason()) > MaxReasonLen:
		return bad("reason is %d bytes, longer than %d", len(m.GetReason()), MaxReasonLen)
	}
	return nil
}

// ValidateBatchAck checks a BatchAck (the credit a client returns).
func ValidateBatchAck(m *messages.BatchAck) error {
	if err := checkRequestID(m.GetRequestId()); err != nil {
		return err
	}
	switch {
	case m.GetAttempt() == 0:
		return bad("attempt must be >= 1")
	case m.GetSeq() == 0:
		return bad("seq must be >= 1")
	}
	return nil
}

// ValidateScanDone checks a ScanDone from a client (routed to the tablet
// actor by its tablet).
func ValidateScanDone(m *messages.ScanDone) error {
	if err := checkRequestID(m.GetRequestId()); err != nil {
		return err
	}
	switch {
	case m.GetTablet() == nil:
		return bad("tablet is missing")
	case m.GetTablet().GetTable() == "":
		return bad("tablet.table is empty")
	}
	if err := checkTablet(m.GetTablet()); err != nil {
		return err
	}
	return checkNames("forwarded_by", m.GetForwardedBy())
}

// validateHeartbeat checks a heartbeat from NATS, naming the bad field:
// names at most MaxNameLen bytes, a pid and an interval in [10ms, 1h]
// unless leaving, workers in [1, MaxWorkers], active at most workers,
// queue_len at most MaxQueueLen, cache_hit_ratio in [0, 1].
func ValidateHeartbeat(m *messages.Heartbeat) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{errBadHeartbeat}, a...)...)
	}
	for _, f := range []struct{ name, v string }{{"host", m.GetHost()}, {"server", m.GetServer()}} {
		if f.v == "" {
			return bad("%s is empty", f.name)
		}
	}
	for _, f := range []struct{ name, v string }{{"host", m.GetHost()}, {"server", m.GetServer()}, {"zone", m.GetZone()},
		{"group", m.GetGroup()}, {"incarnation", m.GetIncarnation()}, {"pid.address", m.GetPid().GetAddress()}, {"pid.id", m.GetPid().GetId()}} {
		if len(f.v) > maxNameLen {
			return bad("%s is longer than %d bytes", f.name, maxNameLen)
		}
	}
	if m.GetLeaving() {
		return nil
	}
	switch ms := m.GetIntervalMs(); {
	case m.GetPid().GetAddress() == "" || m.GetPid().GetId() == "":
		return bad("pid is missing")
	case ms < minHeartbeat.Milliseconds() || ms > MaxHeartbeat.Milliseconds():
		return bad("interval_ms %d is outside [%d, %d]", m.GetIntervalMs(), minHeartbeat.Milliseconds(), MaxHeartbeat.Milliseconds())
	case m.GetWorkers() < 1 || m.GetWorkers() > MaxWorkers:
		return bad("workers %d is outside [1, %d]", m.GetWorkers(), MaxWorkers)
	case m.GetActive() > m.GetWorkers():
		return bad("active %d is more than workers %d", m.GetActive(), m.GetWorkers())
	case m.GetQueueLen() > MaxQueueLen:
		return bad("queue_len %d is over %d", m.GetQueueLen(), MaxQueueLen)
	case math.IsNaN(m.GetCacheHitRatio()) || m.GetCacheHitRatio() < 0 || m.GetCacheHitRatio() > 1:
		return bad("cache_hit_ratio %v is outside [0, 1]", m.GetCacheHitRatio())
	}
	return nil
}

// validateSignal checks a busy or timeout signal from NATS.
func ValidateSignal(s *messages.LoadSignal) error {
	switch {
	case s == nil:
		return errors.New("wire: bad load signal: empty")
	case s.GetHost() == "" || s.GetServer() == "":
		return errors.New("wire: bad load signal: host or server is empty")
	case s.GetQueueLen() > MaxQueueLen:
		return fmt.Errorf("wire: bad load signal: queue_len %d is over %d", s.GetQueueLen(), MaxQueueLen)
	}
	if err := checkNames("host", s.GetHost(), "server", s.GetServer(), "table", s.GetTable(), "origin", s.GetOrigin()); err != nil {
		return fmt.Errorf("wire: bad load signal: %w", err)
	}
	if len(s.GetRequestId()) > MaxRequestIDLen {
		return fmt.Errorf("wire: bad load signal: request_id is longer than %d bytes", MaxRequestIDLen)
	}
	return nil
}
