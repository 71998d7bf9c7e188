package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestCancellationMatchesContext: a scan the cluster cancelled or timed
// out matches context.Canceled or context.DeadlineExceeded, as one the
// client's context ended matches ErrCancelled or ErrDeadlineExceeded, and
// not the other.
func TestCancellationMatchesContext(t *testing.T) {
	cancelled := fmt.Errorf("scan of t: %w", &ScanError{Code: CodeCancelled, Message: "m"})
	deadline := fmt.Errorf("scan of t: %w", &ScanError{Code: CodeDeadlineExceeded, Message: "m"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dctx, dcancel := context.WithTimeout(context.Background(), 0)
	defer dcancel()
	<-dctx.Done()
	for _, c := range []struct {
		name       string
		err        error
		isCanceled bool
	}{
		{"cluster CANCELLED", cancelled, true},
		{"context cancelled", fmt.Errorf("scan: %w", ctx.Err()), true},
		{"cluster DEADLINE_EXCEEDED", deadline, false},
		{"context deadline", fmt.Errorf("scan: %w", dctx.Err()), false},
	} {
		if got := errors.Is(c.err, context.Canceled) && errors.Is(c.err, ErrCancelled); got != c.isCanceled {
			t.Errorf("%s: matches context.Canceled and ErrCancelled: %v, want %v", c.name, got, c.isCanceled)
		}
		if got := errors.Is(c.err, context.DeadlineExceeded) && errors.Is(c.err, ErrDeadlineExceeded); got != !c.isCanceled {
			t.Errorf("%s: matches context.DeadlineExceeded and ErrDeadlineExceeded: %v, want %v", c.name, got, !c.isCanceled)
		}
	}
	if errors.Is(&ScanError{Code: CodePermissionDenied}, context.Canceled) {
		t.Error("PERMISSION_DENIED matches context.Canceled")
	}
}
