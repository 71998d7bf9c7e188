package cache

import (
	"context"
	"fmt"
	"testing"
)

// TestLargeScanKeepsTheHotSet: a hot set of blocks read again and again
// stays cached through a scan that reads four times the cache's capacity
// once: after the scan, reading the hot set again hits the cache for
// every hot block that was cached before it (the hits counter, not
// timing). The scan fills free room first and then reads through.
// ristretto's access counts are sampled and may be dropped, so TinyLFU
// alone does not reliably protect the hot set; the scan's admission into
// free room does.
func TestLargeScanKeepsTheHotSet(t *testing.T) {
	const blk = 64 << 10
	cfg := DefaultConfig()
	cfg.MaxBytes = 64 * blk
	c := newCache(t, cfg)
	store := dirStore(t)
	// The hot set and the scan's first LargeScanReads blocks (admitted as
	// any scan's) fit together.
	hot := make([]string, 64-LargeScanReads-8)
	for i := range hot {
		hot[i] = fmt.Sprintf("hot.%d", i)
		if err := store.Put(context.Background(), hot[i], block(blk, uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	cold := make([]string, 4*64)
	for i := range cold {
		cold[i] = fmt.Sprintf("cold.%d", i)
		if err := store.Put(context.Background(), cold[i], block(blk, uint64(1000+i))); err != nil {
			t.Fatal(err)
		}
	}
	f := c.Fetcher(store)
	// readHot reads every hot block once, each a lookup of its own, and
	// returns how many hit the cache.
	readHot := func() int {
		before := c.Stats().Hits
		for _, k := range hot {
			if _, _, err := f.FetchBlock(WithScan(context.Background()), k); err != nil {
				t.Fatal(err)
			}
		}
		c.Wait()
		return int(c.Stats().Hits - before)
	}
	for range 4 {
		readHot()
	}
	cached := readHot()
	if cached < len(hot)/2 {
		t.Fatalf("only %d of %d hot blocks cached after 5 reads each", cached, len(hot))
	}
	scan := WithScan(context.Background())
	for _, k := range cold {
		if _, _, err := f.FetchBlock(scan, k); err != nil {
			t.Fatal(err)
		}
	}
	c.Wait()
	st := c.Stats()
	after := readHot()
	t.Logf("hot blocks cached before the scan %d, after %d; the scan bypassed %d of %d blocks", cached, after, st.Bypassed, len(cold))
	if after < cached {
		t.Errorf("the scan evicted %d of the %d cached hot blocks", cached-after, cached)
	}
	if st.Bypassed == 0 || st.Bypassed > uint64(len(cold)) {
		t.Errorf("Bypassed = %d, want some of the scan's %d blocks", st.Bypassed, len(cold))
	}
}
