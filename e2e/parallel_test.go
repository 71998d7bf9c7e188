package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/tablets"
)

// parallelTablets: the tablets of the parallel-scan tests' table.
const parallelTablets = 16

// TestParallelScansMatchGroundTruth: whole-table and random-range scans
// with every prefetch window and byte bound (down to 1 byte, where only
// the tablet the caller reads may hold a batch) and with limits yield
// exactly the rows of the ingest, in key order, each once; a scan closed
// mid-way or whose context ends leaves no goroutine behind and the rows
// before are exact; BatchScan yields the union of its ranges exactly once.
func TestParallelScansMatchGroundTruth(t *testing.T) {
	clustertest.SkipShort(t)
	f := startWith(t, 2, 2, 60000, parallelTablets)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	n := len(f.truth)

	t.Run("whole table", func(t *testing.T) {
		for _, par := range []int{1, 2, 4, 8, 32} {
			for _, buf := range []int{0, 1, 64 << 10} {
				opts := client.ScanOptions{Parallel: par, MaxBufferBytes: buf}
				wrong, failed := clustertest.CheckScan(ctx, f.c, table, f.truth, 0, n, opts)
				if wrong != nil || failed != nil {
					t.Fatalf("Parallel %d, MaxBufferBytes %d: %v %v", par, buf, wrong, failed)
				}
			}
		}
	})

	t.Run("random ranges and limits", func(t *testing.T) {
		r := rand.New(rand.NewPCG(27, 1))
		for i := range 40 {
			a := r.IntN(n)
			b := min(n, a+r.IntN(n/2))
			opts := client.ScanOptions{Parallel: 1 + r.IntN(8), MaxBufferBytes: r.IntN(3) * 100 << 10}
			if i%2 == 0 {
				opts.Limit = uint64(1 + r.IntN(max(1, b-a)+100))
			}
			if err := checkRange(ctx, f, a, b, opts); err != nil {
				t.Fatalf("scan %d of rows [%d, %d) %+v: %v", i, a, b, opts, err)
			}
		}
	})

	t.Run("close mid-scan", func(t *testing.T) {
		for _, stopAt := range []int{1, n / parallelTablets, n / 2} {
			// A 1-byte bound: at Close the tablets ahead may wait for room.
			rows := f.c.Scan(ctx, table, client.Range{}, client.ScanOptions{Parallel: 8, MaxBufferBytes: 1})
			i := 0
			for i < stopAt && rows.Next() {
				if r := rows.Row(); !bytes.Equal(r.Key, f.truth[i].Key) || !bytes.Equal(r.Value, f.truth[i].Value) {
					t.Fatalf("row %d is %q, want %q", i, r.Key, f.truth[i].Key)
				}
				i++
			}
			if i != stopAt {
				t.Fatalf("%d rows, then %v", i, rows.Err())
			}
			rows.Close()
			// Close returns once the goroutines called Done; each then
			// needs a moment to exit.
			testutil.Eventually(t, 5*time.Second, fmt.Sprintf("the prefetch goroutines to end after Close at row %d", stopAt),
				func() bool { return prefetchGoroutines() == 0 })
			if rows.Next() || rows.Err() != nil {
				t.Fatalf("Next after Close: a row or error %v", rows.Err())
			}
		}
		// The client still scans exactly.
		if wrong, failed := clustertest.CheckScan(ctx, f.c, table, f.truth, 0, n, client.ScanOptions{}); wrong != nil || failed != nil {
			t.Fatal(wrong, failed)
		}
	})

	t.Run("context cancelled mid-scan", func(t *testing.T) {
		sctx, scancel := context.WithCancel(ctx)
		defer scancel()
		rows := f.c.Scan(sctx, table, client.Range{}, client.ScanOptions{Parallel: 8})
		defer rows.Close()
		i := 0
		for rows.Next() {
			if r := rows.Row(); !bytes.Equal(r.Key, f.truth[i].Key) {
				t.Fatalf("row %d is %q, want %q", i, r.Key, f.truth[i].Key)
			}
			i++
			if i == n/3 {
				scancel()
			}
		}
		if !errors.Is(rows.Err(), context.Canceled) {
			t.Fatalf("after %d rows: %v, want context.Canceled", i, rows.Err())
		}
		testutil.Eventually(t, 5*time.Second, "the prefetch goroutines to end after the scan failed",
			func() bool { return prefetchGoroutines() == 0 })
	})

	t.Run("batch scan", func(t *testing.T) {
		r := rand.New(rand.NewPCG(28, 1))
		for i := range 20 {
			var ranges []client.Range
			want := make([]bool, n)
			for range 1 + r.IntN(12) {
				a := r.IntN(n)
				b := min(n, a+r.IntN(n/4))
				rng := client.KeyRange(f.truth[a].Key, nil)
				if b < n {
					rng.End = f.truth[b].Key
				}
				if r.IntN(8) == 0 {
					rng, a, b = client.Range{}, 0, n
				}
				ranges = append(ranges, rng)
				for j := a; j < b; j++ {
					want[j] = true
				}
			}
			opts := client.ScanOptions{Parallel: 1 + r.IntN(8), MaxBufferBytes: r.IntN(3) * 100 << 10}
			if err := checkBatchScan(ctx, f, ranges, want, opts); err != nil {
				t.Fatalf("batch scan %d of %v %+v: %v", i, ranges, opts, err)
			}
		}
	})
}

// checkRange scans the range from truth[a] to truth[b] and checks that it
// yields truth[a:b], cut at opts.Limit: in order, each once, no error.
func checkRange(ctx context.Context, f *fixture, a, b int, opts client.ScanOptions) error {
	rng := client.KeyRange(f.truth[a].Key, nil)
	if b < len(f.truth) {
		rng.End = f.truth[b].Key
	}
	want := b - a
	if opts.Limit > 0 && int(opts.Limit) < want {
		want = int(opts.Limit)
	}
	rows := f.c.Scan(ctx, table, rng, opts)
	defer rows.Close()
	i := 0
	for rows.Next() {
		r := rows.Row()
		if i >= want {
			return fmt.Errorf("extra row %q after %d", r.Key, want)
		}
		if e := f.truth[a+i]; !bytes.Equal(r.Key, e.Key) || !bytes.Equal(r.Value, e.Value) {
			return fmt.Errorf("row %d is %q, want %q", i, r.Key, e.Key)
		}
		i++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("after %d rows: %w", i, err)
	}
	if i != want {
		return fmt.Errorf("%d rows, want %d", i, want)
	}
	return nil
}

// checkBatchScan runs a BatchScan and checks it against want (want[i]:
// truth row i is in the union): every wanted row exactly once, no other,
// each piece's rows in key order.
func checkBatchScan(ctx context.Context, f *fixture, ranges []client.Range, want []bool, opts client.ScanOptions) error {
	index := map[string]int{}
	for i, e := range f.truth {
		index[string(e.Key)] = i
	}
	seen := make([]bool, len(want))
	rows := f.c.BatchScan(ctx, table, ranges, opts)
	defer rows.Close()
	got := 0
	for rows.Next() {
		r := rows.Row()
		i, ok := index[string(r.Key)]
		switch {
		case !ok || !bytes.Equal(r.Value, f.truth[i].Value):
			return fmt.Errorf("row %q is not a row of the table", r.Key)
		case !want[i]:
			return fmt.Errorf("row %d %q is in none of the ranges", i, r.Key)
		case seen[i]:
			return fmt.Errorf("row %d %q twice", i, r.Key)
		}
		seen[i] = true
		got++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("after %d rows: %w", got, err)
	}
	for i := range want {
		if want[i] && !seen[i] {
			return fmt.Errorf("row %d %q missing (%d rows)", i, f.truth[i].Key, got)
		}
	}
	return nil
}

// prefetchGoroutines counts the goroutines of parallel scans.
func prefetchGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "client.(*prefetch).worker")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestParallelScanErrorWhenReached: a block of a later tablet is damaged
// in the block store before any scan. A whole-table scan reading 8
// tablets at once fails that tablet while the caller still reads the
// first one; the caller gets every row before the damaged block, exactly
// as the one-tablet-at-a-time scan gives them, and then the error.
func TestParallelScanErrorWhenReached(t *testing.T) {
	clustertest.SkipShort(t)
	f := startWith(t, 2, 1, 40000, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	store, meta := clustertest.Stores(t, ctx, clustertest.Connect(t, ctx, f.cl.NATSURL(), nil))
	gen, err := meta.Current(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := meta.Get(ctx, table, gen)
	if err != nil {
		t.Fatal(err)
	}
	// Block 1 of tablet 3's first file: tablet 3 fails after at most its
	// first block's rows (none when the server reads block 1 before it
	// sends a batch).
	file := tm.GetTablets()[3].GetFiles()[0]
	if file.GetBlocks() < 2 {
		t.Fatalf("tablet 3's file has %d blocks", file.GetBlocks())
	}
	key := tablets.BlockKey(file.GetId(), 1)
	data, err := store.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	bad := slices.Clone(data)
	for i := len(bad) / 2; i < len(bad)/2+8; i++ {
		bad[i] ^= 0xff
	}
	if err := store.Put(ctx, key, bad); err != nil {
		t.Fatal(err)
	}
	firstOfTablet3 := slices.IndexFunc(f.truth, func(e tablets.Entry) bool {
		return bytes.Compare(e.Key, tm.GetSplitPoints()[2]) >= 0
	})

	rows := f.c.Scan(ctx, table, client.Range{}, client.ScanOptions{Parallel: 8})
	defer rows.Close()
	if !rows.Next() {
		t.Fatalf("no first row: %v", rows.Err())
	}
	// Tablet 3 fails (the coordinator answers the scan with an error)
	// while the caller holds the first row of tablet 0.
	testutil.Eventually(t, time.Minute, "the coordinator to fail tablet 3's scan", func() bool {
		st, err := f.c.Status(ctx)
		return err == nil && st.ScansFailed > 0
	})
	got := 1
	for rows.Next() {
		if r := rows.Row(); !bytes.Equal(r.Key, f.truth[got].Key) || !bytes.Equal(r.Value, f.truth[got].Value) {
			t.Fatalf("row %d is %q, want %q", got, r.Key, f.truth[got].Key)
		}
		got++
	}
	perr := rows.Err()
	var se *client.ScanError
	if !errors.As(perr, &se) || se.Code != client.CodeCorruptBlock {
		t.Fatalf("after %d rows: %v, want a CORRUPT_BLOCK error", got, perr)
	}
	if got < firstOfTablet3 || got >= len(f.truth) {
		t.Fatalf("%d rows before the error; tablet 3 starts at row %d: rows of tablets 0-2 were lost", got, firstOfTablet3)
	}

	// The one-tablet-at-a-time scan gives the same rows and error.
	serial := 0
	srows := f.c.Scan(ctx, table, client.Range{}, client.ScanOptions{Parallel: 1})
	defer srows.Close()
	for srows.Next() {
		serial++
	}
	if !errors.As(srows.Err(), &se) || se.Code != client.CodeCorruptBlock || serial != got {
		t.Fatalf("serial scan: %d rows, %v; parallel: %d rows, %v", serial, srows.Err(), got, perr)
	}
	t.Logf("%d rows (tablet 3 starts at %d), then %v", got, firstOfTablet3, perr)
}
