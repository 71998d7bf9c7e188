// Package backoff owns the waits of scanplane's retry loops: exponential
// back-off (a first delay grown by a multiplier up to a cap), optional
// jitter drawn from an injected random source, and waits that end early
// when a context ends.
//
// Concurrency contract: a Backoff belongs to one retry loop and is not
// safe for concurrent use; Sleep may be called from any goroutine.
package backoff

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Config says how the delays of a Backoff grow.
type Config struct {
	// Initial is the first delay; >= 0. Default 100ms.
	Initial time.Duration
	// Max caps every delay, the first included; >= Initial. Default 2s.
	Max time.Duration
	// Multiplier is the growth of each delay over the previous one;
	// 0 means 2, otherwise >= 1. Default 2.
	Multiplier float64
	// Jitter, in [0, 1], spreads the retries of many loops that failed
	// together: each delay is drawn uniformly from [(1−Jitter)·d, d],
	// where d is the delay without jitter, so Max stays a hard cap.
	// 0 = exact delays. Default 0.2.
	Jitter float64
	// Rand returns a uniform number in [0, 1) for the jitter; nil means
	// math/rand/v2's Float64. Called only from the Backoff's own loop.
	Rand func() float64
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2, Jitter: 0.2}
}

// Validate reports the first invalid field by name.
func (c Config) Validate() error {
	switch {
	case c.Initial < 0:
		return fmt.Errorf("backoff: Config.Initial %v: must be >= 0", c.Initial)
	case c.Max < c.Initial:
		return fmt.Errorf("backoff: Config.Max %v: must be >= Config.Initial %v", c.Max, c.Initial)
	case c.Multiplier != 0 && !(c.Multiplier >= 1): // also rejects NaN
		return fmt.Errorf("backoff: Config.Multiplier %v: must be 0 (= 2) or >= 1", c.Multiplier)
	case !(c.Jitter >= 0 && c.Jitter <= 1):
		return fmt.Errorf("backoff: Config.Jitter %v: must be in [0, 1]", c.Jitter)
	}
	return nil
}

// Backoff yields the delays of one retry loop: Initial, Initial·M,
// Initial·M², … each capped at Max, each shortened by the jitter.
type Backoff struct {
	cfg  Config
	next time.Duration // the next delay before jitter
}

// New returns a Backoff at its first delay. cfg should pass Validate;
// out-of-range values are clamped (negative Initial to 0, Max below
// Initial to Initial, Multiplier below 1 to 2, Jitter into [0, 1]) so a
// Backoff never yields a negative or growing-past-Max delay.
func New(cfg Config) *Backoff {
	cfg.Initial = max(cfg.Initial, 0)
	cfg.Max = max(cfg.Max, cfg.Initial)
	if !(cfg.Multiplier >= 1) {
		cfg.Multiplier = 2
	}
	if !(cfg.Jitter >= 0) {
		cfg.Jitter = 0
	}
	cfg.Jitter = min(cfg.Jitter, 1)
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	return &Backoff{cfg: cfg, next: cfg.Initial}
}

// Next returns the delay to wait before the next retry and advances to
// the one after.
func (b *Backoff) Next() time.Duration {
	d := b.next
	b.next = time.Duration(min(float64(b.cfg.Max), float64(b.next)*b.cfg.Multiplier))
	if b.cfg.Jitter > 0 && d > 0 {
		d -= time.Duration(b.cfg.Jitter * b.cfg.Rand() * float64(d))
	}
	return d
}

// Reset starts the delays again from Initial.
func (b *Backoff) Reset() { b.next = b.cfg.Initial }

// Wait sleeps the next delay (see Sleep, with no wake channel).
func (b *Backoff) Wait(ctx context.Context) error { return Sleep(ctx, b.Next(), nil) }

// Retry calls op, and again after each of the back-off's delays while op
// fails with an error retry accepts, until op returns nil or an error
// retry rejects, ctx ends, or the next call would start more than limit
// after the first (limit 0: only ctx bounds it). It returns op's last
// error; ctx's end is not an error of its own (op saw the same context).
func (b *Backoff) Retry(ctx context.Context, limit time.Duration, retry func(error) bool, op func() error) error {
	var deadline time.Time
	if limit > 0 {
		deadline = time.Now().Add(limit)
	}
	for {
		err := op()
		if err == nil || !retry(err) {
			return err
		}
		d := b.Next()
		if !deadline.IsZero() && time.Now().Add(d).After(deadline) {
			return err
		}
		if Sleep(ctx, d, nil) != nil {
			return err
		}
	}
}

// Sleep waits d, or less if ctx ends or wake is closed first (a nil wake
// never is). It returns context.Cause(ctx) if ctx ended first, else nil.
func Sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-wake:
		return nil
	case <-t.C:
		return nil
	}
}
