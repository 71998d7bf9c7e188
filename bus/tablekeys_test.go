package bus

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// refusingKV is a bucket whose first watchers JetStream refuses as it does
// while its system elects a leader after a node stopped: with the
// jetstream package's APIError, then with nats.go's own (a key watcher's
// push consumer).
type refusingKV struct {
	jetstream.KeyValue
	refuse atomic.Int32
}

func (kv *refusingKV) WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	switch kv.refuse.Add(-1) {
	case 1:
		return nil, &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
	case 0:
		return nil, &nats.APIError{Code: 503, ErrorCode: nats.JSErrCodeJetStreamNotAvailable, Description: "JetStream system temporarily unavailable"}
	}
	return kv.KeyValue.WatchFiltered(ctx, keys, opts...)
}

// TestTableKeysAsksAgainWhileJetStreamElects: a listing whose watcher
// JetStream refuses twice with "temporarily unavailable" (503, 10008),
// in either package's error, asks again and lists the table's keys.
func TestTableKeysAsksAgainWhileJetStreamElects(t *testing.T) {
	ctx := testCtx(t)
	store := blockStore(t, connect(t, startServer(t)))
	if err := store.Put(ctx, "t.k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	kv := &refusingKV{KeyValue: store.kv}
	kv.refuse.Store(2)
	store.kv = kv
	keys, err := store.TableKeys(ctx, "t")
	if err != nil || !slices.Equal(keys, []string{"t.k"}) {
		t.Fatalf("listing: %q, %v; want [t.k]", keys, err)
	}
	if n := kv.refuse.Load(); n >= 0 {
		t.Fatalf("%d refusals left, want none", n+1)
	}
}

// alwaysRefusingKV refuses every watcher as JetStream does while it has
// no leader.
type alwaysRefusingKV struct {
	jetstream.KeyValue
	calls atomic.Int32
}

func (kv *alwaysRefusingKV) WatchFiltered(context.Context, []string, ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	kv.calls.Add(1)
	return nil, &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
}

// TestTableKeysWaitsBetweenRefusals: with ReadTry 0, a listing JetStream
// keeps refusing waits at least minRefusedWait between asks, asks
// nothing after OpTimeout, and fails with ErrUnavailable then instead of
// asking in a tight loop. The first ask comes at the earliest when
// OpTimeout starts and each later one at least minRefusedWait after the
// one before, so all of them before OpTimeout's end are at most
// OpTimeout/minRefusedWait however late any of them runs.
func TestTableKeysWaitsBetweenRefusals(t *testing.T) {
	ctx := testCtx(t)
	store := blockStore(t, connect(t, startServer(t)))
	const opTimeout = 500 * time.Millisecond
	store.conn.cfg.ReadTry, store.conn.cfg.OpTimeout = 0, opTimeout
	kv := &alwaysRefusingKV{KeyValue: store.kv}
	store.kv = kv
	if _, err := store.TableKeys(ctx, "t"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("listing refused throughout: %v, want ErrUnavailable", err)
	}
	if n := kv.calls.Load(); n > int32(opTimeout/minRefusedWait) {
		t.Fatalf("%d watchers asked for, want at most %d: one per %v within OpTimeout %v", n, opTimeout/minRefusedWait, minRefusedWait, opTimeout)
	}
}
