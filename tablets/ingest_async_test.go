package tablets

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
)

// asyncStore is an AsyncPutter over a DirStore. Puts before the failAt-th
// are stored from a goroutine of their own, so their answers come in
// any order; the failAt-th is refused; those after it are stored only
// when their wait is called, or else when the first Delete comes, as a
// store would store a message still in flight while the ingest cleans
// up. putsAfterDelete counts those.
type asyncStore struct {
	*DirStore
	failAt int

	mu              sync.Mutex
	sent            int
	asyncPuts       int
	deleting        bool
	lazy            []func()
	putsAfterDelete int
}

func (s *asyncStore) PutAsync(ctx context.Context, key string, data []byte) (func() error, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent++
	s.asyncPuts++
	switch {
	case s.sent == s.failAt:
		return func() error { return errors.New("store refused " + key) }, nil
	case s.failAt > 0 && s.sent > s.failAt:
		var once sync.Once
		var err error
		land := func() {
			once.Do(func() {
				s.mu.Lock()
				if s.deleting {
					s.putsAfterDelete++
				}
				s.mu.Unlock()
				err = s.DirStore.Put(context.WithoutCancel(ctx), key, data)
			})
		}
		s.lazy = append(s.lazy, land)
		return func() error { land(); return err }, nil
	}
	done := make(chan error, 1)
	go func() { done <- s.DirStore.Put(context.WithoutCancel(ctx), key, data) }()
	return func() error { return <-done }, nil
}

func (s *asyncStore) Delete(ctx context.Context, key string) error {
	s.mu.Lock()
	first := !s.deleting
	s.deleting = true
	lazy := s.lazy
	s.mu.Unlock()
	if first {
		for _, land := range lazy {
			land()
		}
	}
	return s.DirStore.Delete(ctx, key)
}

// TestIngestAsyncPuts: with an AsyncPutter store the ingest sends its
// Puts through PutAsync and publishes only once every one is answered;
// the table reads back exactly.
func TestIngestAsyncPuts(t *testing.T) {
	ctx := context.Background()
	dir, ms := newDirStores(t)
	store := &asyncStore{DirStore: dir}
	cfg := testIngestConfig(11)
	cfg.Tablets = 5
	cfg.BlockSize = 512
	cfg.Writers = 8
	rows := GenerateRows(3000)
	tm, err := Ingest(ctx, store, ms, "async", rows, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if store.asyncPuts == 0 {
		t.Fatal("the ingest made no PutAsync call")
	}
	sameEntries(t, readTable(t, dir, tm), rows)
	expectObjects(t, dir, tm)
}

// TestIngestAsyncPutRefused: a refused PutAsync fails the ingest with the
// store's error; every Put already sent is waited for before the cleanup
// (none lands after it), so nothing is left and nothing is published.
func TestIngestAsyncPutRefused(t *testing.T) {
	ctx := context.Background()
	dir, ms := newDirStores(t)
	store := &asyncStore{DirStore: dir, failAt: 40}
	cfg := testIngestConfig(12)
	cfg.Tablets = 3
	cfg.BlockSize = 512
	cfg.Writers = 16
	_, err := Ingest(ctx, store, ms, "refused", GenerateRows(3000), cfg)
	if err == nil || !strings.Contains(err.Error(), "store refused") {
		t.Fatalf("err = %v, want the store's refusal", err)
	}
	if store.putsAfterDelete != 0 {
		t.Fatalf("%d Puts sent by the ingest landed after its cleanup had begun", store.putsAfterDelete)
	}
	if keys := objectsOf(t, dir, ""); len(keys) != 0 {
		t.Fatalf("objects left: %v", keys)
	}
	if cur, _ := ms.Current(ctx, "refused"); cur != 0 {
		t.Fatalf("current = %d, want nothing published", cur)
	}
}
