package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/scanplane/scanplane/internal/backoff"
)

// Errors of the JetStream stores besides ErrNotFound, ErrTooLarge and
// ErrConflict. Every BlockStore and MetaStore error caused by the store
// wraps exactly one sentinel of this package (check with errors.Is), or
// the caller's own context error when the caller's context ended first.
var (
	// ErrCorrupt: JetStream still indexes the key but cannot read its
	// value: the stored message failed its checksum or sanity checks on
	// disk (a JetStream server answers such a read with "not found").
	ErrCorrupt = errors.New("bus: stored value corrupt")
	// ErrStoreFull: JetStream refused a write for lack of space (the
	// server's or account's storage limit, a bucket's MaxBytes). A
	// JetStream server that hits a full disk shuts JetStream down; later
	// operations then fail with ErrUnavailable until it is restarted.
	ErrStoreFull = errors.New("bus: store full")
	// ErrUnavailable: the store did not answer within Config.OpTimeout,
	// the connection is closed, or JetStream is not running.
	ErrUnavailable = errors.New("bus: store unavailable")
	// ErrStorage: any other failure reported by the store.
	ErrStorage = errors.New("bus: storage error")
)

// errOpTimeout is the cause of an operation context that hit
// Config.OpTimeout (as opposed to the caller's own deadline).
var errOpTimeout = errors.New("bus: operation timeout")

// opCtx bounds one store operation by Config.OpTimeout.
func (c *Conn) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, c.cfg.OpTimeout, errOpTimeout)
}

// opErr translates the error of one operation run under octx (from
// opCtx(ctx)): hitting Config.OpTimeout while the caller's context is
// still live is ErrUnavailable and deliberately does not wrap
// context.DeadlineExceeded, so it is never taken for the caller's own
// deadline. Other errors are returned as they are.
func (c *Conn) opErr(ctx, octx context.Context, err error) error {
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(octx), errOpTimeout) && isContextErr(err) {
		return fmt.Errorf("%w: no answer within %s", ErrUnavailable, c.cfg.OpTimeout)
	}
	return err
}

// storeErr wraps err, from a store operation on what, with the sentinel
// it falls under. The caller's own context error (cancelled, deadline
// passed) and errors that carry a sentinel of ours already are wrapped
// as they are.
func (c *Conn) storeErr(ctx context.Context, what string, err error) error {
	if (ctx.Err() != nil && isContextErr(err)) || hasSentinel(err) {
		return fmt.Errorf("bus: %s: %w", what, err)
	}
	sentinel := classify(err)
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("bus: %s: %w: %w (no JetStream server answered for the bucket: NATS down, or too few nodes of a cluster up for a quorum)", what, sentinel, err)
	}
	return fmt.Errorf("bus: %s: %w: %w", what, sentinel, err)
}

func hasSentinel(err error) bool {
	for _, s := range []error{ErrNotFound, ErrTooLarge, ErrConflict, ErrCorrupt, ErrStoreFull, ErrUnavailable, ErrStorage} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// errReadTry is the cause of a read try's context that hit its bound
// (Config.ReadTry, doubled per try).
var errReadTry = errors.New("bus: read try timeout")

// timedRead is timed for a read: each try of f gets Config.ReadTry, the
// next twice as long, and so on, within Config.OpTimeout; a try is
// repeated only when its own bound passed without an answer.
func timedRead[T any](c *Conn, ctx context.Context, f func(octx context.Context) (T, error)) (T, error) {
	if c.cfg.ReadTry <= 0 {
		return timed(c, ctx, f)
	}
	octx, cancel := c.opCtx(ctx)
	defer cancel()
	for try := c.cfg.ReadTry; ; try *= 2 {
		tctx, tcancel := context.WithTimeoutCause(octx, try, errReadTry)
		v, err := f(tctx)
		lost := err != nil && octx.Err() == nil && errors.Is(context.Cause(tctx), errReadTry) && isContextErr(err)
		tcancel()
		if !lost {
			return v, c.opErr(ctx, octx, err)
		}
		c.checkNode(octx, min(try, maxNodeCheck))
	}
}

// timed runs f under opCtx(ctx) and translates its error with opErr.
func timed[T any](c *Conn, ctx context.Context, f func(octx context.Context) (T, error)) (T, error) {
	octx, cancel := c.opCtx(ctx)
	defer cancel()
	v, err := f(octx)
	return v, c.opErr(ctx, octx, err)
}

func isContextErr(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// classify names the sentinel a JetStream or NATS error falls under.
func classify(err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case 10023, // JSInsufficientResourcesErr
			10047, // JSStorageResourcesExceededErr
			10028: // JSMemoryResourcesExceededErr
			return ErrStoreFull
		case jetstream.JSErrCodeJetStreamNotEnabled, jetstream.JSErrCodeJetStreamNotEnabledForAccount:
			return ErrUnavailable
		}
		if d := apiErr.Description; strings.Contains(d, "maximum bytes exceeded") || strings.Contains(d, "insufficient") {
			return ErrStoreFull
		}
		if apiErr.Code == 503 {
			return ErrUnavailable
		}
		return ErrStorage
	}
	if legacy := (*nats.APIError)(nil); errors.As(err, &legacy) && legacy.Code == 503 {
		return ErrUnavailable // a key watcher's push consumer's error
	}
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, jetstream.ErrConnectionClosed),
		errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount),
		errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrDisconnected),
		isContextErr(err):
		return ErrUnavailable
	}
	return ErrStorage
}

// RetryUnavailable runs op, and again while it fails with ErrUnavailable
// (JetStream electing a bucket's leader after a node died answers "no
// responders" for a few seconds), waiting 100 ms doubling to 1 s in
// between (each wait up to a fifth shorter, at random, so processes that
// failed together do not retry together), until op succeeds or fails
// otherwise, ctx ends, or the next try would start after limit (0 = only
// ctx bounds it). It returns op's last error.
func RetryUnavailable(ctx context.Context, limit time.Duration, op func() error) error {
	return backoff.New(unavailableBackoff).Retry(ctx, limit, isUnavailable, op)
}

// unavailableBackoff spaces the retries of RetryUnavailable.
var unavailableBackoff = backoff.Config{Initial: 100 * time.Millisecond, Max: time.Second, Jitter: 0.2}

func isUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }
