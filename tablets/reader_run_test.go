package tablets

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/scanplane/scanplane/messages"
)

// TestNextRun: the runs NextRun appends, interleaved with Next at
// random, are the packed rows Next returns, in order, each once, over
// one file and over several; every run stays within its limits, and
// Entry and LastKeyAt name its last row.
func TestNextRun(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	store := newMemStore()
	// Three files: overlapping keys (a later file wins a tie), and a run
	// of keys only the first one has.
	var refs []*messages.FileRef
	for f, step := range []int{2, 3, 7} {
		var entries []Entry
		for n := 0; n < 6000; n += step {
			if f > 0 && n > 4000 {
				break
			}
			entries = append(entries, Entry{Key: []byte(fmt.Sprintf("k%05d", n)), Value: bytes.Repeat([]byte{byte(n + f)}, rnd.IntN(300))})
		}
		refs = append(refs, writeFile(t, store, fmt.Sprintf("run.f%d", f), 2048, entries))
	}
	key := func() []byte {
		if rnd.IntN(5) == 0 {
			return nil
		}
		return []byte(fmt.Sprintf("k%05d", rnd.IntN(6100)))
	}
	for files := 1; files <= len(refs); files++ {
		testNextRun(t, rnd, NewTabletReader(refs[:files], StoreFetcher{Store: store}), key)
	}
}

func testNextRun(t *testing.T, rnd *rand.Rand, reader *TabletReader, key func() []byte) {
	t.Helper()
	for iter := range 100 {
		rng := Range{Start: key(), End: key()}
		if rng.Validate() != nil {
			rng.Start, rng.End = rng.End, rng.Start
		}
		var after []byte
		if iter%3 == 0 {
			after = key()
		}
		// What Next returns (TestTabletReaderMerge checks it).
		var want []byte
		for _, e := range collect(t, reader.Scan(context.Background(), rng, after)) {
			want = AppendPackedRow(want, e.Key, e.Value)
		}
		it := reader.Scan(context.Background(), rng, after)
		var got []byte
		for {
			if rnd.IntN(4) == 0 {
				if !it.Next() {
					break
				}
				e := it.Entry()
				got = AppendPackedRow(got, e.Key, e.Value)
				continue
			}
			maxRows, maxBytes := 1+rnd.IntN(200), 1+rnd.IntN(40000)
			base := len(got)
			var run Run
			var ok bool
			got, run, ok = it.NextRun(got, maxRows, maxBytes)
			if !ok {
				break
			}
			rows, err := UnpackRows(got[base:], 0)
			if err != nil {
				t.Fatalf("scan %v: run: %v", rng, err)
			}
			kv := 0
			for _, r := range rows {
				kv += len(r.Key) + len(r.Value)
			}
			last := rows[len(rows)-1].Key
			switch {
			case len(rows) != run.Rows || kv != run.KV:
				t.Fatalf("scan %v: run of %d rows (%d kv bytes) says %d (%d)", rng, len(rows), kv, run.Rows, run.KV)
			case run.Rows > maxRows:
				t.Fatalf("scan %v: run of %d rows, max %d", rng, run.Rows, maxRows)
			case run.Rows > 1 && len(got)-PackedRowSize(len(last), len(rows[len(rows)-1].Value)) >= maxBytes:
				t.Fatalf("scan %v: run goes on after %d bytes, max %d", rng, len(got), maxBytes)
			case !bytes.Equal(got[run.LastKeyAt:run.LastKeyAt+run.LastKeyLen], last):
				t.Fatalf("scan %v: LastKeyAt names %q, the last key is %q", rng, got[run.LastKeyAt:run.LastKeyAt+run.LastKeyLen], last)
			case !bytes.Equal(it.Entry().Key, last):
				t.Fatalf("scan %v: Entry is %q after a run ending at %q", rng, it.Entry().Key, last)
			}
		}
		if err := it.Err(); err != nil {
			t.Fatalf("scan %v: %v", rng, err)
		}
		if !bytes.Equal(got, want) {
			g, _ := UnpackRows(got, 0)
			w, _ := UnpackRows(want, 0)
			t.Fatalf("scan %v after %q: %d rows, want %d", rng, after, len(g), len(w))
		}
	}

}
