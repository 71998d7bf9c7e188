package scanserver

import (
	"context"
	"sync"
	"testing"

	"github.com/scanplane/scanplane/cache"
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

// TestReadAheadAfterAMiss: a scan that misses its first block has the
// next ReadAhead blocks read in the background, and the one after those
// once it reaches the first of them; a scan whose range ends in its
// first block reads nothing ahead.
func TestReadAheadAfterAMiss(t *testing.T) {
	ctx := context.Background()
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
	if err := tablets.StoreFile(ctx, ds, ef); err != nil {
		t.Fatal(err)
	}
	files := []*messages.FileRef{ef.Ref()}
	nb := int(ef.Ref().GetBlocks())
	if nb < 10 {
		t.Fatalf("%d blocks", nb)
	}
	setup := func(end []byte) (*getCounter, *readAhead) {
		store := &getCounter{BlockStore: ds, gets: map[string]int{}}
		c, err := cache.New(cache.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return store, newReadAhead(ctx, c.Fetcher(store), files, end)
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
	// Into block 1, read ahead and now a cache hit: block ReadAhead+1 is
	// read ahead next.
	ix, err := tablets.DecodeIndex(mustGet(t, ds, tablets.IndexKey("f")))
	if err != nil {
		t.Fatal(err)
	}
	n := 1
	for ; n <= int(ix.Blocks[0].Entries); n++ {
		if !it.Next() {
			t.Fatal(it.Err())
		}
	}
	ra.wg.Wait()
	if g := store.count(tablets.BlockKey("f", ReadAhead+1)); g != 1 {
		t.Errorf("in block 1 (read ahead): block %d read %d times, want 1", ReadAhead+1, g)
	}
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

func mustGet(t *testing.T, s tablets.BlockStore, key string) []byte {
	t.Helper()
	b, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
