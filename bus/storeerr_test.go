package bus

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// RetryUnavailable retries only ErrUnavailable, stops at success, at
// another error, at its limit and at the context's end.
func TestRetryUnavailable(t *testing.T) {
	ctx := context.Background()
	unavailable := fmt.Errorf("get: %w: no responders", ErrUnavailable)
	calls := 0
	err := RetryUnavailable(ctx, 0, func() error {
		calls++
		if calls < 3 {
			return unavailable
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("unavailable twice then ok: %v after %d calls, want nil after 3", err, calls)
	}
	calls = 0
	other := errors.New("boom")
	if err := RetryUnavailable(ctx, 0, func() error { calls++; return other }); err != other || calls != 1 {
		t.Fatalf("another error: %v after %d calls, want it at once", err, calls)
	}
	calls = 0
	if err := RetryUnavailable(ctx, 250*time.Millisecond, func() error { calls++; return unavailable }); !errors.Is(err, ErrUnavailable) || calls < 2 || calls > 3 {
		t.Fatalf("limit 250ms: %v after %d calls, want ErrUnavailable after 2-3 (100+200 ms waits)", err, calls)
	}
	cctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	calls = 0
	if err := RetryUnavailable(cctx, 0, func() error { calls++; return unavailable }); !errors.Is(err, ErrUnavailable) || calls < 2 {
		t.Fatalf("context of 150ms: %v after %d calls, want ErrUnavailable after ≥ 2", err, calls)
	}
}
