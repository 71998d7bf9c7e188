package scanserver

import (
	"context"
	"time"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/cache"
	"github.com/scanplane/scanplane/tablets"
)

// storeRetryWait bounds how long a scan server reads a block store that is
// unavailable again: when a NATS node dies, JetStream elects a new leader
// for the blocks bucket, and reads get "no responders" for a few seconds;
// failing them at once failed scans on every host with STORAGE (e2e
// TestCoordinatorLossUnderLoad, killing the coordinator whose node led
// the bucket). The scan's own context still ends it sooner.
const storeRetryWait = 10 * time.Second

// retryingStore reads through to a BlockStore, again while it is
// unavailable, for up to storeRetryWait (bus.RetryUnavailable). Writes and
// deletes pass through.
type retryingStore struct {
	tablets.BlockStore
}

func (s retryingStore) Get(ctx context.Context, key string) (data []byte, err error) {
	err = bus.RetryUnavailable(ctx, storeRetryWait, func() error {
		data, err = s.BlockStore.Get(ctx, key)
		return err
	})
	return data, err
}

// retrying wraps store in a retryingStore, which also reads many objects
// at once (cache.ManyGetter) if store does: GetMany is not retried, a
// read ahead that fails leaves its blocks to the scan's own Gets.
func retrying(store tablets.BlockStore) tablets.BlockStore {
	if mg, ok := store.(cache.ManyGetter); ok {
		return retryingManyStore{retryingStore{store}, mg}
	}
	return retryingStore{store}
}

// retryingManyStore is a retryingStore over a store that reads many
// objects at once.
type retryingManyStore struct {
	retryingStore
	cache.ManyGetter
}
