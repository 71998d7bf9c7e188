package client

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/scanplane/scanplane/tablets"
)

// APIErrorDomain is the domain of the google.rpc.ErrorInfo detail the
// public API attaches to an error it answers; the detail's reason
// (APIErrorReason) names the client library's error.
const APIErrorDomain = "scanplane"

// apiReasons names the errors of the client library on the public API,
// first match wins (a cause the caller can act on before a broader one).
// A reason names one error: the first of the list with that reason.
var apiReasons = []struct {
	reason string
	err    error
}{
	{"CANCELLED", context.Canceled},
	{"DEADLINE_EXCEEDED", context.DeadlineExceeded},
	{"BAD_NAME", tablets.ErrBadName},
	{"BAD_RANGE", tablets.ErrBadRange},
	{"BAD_KEY", tablets.ErrBadKey},
	{"BAD_REQUEST", ErrBadRequest},
	{"NO_SUCH_TABLE", ErrNoTable},
	{"UNVERIFIED", ErrUnverified},
	{"CORRUPT_BLOCK", ErrCorruptBlock},
	{"BAD_PROOF", tablets.ErrBadProof},
	{"STALE_GENERATION", ErrStaleGeneration},
	{"NO_SUCH_TABLET", ErrNoTablet},
	{"PERMISSION_DENIED", ErrPermissionDenied},
	{"UNAUTHENTICATED", ErrUnauthenticated},
	{"OVERLOADED", ErrOverloaded},
	{"NO_COORDINATOR", ErrNoCoordinator},
	{"NO_SERVERS", ErrNoServers},
	{"SHUTTING_DOWN", ErrShuttingDown},
	{"SHUTTING_DOWN", ErrClosed}, // the coordinator's own client closed: it stops
	{"STORAGE", ErrStorage},
	{"STREAM", ErrStream},
	{"RESUME_LIMIT", ErrResumeLimit},
	{"INTERNAL", ErrInternal},
}

// APIErrorReason is the reason the public API gives err in its
// google.rpc.ErrorInfo (domain APIErrorDomain): the name of the first
// error of the client library (or of tablets' request checks) err
// matches, "" for none.
func APIErrorReason(err error) string {
	for _, r := range apiReasons {
		if errors.Is(err, r.err) {
			return r.reason
		}
	}
	return ""
}

// reasonError is the error a reason names, nil for an unknown reason.
func reasonError(reason string) error {
	for _, r := range apiReasons {
		if r.reason == reason {
			return r.err
		}
	}
	return nil
}

// codeSentinels: the error of a status without a known reason (from an
// older server, a proxy, or the HTTP port's authentication).
var codeSentinels = map[connect.Code]error{
	connect.CodeCanceled:           context.Canceled,
	connect.CodeDeadlineExceeded:   context.DeadlineExceeded,
	connect.CodeInvalidArgument:    ErrBadRequest,
	connect.CodeNotFound:           ErrNoTable,
	connect.CodePermissionDenied:   ErrPermissionDenied,
	connect.CodeUnauthenticated:    ErrUnauthenticated,
	connect.CodeResourceExhausted:  ErrOverloaded,
	connect.CodeAborted:            ErrStaleGeneration,
	connect.CodeDataLoss:           ErrCorruptBlock,
	connect.CodeFailedPrecondition: ErrUnverified,
	connect.CodeUnavailable:        ErrNoCoordinator,
	connect.CodeInternal:           ErrStream,
	connect.CodeUnknown:            ErrStream,
	connect.CodeUnimplemented:      ErrInternal,
}

// apiError is an error of a call to the public API: answered by a
// coordinator (reason set), or of the call's transport.
type apiError struct {
	addr     string
	code     connect.Code
	reason   string // from the status's ErrorInfo; "" without one
	sentinel error
	err      error
}

// apiErr classifies err, the error of a call to addr.
func apiErr(addr string, err error) *apiError {
	e := &apiError{addr: addr, code: connect.CodeOf(err), err: err}
	var ce *connect.Error
	if errors.As(err, &ce) {
		for _, d := range ce.Details() {
			v, derr := d.Value()
			if info, ok := v.(*errdetails.ErrorInfo); ok && derr == nil && info.GetDomain() == APIErrorDomain {
				if s := reasonError(info.GetReason()); s != nil {
					e.reason, e.sentinel = info.GetReason(), s
				}
			}
		}
	}
	if e.sentinel == nil {
		e.sentinel = codeSentinels[e.code]
		if e.sentinel == nil {
			e.sentinel = ErrStream
		}
	}
	return e
}

func (e *apiError) Error() string { return fmt.Sprintf("coordinator %s: %v", e.addr, e.err) }

// Unwrap is the connect error (connect.CodeOf reads its code).
func (e *apiError) Unwrap() error { return e.err }

// Is matches the error's sentinel and, for an error the coordinator
// answered with a scan error code's sentinel, ErrScan (as Client.Scan's
// *ScanError does).
func (e *apiError) Is(target error) bool {
	if target == nil {
		return false
	}
	if target == e.sentinel {
		return true
	}
	if target == ErrScan && e.reason != "" {
		for _, s := range codeErrors {
			if s == e.sentinel {
				return true
			}
		}
	}
	return false
}

// retry tells whether another coordinator may answer the call: the
// coordinator is lost, stopping or its stream broke, or the transport
// failed (no reason: the status did not come from the API).
func (e *apiError) retry() bool {
	switch e.reason {
	case "NO_COORDINATOR", "SHUTTING_DOWN", "STREAM":
		return true
	case "":
		switch e.code {
		case connect.CodeUnavailable, connect.CodeUnknown, connect.CodeInternal, connect.CodeCanceled, connect.CodeDeadlineExceeded:
			return true
		}
	}
	return false
}
