package e2e

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/tablets"
)

// BenchmarkFullTabletScan100k: one tablet of 100 000 rows scanned in full
// through the whole system (client → coordinator → scan server process →
// rows streamed back), on 1 host × 1 server. The first scan warms the
// host cache; the timed scans read from it.
func BenchmarkFullTabletScan100k(b *testing.B) {
	f := startWith(b, 1, 1, 100000, 1)
	ctx := context.Background()
	if err := f.scan(ctx, 0, len(f.truth)); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		rows := f.c.Scan(ctx, table, tablets.Range{}, client.ScanOptions{})
		n := 0
		for rows.Next() {
			n++
		}
		if rows.Err() != nil || n != len(f.truth) {
			b.Fatalf("%d rows, err %v", n, rows.Err())
		}
	}
	b.ReportMetric(float64(b.N*len(f.truth))/time.Since(start).Seconds(), "rows/s")
}

// BenchmarkOneRowScan: a one-row scan's round trip through the coordinator
// (client → router → tablet actor → scan server → client), on 3 hosts × 2
// servers with 100 000 rows over 8 tablets. Run with -benchtime=10000x for
// p50/p99 over 10 000 scans.
func BenchmarkOneRowScan(b *testing.B) {
	f := start(b)
	ctx := context.Background()
	for i := 0; i < 200; i++ { // warm connections, tablet actors and caches
		if err := f.scan(ctx, i*499, i*499+1); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := (i * 7919) % len(f.truth)
		t := time.Now()
		rows := f.c.Scan(ctx, table, tablets.Range{Start: f.truth[k].Key, End: append(f.truth[k].Key[:len(f.truth[k].Key):len(f.truth[k].Key)], 0)}, client.ScanOptions{})
		n := 0
		for rows.Next() {
			n++
		}
		if rows.Err() != nil || n != 1 {
			b.Fatalf("%d rows, err %v", n, rows.Err())
		}
		lat = append(lat, time.Since(t))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}
