package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/scanplane/scanplane/internal/backoff"
)

// listEntries returns the entries of kv whose keys match filters, as one
// listing: a key watcher (deletes ignored; values too when metaOnly)
// read up to the end of its initial values. JetStream puts the
// watcher's consumer on any replica of the bucket, and one on a node
// that does not answer (paused, hung, cut off, not yet known as gone)
// delivers nothing. So each try's watcher must deliver its first entry
// (or the end of an empty listing) within the try's bound
// (Config.ReadTry, doubled per try): a try that got nothing checks the
// connection's node (checkNode) and makes a new watcher, whose consumer
// lands elsewhere or on a node that answers by then. A watcher
// JetStream refuses for the moment (its stream electing a leader) is
// asked for again after a wait of the try's bound, at least
// minRefusedWait and at most a second, and only while OpTimeout has not
// passed. All tries are within
// Config.OpTimeout; a listing that ends early is an error, never a
// partial list. what names the listing in errors.
func (c *Conn) listEntries(ctx context.Context, kv jetstream.KeyValue, what string, metaOnly bool, filters ...string) ([]jetstream.KeyValueEntry, error) {
	octx, cancel := c.opCtx(ctx)
	defer cancel()
	deadline, _ := octx.Deadline()
	for try := c.cfg.ReadTry; ; try *= 2 {
		entries, err := listTry(octx, kv, try, metaOnly, filters)
		if err == nil {
			return entries, nil
		}
		silent, refused := errors.Is(err, errListSilent), refusedForNow(err)
		if !silent && !refused || octx.Err() != nil {
			return nil, c.storeErr(ctx, what, c.opErr(ctx, octx, err))
		}
		if silent {
			c.checkNode(octx, min(try, maxNodeCheck))
			continue
		}
		// The deadline is read from the clock as well as from octx: octx
		// ends only once its timer's goroutine has run, which may come
		// after the wait's own timer, and a watcher asked for then would
		// be one more ask past OpTimeout.
		if backoff.Sleep(octx, min(max(try, minRefusedWait), time.Second), nil) != nil || !time.Now().Before(deadline) {
			return nil, c.storeErr(ctx, what, c.opErr(ctx, octx, err))
		}
	}
}

// listTry is one try of listEntries: a watcher that must be made and
// deliver its first entry within first (0: no bound of its own), else
// the try ends with errListSilent, and then delivers every entry within
// octx.
func listTry(octx context.Context, kv jetstream.KeyValue, first time.Duration, metaOnly bool, filters []string) ([]jetstream.KeyValueEntry, error) {
	// The watcher lives in tctx, ended when this try ends, or after first
	// when nothing came.
	tctx, tcancel := context.WithCancelCause(octx)
	defer tcancel(nil)
	var delivered atomic.Bool
	if first > 0 {
		t := time.AfterFunc(first, func() {
			if !delivered.Load() {
				tcancel(errListSilent)
			}
		})
		defer t.Stop()
	}
	silentErr := func(err error) error {
		if errors.Is(context.Cause(tctx), errListSilent) {
			return fmt.Errorf("%w: %w within %s", ErrUnavailable, errListSilent, first)
		}
		return err
	}
	opts := []jetstream.WatchOpt{jetstream.IgnoreDeletes()}
	if metaOnly {
		opts = append(opts, jetstream.MetaOnly())
	}
	// A watcher rather than ListKeysFiltered: a listing that ends early
	// must drain its watcher (stopWatcher), or the delivery blocked on the
	// watcher's full channel stays for good.
	w, err := kv.WatchFiltered(tctx, slices.Clone(filters), opts...) // it prefixes the filters in place
	if err != nil {
		return nil, silentErr(err)
	}
	defer stopWatcher(w)
	var entries []jetstream.KeyValueEntry
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				err := tctx.Err()
				if err == nil {
					err = fmt.Errorf("%w: the key watcher ended before every key was listed", ErrUnavailable)
				}
				return nil, silentErr(err)
			}
			delivered.Store(true)
			if e == nil { // every entry delivered
				return entries, nil
			}
			entries = append(entries, e)
		case <-tctx.Done():
			return nil, silentErr(tctx.Err())
		}
	}
}

// subjectCounts returns the message count of every subject of bucket's
// stream that filter matches, as the stream's leader counts them
// (what names the operation in errors). A stream without a leader is
// answered by a replica from its own state, which may be behind
// (paused, cut off, or alone when too few nodes are up for a quorum):
// a subject it lacks may exist, so that is an error wrapping
// ErrUnavailable.
func (c *Conn) subjectCounts(ctx context.Context, stream jetstream.Stream, bucket, filter, what string) (map[string]uint64, error) {
	info, err := timed(c, ctx, func(octx context.Context) (*jetstream.StreamInfo, error) {
		return stream.Info(octx, jetstream.WithSubjectFilter(filter))
	})
	if err != nil {
		return nil, c.storeErr(ctx, what+": stream info", err)
	}
	if info.Cluster != nil && info.Cluster.Leader == "" {
		return nil, fmt.Errorf("bus: %s: %w: stream %s has no leader (too few NATS nodes up for a quorum, or node %s cut off from them) and the replica that answered may be behind: whether %s exists is unknown",
			what, ErrUnavailable, kvStreamPrefix+bucket, c.nc.ConnectedServerName(), filter)
	}
	return info.State.Subjects, nil
}
