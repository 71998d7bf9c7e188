package actors

import (
	"context"
	"errors"
	"time"

	"github.com/scanplane/scanplane/bus"
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
// unavailable (bus.ErrUnavailable), waiting 100 ms doubling to 1 s, for
// up to storeRetryWait. Writes and deletes pass through.
type retryingStore struct {
	tablets.BlockStore
}

func (s retryingStore) Get(ctx context.Context, key string) ([]byte, error) {
	deadline := time.Now().Add(storeRetryWait)
	wait := 100 * time.Millisecond
	for {
		data, err := s.BlockStore.Get(ctx, key)
		if err == nil || !errors.Is(err, bus.ErrUnavailable) || time.Now().Add(wait).After(deadline) {
			return data, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}
