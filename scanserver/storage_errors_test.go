package scanserver

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// TestErrorCodeOfStorageErrors: how a scan server names a failed read on
// the wire. A damaged or missing object is CORRUPT_BLOCK (terminal: every
// server reads the same shared store); a store that is full or does not
// answer, or cannot say whether an object exists, is STORAGE (another
// server may do better), also when the error names a missing object too;
// only the caller's own deadline is DEADLINE_EXCEEDED.
func TestErrorCodeOfStorageErrors(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("tablets: fetch k: cache: fetch k: %w", err) }
	for _, tc := range []struct {
		err  error
		want messages.ErrorCode
	}{
		{wrap(fmt.Errorf("bus: block k: %w: damaged on disk", bus.ErrCorrupt)), messages.ErrorCode_ERROR_CODE_CORRUPT_BLOCK},
		{wrap(fmt.Errorf("bus: block k: %w", bus.ErrNotFound)), messages.ErrorCode_ERROR_CODE_CORRUPT_BLOCK},
		{wrap(fmt.Errorf("%w: object k", tablets.ErrNotFound)), messages.ErrorCode_ERROR_CODE_CORRUPT_BLOCK},
		{fmt.Errorf("tablets: block k: %w: checksum", tablets.ErrCorrupt), messages.ErrorCode_ERROR_CODE_CORRUPT_BLOCK},
		{wrap(fmt.Errorf("bus: block get k: %w: no answer within 10s", bus.ErrUnavailable)), messages.ErrorCode_ERROR_CODE_STORAGE},
		// Unavailable wins over what else an error wraps: the store
		// could not say, so the object is not known missing or damaged.
		{wrap(fmt.Errorf("bus: block k: %w: no leader; %w", bus.ErrUnavailable, bus.ErrNotFound)), messages.ErrorCode_ERROR_CODE_STORAGE},
		{wrap(errors.Join(fmt.Errorf("bus: block k: %w", bus.ErrCorrupt), fmt.Errorf("bus: block k: %w", bus.ErrUnavailable))), messages.ErrorCode_ERROR_CODE_STORAGE},
		{wrap(fmt.Errorf("bus: block get k: %w: insufficient resources", bus.ErrStoreFull)), messages.ErrorCode_ERROR_CODE_STORAGE},
		{wrap(errors.New("disk on fire")), messages.ErrorCode_ERROR_CODE_STORAGE},
		{wrap(context.DeadlineExceeded), messages.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED},
		{wrap(context.Canceled), messages.ErrorCode_ERROR_CODE_CANCELLED},
	} {
		if got := errorCode(tc.err); got != tc.want {
			t.Errorf("errorCode(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}
