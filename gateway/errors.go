package gateway

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/tablets"
)

// codes maps the client library's sentinels (and the request checks')
// to gRPC status codes, first match wins: a cause the caller can act on
// before a broader one.
var codes = []struct {
	err  error
	code connect.Code
}{
	{context.Canceled, connect.CodeCanceled},
	{client.ErrCancelled, connect.CodeCanceled},
	{context.DeadlineExceeded, connect.CodeDeadlineExceeded},
	{tablets.ErrBadName, connect.CodeInvalidArgument},
	{tablets.ErrBadRange, connect.CodeInvalidArgument},
	{tablets.ErrBadKey, connect.CodeInvalidArgument},
	{client.ErrBadRequest, connect.CodeInvalidArgument},
	{client.ErrNoTable, connect.CodeNotFound},
	{client.ErrUnverified, connect.CodeFailedPrecondition},
	{client.ErrCorruptBlock, connect.CodeDataLoss},
	{tablets.ErrBadProof, connect.CodeDataLoss},
	{client.ErrStaleGeneration, connect.CodeAborted},
	{client.ErrNoTablet, connect.CodeAborted},
	{client.ErrOverloaded, connect.CodeResourceExhausted},
	{client.ErrNoCoordinator, connect.CodeUnavailable},
	{client.ErrNoServers, connect.CodeUnavailable},
	{client.ErrShuttingDown, connect.CodeUnavailable},
	{client.ErrStorage, connect.CodeUnavailable},
	{client.ErrStream, connect.CodeUnavailable},
	{client.ErrResumeLimit, connect.CodeUnavailable},
	{client.ErrClosed, connect.CodeUnavailable},
	{client.ErrInternal, connect.CodeInternal},
}

// CodeOf is the gRPC status code err is answered with: the code of the
// first sentinel of codes it matches (errors.Is), else UNKNOWN.
func CodeOf(err error) connect.Code {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return connect.CodeUnknown
}

// toStatus is err as a status with CodeOf's code and err's one-line text,
// and the google.rpc.ErrorInfo naming the client library's error
// (client.APIErrorReason) when err matches one; an error that already
// is a status is kept.
func toStatus(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	return withReason(connect.NewError(CodeOf(err), err), client.APIErrorReason(err))
}

// withReason attaches to ce the ErrorInfo of reason (none when empty).
func withReason(ce *connect.Error, reason string) *connect.Error {
	if reason == "" {
		return ce
	}
	if d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: reason, Domain: client.APIErrorDomain}); err == nil {
		ce.AddDetail(d)
	}
	return ce
}
