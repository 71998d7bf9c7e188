package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/scanplane/scanplane/internal/tabletstream"
	"github.com/scanplane/scanplane/messages"
)

// Errors of the client itself. Every error a Client returns wraps at most
// one of them, plus, for an error the cluster answered, ErrScan and the
// sentinel of its code (below); test them with errors.Is.
var (
	// ErrScan: the cluster answered a scan with an error (see *ScanError).
	ErrScan = errors.New("client: scan failed")
	// ErrNoCoordinator: no coordinator could be found or reached, or the
	// one handling the request was lost (code NO_COORDINATOR).
	ErrNoCoordinator = errors.New("client: no coordinator")
	// ErrNoTable: the table (or that generation of it) does not exist
	// (code NO_SUCH_TABLE).
	ErrNoTable = errors.New("client: no such table")
	// ErrClosed: the client is closed.
	ErrClosed = errors.New("client: closed")
	// ErrStream: the row stream broke in a way resuming could not mend.
	ErrStream = errors.New("client: row stream broken")
	// ErrUnverified: the table's metadata has no row digests (it was
	// ingested before they existed), so its rows cannot be checked
	// against the ingest; scan it with ScanOptions.AllowUnverified, or
	// ingest it again.
	ErrUnverified = errors.New("client: table has no row digests")
	// ErrUnauthenticated: the public API refused the caller's
	// credentials (API: no client certificate of the cluster and no
	// valid bearer token).
	ErrUnauthenticated = errors.New("client: unauthenticated")
)

// Errors the cluster answers, one per ErrorCode: a *ScanError
// with that code matches its sentinel (and ErrScan) under errors.Is.
var (
	// ErrBadRequest: a field of the request is invalid (BAD_REQUEST).
	ErrBadRequest = errors.New("client: bad request")
	// ErrStaleGeneration: the table generation was replaced and removed,
	// also during a scan (STALE_GENERATION); scanning again reads the new
	// one.
	ErrStaleGeneration = errors.New("client: stale table generation")
	// ErrNoServers: no live scan server in the profile's group
	// (NO_SERVERS).
	ErrNoServers = errors.New("client: no scan servers")
	// ErrDeadlineExceeded is context.DeadlineExceeded: a scan whose
	// deadline passed, whether the client's context ended it or the
	// cluster answered DEADLINE_EXCEEDED, matches it.
	ErrDeadlineExceeded = context.DeadlineExceeded
	// ErrStorage: the block store failed (STORAGE): unavailable, full or
	// timed out.
	ErrStorage = errors.New("client: storage failed")
	// ErrCorruptBlock: a block or index named by the metadata is damaged,
	// unreadable or missing (CORRUPT_BLOCK).
	ErrCorruptBlock = errors.New("client: corrupt block")
	// ErrCancelled is context.Canceled: a scan that was cancelled,
	// whether the client's context ended it or the cluster answered
	// CANCELLED, matches it.
	ErrCancelled = context.Canceled
	// ErrInternal: a bug in the cluster; the message says more (INTERNAL).
	ErrInternal = errors.New("client: internal error")
	// ErrShuttingDown: the server is stopping (SHUTTING_DOWN).
	ErrShuttingDown = errors.New("client: server shutting down")
	// ErrNoTablet: the tablet is not part of that generation
	// (NO_SUCH_TABLET).
	ErrNoTablet = errors.New("client: no such tablet")
	// ErrResumeLimit: the scan resumed more often than Config.MaxResumes
	// (RESUME_LIMIT).
	ErrResumeLimit = errors.New("client: resume limit reached")
	// ErrOverloaded: a bounded queue of the coordinator is full; retry
	// later (OVERLOADED).
	ErrOverloaded = errors.New("client: coordinator overloaded")
	// ErrPermissionDenied: the client's certificate grants it other
	// tables than the one scanned (PERMISSION_DENIED); the message names
	// the principal and the table. Scanning again does not help.
	ErrPermissionDenied = errors.New("client: permission denied")
)

// ErrorCode names an error the cluster answered (ScanError.Code).
type ErrorCode int

// The codes the cluster answers; each has a sentinel error above.
const (
	CodeUnspecified      ErrorCode = iota // no code
	CodeBadRequest                        // ErrBadRequest
	CodeNoSuchTable                       // ErrNoTable
	CodeStaleGeneration                   // ErrStaleGeneration
	CodeNoServers                         // ErrNoServers
	CodeDeadlineExceeded                  // ErrDeadlineExceeded
	CodeStorage                           // ErrStorage
	CodeCorruptBlock                      // ErrCorruptBlock
	CodeCancelled                         // ErrCancelled
	CodeInternal                          // ErrInternal
	CodeShuttingDown                      // ErrShuttingDown
	CodeNoSuchTablet                      // ErrNoTablet
	CodeResumeLimit                       // ErrResumeLimit
	CodeOverloaded                        // ErrOverloaded
	CodeNoCoordinator                     // ErrNoCoordinator
	CodePermissionDenied                  // ErrPermissionDenied
)

// String is the code's name on the wire, e.g. "ERROR_CODE_NO_SERVERS"
// (the number for a code this client does not know).
func (c ErrorCode) String() string { return messages.ErrorCode(c).String() }

// codeErrors maps each error code to its sentinel.
var codeErrors = map[ErrorCode]error{
	CodeBadRequest:       ErrBadRequest,
	CodeNoSuchTable:      ErrNoTable,
	CodeStaleGeneration:  ErrStaleGeneration,
	CodeNoServers:        ErrNoServers,
	CodeDeadlineExceeded: ErrDeadlineExceeded,
	CodeStorage:          ErrStorage,
	CodeCorruptBlock:     ErrCorruptBlock,
	CodeCancelled:        ErrCancelled,
	CodeInternal:         ErrInternal,
	CodeShuttingDown:     ErrShuttingDown,
	CodeNoSuchTablet:     ErrNoTablet,
	CodeResumeLimit:      ErrResumeLimit,
	CodeOverloaded:       ErrOverloaded,
	CodeNoCoordinator:    ErrNoCoordinator,
	CodePermissionDenied: ErrPermissionDenied,
}

// ScanError is an error answered by the coordinator or a scan server.
type ScanError struct {
	Code    ErrorCode
	Message string
	// Attempts: the dispatches to scan servers of the failed request, in
	// order, when the coordinator reports them.
	Attempts []AttemptInfo
}

// AttemptInfo is one dispatch of a request to a scan server.
type AttemptInfo struct {
	Attempt  uint32        // its number within the request, from 1
	Server   string        // the scan server's id
	Result   string        // how it ended: "pending", "started", "busy", "error", "timeout", "slow", "cancelled", "stalled" or "finished"
	Duration time.Duration // from dispatch to result
	Plan     int           // its position in the selection's plan
	Hedge    bool          // sent as a hedge beside a slow attempt
}

func (e *ScanError) Error() string {
	return fmt.Sprintf("client: scan failed: %s: %s", e.Code, e.Message)
}

// Is makes errors.Is(err, ErrScan) true, and errors.Is(err, S) for the
// sentinel S of e.Code (ErrNoServers for CodeNoServers, ...).
func (e *ScanError) Is(target error) bool {
	return target == ErrScan || (target != nil && codeErrors[e.Code] == target)
}

// scanError is the client's *ScanError for a ScanError of the wire.
func scanError(code messages.ErrorCode, msg string, attempts []*messages.AttemptInfo) *ScanError {
	e := &ScanError{Code: ErrorCode(code), Message: msg}
	for _, a := range attempts {
		e.Attempts = append(e.Attempts, AttemptInfo{Attempt: a.GetAttempt(), Server: a.GetServer(),
			Result:   strings.ToLower(strings.TrimPrefix(a.GetResult().String(), "ATTEMPT_RESULT_")),
			Duration: time.Duration(a.GetDurationUs()) * time.Microsecond, Plan: int(a.GetPlanIndex()), Hedge: a.GetHedge()})
	}
	return e
}

// streamErr is the client's error for err, the error a tablet stream
// failed with: its *ScanError becomes the client's, and an error wrapping
// one of its sentinels also matches the client's sentinel of that name.
func streamErr(err error) error {
	var se *tabletstream.ScanError
	if errors.As(err, &se) {
		return scanError(se.Code, se.Message, se.Attempts)
	}
	for _, m := range []struct{ from, to error }{
		{tabletstream.ErrNoCoordinator, ErrNoCoordinator},
		{tabletstream.ErrStream, ErrStream},
	} {
		if errors.Is(err, m.from) {
			return &sentinelErr{err: err, sentinel: m.to}
		}
	}
	return err
}

// sentinelErr is err that also matches sentinel under errors.Is.
type sentinelErr struct {
	err      error
	sentinel error
}

func (e *sentinelErr) Error() string { return e.err.Error() }

func (e *sentinelErr) Unwrap() error { return e.err }

func (e *sentinelErr) Is(target error) bool { return target == e.sentinel }
