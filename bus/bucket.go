package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/scanplane/scanplane/internal/backoff"
)

// bucketAttemptWait bounds one attempt of bucket (when it retries).
const bucketAttemptWait = 2 * time.Second

// bucket binds the KV bucket cfg.Bucket, creating it with cfg if missing.
//
// Replicas: cfg.Replicas > 0 is the count wanted; 0 (auto) wants the
// replica count of the reference bucket (the metadata bucket, or for the
// metadata bucket itself the blocks bucket) if that one exists, else 1 for
// a new bucket. An existing bucket with fewer replicas than wanted is
// raised, in one attempt: if that fails (too few nodes up) a warning is
// logged and the bucket used as it is; the next open tries again. A bucket
// is never lowered and otherwise never reconfigured.
//
// Retries: while JetStream cannot answer or place the bucket yet — no
// metadata leader (a forming cluster), too few nodes up for the replicas,
// no answer within OpTimeout or 2 s, whichever is shorter — bucket
// retries after the delays of bucketBackoff until Config.BucketWait
// passes or ctx ends, and then returns an error naming the bucket, the
// replicas and the last NATS error, wrapping ErrUnavailable (or ctx's
// error).
func (c *Conn) bucket(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	start := time.Now()
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if c.cfg.BucketWait > 0 {
		wctx, cancel = context.WithTimeout(ctx, c.cfg.BucketWait)
	}
	defer cancel()
	b := backoff.New(bucketBackoff)
	var last error // the last failure that was not the end of wctx
	var lastLog time.Time
	for attempt := 1; ; attempt++ {
		// With retries, one attempt waits at most bucketAttemptWait: a
		// JetStream request to a stream that is still electing its leader
		// gets no answer at all, and the next attempt a moment later
		// usually does, so waiting out a whole OpTimeout would only delay
		// a forming cluster's start.
		actx, acancel := wctx, context.CancelFunc(func() {})
		if c.cfg.BucketWait > 0 {
			actx, acancel = context.WithTimeoutCause(wctx, min(c.cfg.OpTimeout, bucketAttemptWait), errOpTimeout)
		}
		kv, replicas, err := c.openBucket(actx, cfg)
		if err != nil && wctx.Err() == nil && errors.Is(context.Cause(actx), errOpTimeout) && isContextErr(err) {
			err = fmt.Errorf("%w: no answer within %s", ErrUnavailable, min(c.cfg.OpTimeout, bucketAttemptWait))
		}
		acancel()
		if err == nil {
			if attempt > 1 {
				c.log.Info("bucket ready", "bucket", cfg.Bucket, "replicas", replicas, "after", time.Since(start).Round(time.Millisecond), "attempts", attempt)
			}
			return kv, nil
		}
		if !(wctx.Err() != nil && isContextErr(err)) || last == nil {
			last = err
		}
		what := fmt.Sprintf("bucket %s with %d replicas", cfg.Bucket, replicas)
		if replicas == 0 {
			what = fmt.Sprintf("bucket %s", cfg.Bucket)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("bus: %s: %w (last error: %v)", what, context.Cause(ctx), last)
		}
		if !transientBucketErr(err, c.nc.ConnectedClusterName() != "") {
			return nil, c.storeErr(ctx, what, err)
		}
		pause := b.Next()
		if c.cfg.BucketWait == 0 || wctx.Err() != nil || time.Now().Add(pause).After(start.Add(c.cfg.BucketWait)) {
			return nil, fmt.Errorf("bus: %s: not ready after %s (attempts: %d; too few NATS nodes up?): %w: %w",
				what, time.Since(start).Round(time.Millisecond), attempt, ErrUnavailable, last)
		}
		if time.Since(lastLog) > 10*time.Second {
			c.log.Info("bucket not ready yet (JetStream cluster forming or too few nodes up); retrying",
				"bucket", cfg.Bucket, "replicas", replicas, "err", err, "for", time.Since(start).Round(time.Millisecond), "up to", c.cfg.BucketWait)
			lastLog = time.Now()
		}
		_ = backoff.Sleep(wctx, pause, nil) // the next attempt sees wctx's end
	}
}

// bucketBackoff spaces bucket's attempts.
var bucketBackoff = backoff.Config{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.2}

// openBucket makes one attempt at binding or creating the bucket, under
// ctx (each request bounded by OpTimeout). It returns the replica count it
// wanted (0 if it got no answer before knowing it).
func (c *Conn) openBucket(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, int, error) {
	st, err := timed(c, ctx, func(octx context.Context) (jetstream.Stream, error) {
		return c.js.Stream(octx, kvStreamPrefix+cfg.Bucket)
	})
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return c.createBucket(ctx, cfg)
	case err != nil:
		return nil, cfg.Replicas, err
	}
	have := st.CachedInfo().Config.Replicas
	if c.cfg.ReadOnly {
		kv, err := timed(c, ctx, func(octx context.Context) (jetstream.KeyValue, error) { return c.js.KeyValue(octx, cfg.Bucket) })
		return kv, have, err
	}
	want := cfg.Replicas
	if want == 0 {
		if want, err = c.referenceReplicas(ctx, cfg.Bucket); err != nil {
			return nil, 0, err
		}
	}
	if want > have {
		c.raiseReplicas(ctx, st, want)
	}
	kv, err := timed(c, ctx, func(octx context.Context) (jetstream.KeyValue, error) { return c.js.KeyValue(octx, cfg.Bucket) })
	return kv, max(want, have), err
}

// createBucket creates the missing bucket (or binds it if another process
// created it meanwhile).
func (c *Conn) createBucket(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, int, error) {
	if cfg.Replicas == 0 && c.cfg.ReadOnly {
		cfg.Replicas = 1
	}
	if cfg.Replicas == 0 {
		r, err := c.referenceReplicas(ctx, cfg.Bucket)
		if err != nil {
			return nil, 0, err
		}
		cfg.Replicas = max(r, 1)
	}
	kv, err := timed(c, ctx, func(octx context.Context) (jetstream.KeyValue, error) { return c.js.CreateKeyValue(octx, cfg) })
	if errors.Is(err, jetstream.ErrBucketExists) {
		// Another process created it between our lookup and create.
		kv, err = timed(c, ctx, func(octx context.Context) (jetstream.KeyValue, error) { return c.js.KeyValue(octx, cfg.Bucket) })
	}
	if err == nil {
		c.log.Info("bucket created", "bucket", cfg.Bucket, "replicas", cfg.Replicas)
	}
	return kv, cfg.Replicas, err
}

// referenceReplicas is the replica count auto (Replicas 0) follows for
// bucket: that of the metadata bucket, or for the metadata bucket the
// blocks bucket's; 0 if the reference bucket does not exist.
func (c *Conn) referenceReplicas(ctx context.Context, bucket string) (int, error) {
	ref := c.cfg.MetaBucket
	if bucket == ref {
		ref = c.cfg.BlocksBucket
	}
	st, err := timed(c, ctx, func(octx context.Context) (jetstream.Stream, error) {
		return c.js.Stream(octx, kvStreamPrefix+ref)
	})
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return 0, nil
	case err != nil:
		return 0, err
	}
	return st.CachedInfo().Config.Replicas, nil
}

// raiseReplicas updates the stream of a bucket to want replicas, once;
// JetStream copies the data to the new replicas in the background. A
// failure is logged, not returned: the bucket works with the replicas it
// has.
func (c *Conn) raiseReplicas(ctx context.Context, st jetstream.Stream, want int) {
	sc := st.CachedInfo().Config
	have := sc.Replicas
	sc.Replicas = want
	_, err := timed(c, ctx, func(octx context.Context) (jetstream.Stream, error) { return c.js.UpdateStream(octx, sc) })
	if err != nil {
		c.log.Warn("bucket has fewer replicas than configured and could not be raised; using it as it is",
			"stream", sc.Name, "replicas", have, "want", want, "err", err)
		return
	}
	c.log.Info("bucket replicas raised", "stream", sc.Name, "from", have, "to", want)
}

// transientBucketErr reports whether opening a bucket may succeed later
// without anyone changing anything: JetStream is electing a leader, the
// cluster has too few nodes up to place the replicas, or nothing answered.
// "Insufficient resources" is transient only from a clustered server
// (too few peers yet); from a standalone one it means a full store.
func transientBucketErr(err error, clustered bool) bool {
	if errors.Is(err, ErrUnavailable) { // OpTimeout passed (see opErr)
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case 10005, // JSClusterNoPeersErrF: no suitable peers for placement
			10008, // JSClusterNotAvailErr: JetStream system temporarily unavailable
			10009, // JSClusterNotLeaderErr: JetStream cluster can not handle request
			10075: // JSPeerRemapErr
			return true
		case 10023: // JSInsufficientResourcesErr: too few peers (or space) for the replicas
			return clustered
		}
		return apiErr.Code == 503
	}
	return classify(err) == ErrUnavailable
}
