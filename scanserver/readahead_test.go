package scanserver

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/scanplane/scanplane/cache"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// getCounter counts a store's Gets by key.
type getCounter struct {
	tablets.BlockStore
	mu   sync.Mutex
	gets map[string]int
}

func (g *getCounter) Get(ctx context.Context, key string) ([]byte, error) {
	g.mu.Lock()
	g.gets[key]++
	g.mu.Unlock()
	return g.BlockStore.Get(ctx, key)
}

func (g *getCounter) count(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gets[key]
}

// blockGets is how many Gets of block keys the store saw.
func (g *getCounter) blockGets() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for k, c := range g.gets {
		if strings.Contains(k, ".b") {
			n += c
		}
	}
	return n
}

// manyCounter is a getCounter that also reads many objects in one
// request (cache.ManyGetter), counting the requests and the objects.
type manyCounter struct {
	*getCounter
	requests, objects atomic.Int64
}

func (m *manyCounter) GetMany(ctx context.Context, keys []string) (map[string][]byte, error) {
	m.requests.Add(1)
	out := map[string][]byte{}
	for _, k := range keys {
		if b, err := m.BlockStore.Get(ctx, k); err == nil {
			out[k] = b
			m.objects.Add(1)
		}
	}
	return out, nil
}

// readAheadFile stores one file of 2000 rows in 1 KiB blocks.
func readAheadFile(t *testing.T) (*tablets.DirStore, []*messages.FileRef, []tablets.Entry) {
	t.Helper()
	ds, err := tablets.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := tablets.NewFileWriter("f", 1024)
	rows := tablets.GenerateRows(2000)
	for _, e := range rows {
		if err := w.Add(e.Key, e.Value); err != nil {
			t.Fatal(err)
		}
	}
	ef, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if err := tablets.StoreFile(context.Background(), ds, ef); err != nil {
		t.Fatal(err)
	}
	if nb := int(ef.Ref().GetBlocks()); nb < 4*ReadAhead {
		t.Fatalf("%d blocks, want at least %d", nb, 4*ReadAhead)
	}
	return ds, []*messages.FileRef{ef.Ref()}, rows
}

func newCache(t *testing.T) *cache.BlockCache {
	t.Helper()
	c, err := cache.New(cache.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestReadAheadAfterAMiss: over a store that reads one object per
// request, a scan that misses its first block has the next ReadAhead
// blocks read in the background; a scan whose range ends in its first
// block reads nothing ahead.
func TestReadAheadAfterAMiss(t *testing.T) {
	ctx := context.Background()
	ds, files, rows := readAheadFile(t)
	setup := func(end []byte) (*getCounter, *readAhead) {
		store := &getCounter{BlockStore: ds, gets: map[string]int{}}
		return store, newReadAhead(ctx, newCache(t).Fetcher(store), files, end, nil)
	}

	store, ra := setup(nil)
	it := tablets.NewTabletReader(files, ra).Scan(ctx, tablets.Range{}, nil)
	if !it.Next() {
		t.Fatal(it.Err())
	}
	ra.wg.Wait()
	for b := 1; b <= ReadAhead+1; b++ {
		want := 1
		if b > ReadAhead {
			want = 0
		}
		if n := store.count(tablets.BlockKey("f", b)); n != want {
			t.Errorf("after a miss of block 0: block %d read %d times, want %d", b, n, want)
		}
	}
	n := 1
	for it.Next() {
		n++
	}
	ra.close()
	if it.Err() != nil || n != len(rows) {
		t.Fatalf("%d rows, %v", n, it.Err())
	}

	// A range inside block 0: nothing past it is read.
	store, ra = setup(rows[3].Key)
	it = tablets.NewTabletReader(files, ra).Scan(ctx, tablets.Range{Start: rows[1].Key, End: rows[3].Key}, nil)
	for it.Next() {
	}
	ra.close()
	if it.Err() != nil {
		t.Fatal(it.Err())
	}
	for b := 1; b <= ReadAhead; b++ {
		if g := store.count(tablets.BlockKey("f", b)); g != 0 {
			t.Errorf("a range inside block 0: block %d read %d times", b, g)
		}
	}
}

// TestReadAheadBatches: over a store that reads many objects per
// request, a whole-file scan that starts with an empty cache reads only
// its first block with a request of its own; every other block comes
// from read-ahead requests of ReadAhead/2 blocks or more, each block
// once, and the scan returns every row in order. The scan waits for the
// read-ahead after each row, so that the counts do not depend on which
// goroutine runs first.
func TestReadAheadBatches(t *testing.T) {
	ctx := context.Background()
	ds, files, rows := readAheadFile(t)
	store := &manyCounter{getCounter: &getCounter{BlockStore: ds, gets: map[string]int{}}}
	var counted atomic.Uint64
	ra := newReadAhead(cache.WithScan(ctx), newCache(t).Fetcher(store), files, nil, &counted)
	it := tablets.NewTabletReader(files, ra).Scan(ctx, tablets.Range{}, nil)
	n := 0
	for it.Next() {
		if e := it.Entry(); string(e.Key) != string(rows[n].Key) || string(e.Value) != string(rows[n].Value) {
			t.Fatalf("row %d: %q, want %q", n, e.Key, rows[n].Key)
		}
		n++
		ra.wg.Wait()
	}
	ra.close()
	if it.Err() != nil || n != len(rows) {
		t.Fatalf("%d rows of %d, %v", n, len(rows), it.Err())
	}
	nb := int(files[0].GetBlocks())
	if g := store.blockGets(); g != 1 {
		t.Errorf("the scan read %d blocks with requests of their own, want 1 (block 0)", g)
	}
	if o := store.objects.Load(); o != int64(nb-1) {
		t.Errorf("read-ahead requests read %d blocks, want %d (every block but the first, once)", o, nb-1)
	}
	if c := counted.Load(); c != uint64(nb-1) {
		t.Errorf("read-ahead counter %d, want %d", c, nb-1)
	}
	if r, most := store.requests.Load(), int64((nb-1+ReadAhead/2-1)/(ReadAhead/2)); r > most {
		t.Errorf("%d read-ahead requests for %d blocks, want at most %d", r, nb-1, most)
	}
}

// TestReadAheadEndsWithTheScan: closing a scan's read-ahead while a
// read of it waits for the store cancels the read and waits for it: no
// goroutine of it is left.
func TestReadAheadEndsWithTheScan(t *testing.T) {
	ds, files, _ := readAheadFile(t)
	ignore := goleak.IgnoreCurrent()
	c, err := cache.New(cache.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	blocked := &blockingStore{BlockStore: ds, release: make(chan struct{})}
	ra := newReadAhead(context.Background(), c.Fetcher(blocked), files, nil, nil)
	ra.after(tablets.BlockKey("f", 0), false) // as a miss of block 0 does
	testutil.Eventually(t, 10*time.Second, "a read ahead waiting for the store", func() bool { return blocked.waiting.Load() > 0 })
	ra.close() // cancels the read and returns once it has ended
	if w, r := blocked.waiting.Load(), blocked.returned.Load(); r != w {
		t.Errorf("close returned with %d of %d reads ahead still waiting for the store", w-r, w)
	}
	close(blocked.release)
	c.Close()
	goleak.VerifyNone(t, ignore)
}

// blockingStore reads many objects per request; its GetMany blocks
// until its context ends or release is closed.
type blockingStore struct {
	tablets.BlockStore
	waiting, returned atomic.Int64
	release           chan struct{}
}

func (b *blockingStore) GetMany(ctx context.Context, keys []string) (map[string][]byte, error) {
	b.waiting.Add(1)
	defer b.returned.Add(1)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-b.release:
	}
	out := map[string][]byte{}
	for _, k := range keys {
		if d, err := b.BlockStore.Get(ctx, k); err == nil {
			out[k] = d
		}
	}
	return out, nil
}
