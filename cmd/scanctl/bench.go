package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/scanplane/scanplane/cache"
	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/tablets"
)

// runBench is `scanctl bench --table T`: whole-table scans through the
// cluster, one per --parallel value per round (alternating), beside the
// rate of the tablets reader alone over the same blocks, read from the
// block store into memory and decoded and checked in this process
// through a host cache warmed by one pass, as a scan server reads them.
func runBench(ctx context.Context, g *globals, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	table := fs.String("table", "", "table `NAME` (required)")
	parallel := fs.String("parallel", "1,"+strconv.Itoa(client.DefaultParallel), "prefetch windows `LIST` to scan with (ScanOptions.Parallel), comma-separated; 1 = one tablet at a time")
	rounds := fs.Int("rounds", 1, "`N` rounds, each scanning once with every --parallel value")
	warmup := fs.Bool("warmup", true, "scan the table once before the timed scans (warms the scan servers' caches)")
	maxBuffer := fs.Int("max-buffer", 0, "`BYTES` of rows a parallel scan may hold for the caller (ScanOptions.MaxBufferBytes); 0 = the client's default")
	reader := fs.Bool("reader", true, "also time the tablets reader alone over the table's blocks (--rounds timed passes over each tablet, the median of each)")
	count := fs.Bool("count", false, "also time Client.Count of the whole table (rows counted at the scan servers) with every --parallel value")
	lookups := fs.Int("lookups", 0, "then time `N` one-row lookups of keys sampled by the warm-up scan, one after another, with nothing else scanning and then during whole-table scans (0 = none)")
	blocksDir := fs.String("blocks-dir", "", "the shared `DIR` the table's blocks were ingested into with --blocks-dir (default: JetStream)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process over the timed scans (after the warm-up, before the reader) to `FILE` (go tool pprof)")
	window := fs.Uint("window", 0, "`N` batches in flight per tablet stream (client.Config.Window); 0 = the client's default")
	batchRows := fs.Uint("batch-rows", 0, "`N` rows per batch at most (client.Config.BatchRows); 0 = the server's default")
	batchBytes := fs.Uint("batch-bytes", 0, "`BYTES` of rows per batch (client.Config.BatchBytes); 0 = the server's default")
	gogc := fs.Int("gogc", 0, "the garbage collector's target `PERCENT` for this process (debug.SetGCPercent); 0 = the runtime's ($GOGC, else 100)")
	traceFile := fs.String("trace", "", "write an execution trace of this process over the timed scans and the --lookups (the --reader pass too, when on) to `FILE` (go tool trace)")
	h := hints{}
	fs.Var(h, "hint", "scan hint `KEY=VALUE`, e.g. scan_type=batch (repeatable)")
	if _, err := parse("bench", g, fs, args, out); err != nil {
		return err
	}
	if *table == "" {
		return usageError{errors.New("--table is required")}
	}
	if err := tablets.ValidateTableName(*table); err != nil {
		return usageError{fmt.Errorf("--table: %w", err)}
	}
	if *maxBuffer < 0 {
		return usageError{fmt.Errorf("--max-buffer %d: want >= 0", *maxBuffer)}
	}
	if *rounds < 1 {
		return usageError{fmt.Errorf("--rounds %d: want >= 1", *rounds)}
	}
	if *lookups < 0 {
		return usageError{fmt.Errorf("--lookups %d: want >= 0", *lookups)}
	}
	if *gogc < 0 {
		return usageError{fmt.Errorf("--gogc %d: want >= 0", *gogc)}
	}
	if *gogc > 0 {
		defer debug.SetGCPercent(debug.SetGCPercent(*gogc))
	}
	if *lookups > 0 && !*warmup {
		return usageError{errors.New("--lookups needs --warmup (it samples the keys to look up)")}
	}
	g.tune = func(c *client.Config) {
		if *window > 0 {
			c.Window = uint32(min(*window, 1<<31))
		}
		c.BatchRows, c.BatchBytes = uint32(min(*batchRows, 1<<31)), uint32(min(*batchBytes, 1<<31))
	}
	windows, err := parseWindows(*parallel)
	if err != nil {
		return usageError{err}
	}
	return withClient(ctx, g, errOut, func(ctx context.Context, c *client.Client) error {
		meta, err := c.Table(ctx, *table)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "table %s generation %d: %d tablets\n", *table, meta.Generation, meta.Tablets)
		opts := func(p int) client.ScanOptions {
			return client.ScanOptions{Hints: h, Parallel: p, MaxBufferBytes: *maxBuffer}
		}
		var keys [][]byte
		if *warmup {
			var err error
			if _, keys, err = benchScan(ctx, c, *table, opts(windows[len(windows)-1]), sampleKeys); err != nil {
				return fmt.Errorf("warm-up scan: %w", err)
			}
		}
		results := map[int][]benchResult{}
		counts := map[int][]benchResult{}
		stopProfile := func() error { return nil }
		if *cpuProfile != "" {
			if stopProfile, err = startCPUProfile(*cpuProfile); err != nil {
				return err
			}
		}
		stopTrace := func() {}
		if *traceFile != "" {
			if stopTrace, err = startTrace(*traceFile); err != nil {
				return err
			}
		}
		for r := range *rounds {
			for _, p := range windows {
				res, _, err := benchScan(ctx, c, *table, opts(p), 0)
				if err != nil {
					return fmt.Errorf("scan with --parallel %d: %w", p, err)
				}
				results[p] = append(results[p], res)
				fmt.Fprintf(errOut, "round %d, parallel %d: %s\n", r+1, p, res)
				if *count {
					start := time.Now()
					n, err := c.Count(ctx, *table, client.Range{}, opts(p))
					if err != nil {
						return fmt.Errorf("count with --parallel %d: %w", p, err)
					}
					if n != res.rows {
						return fmt.Errorf("count with --parallel %d: %d rows, the scan %d", p, n, res.rows)
					}
					cr := benchResult{rows: n, took: time.Since(start)}
					counts[p] = append(counts[p], cr)
					fmt.Fprintf(errOut, "round %d, count, parallel %d: %s\n", r+1, p, cr)
				}
			}
		}
		if *lookups == 0 {
			stopTrace()
		} else {
			defer stopTrace() // after the lookups (the reader, when on, runs before them)
		}
		if err := stopProfile(); err != nil {
			return err
		}
		var rd benchResult
		if *reader {
			if rd, err = benchReader(ctx, g, *blocksDir, *table, meta.Generation, *rounds); err != nil {
				return fmt.Errorf("reader: %w", err)
			}
			for _, rs := range results {
				if rs[0].rows != rd.rows || rs[0].bytes != rd.bytes {
					return fmt.Errorf("the scan returned %d rows (%d bytes), the reader %d (%d)", rs[0].rows, rs[0].bytes, rd.rows, rd.bytes)
				}
			}
		}
		printBench(out, windows, results, counts, rd, *reader)
		if *lookups > 0 {
			return benchLookups(ctx, c, out, *table, keys, *lookups, opts(windows[len(windows)-1]))
		}
		return nil
	})
}

// sampleKeys is how many keys the warm-up scan samples for --lookups.
const sampleKeys = 10000

// benchLookups times n one-row lookups of keys (in a fixed pseudo-random
// order), one after another: first with nothing else scanning, then
// while whole-table scans with opts run one after another, and prints
// each set's percentiles.
func benchLookups(ctx context.Context, c *client.Client, out io.Writer, table string, keys [][]byte, n int, opts client.ScanOptions) error {
	if len(keys) == 0 {
		return errors.New("lookups: the warm-up scan sampled no key")
	}
	r := rand.New(rand.NewPCG(27, 1))
	var sched schedLatency
	var gcs gcCycles
	run := func() ([]time.Duration, error) {
		sched.start()
		gcs.start()
		defer sched.stop()
		defer gcs.stop()
		lat := make([]time.Duration, 0, n)
		for range n {
			k := keys[r.IntN(len(keys))]
			start := time.Now()
			got := 0
			var rows *client.Rows
			// A region per lookup in the --trace.
			trace.WithRegion(ctx, "lookup", func() {
				rows = c.Scan(ctx, table, client.SingleKey(k), client.ScanOptions{})
				for rows.Next() {
					got++
				}
			})
			lat = append(lat, time.Since(start))
			if err := rows.Err(); err != nil {
				return nil, err
			}
			if got != 1 {
				return nil, fmt.Errorf("lookup of %s: %d rows", tablets.FormatKey(k), got)
			}
		}
		return lat, nil
	}
	idle, err := run()
	if err != nil {
		return fmt.Errorf("lookups: %w", err)
	}
	sctx, stop := context.WithCancel(ctx)
	scans := make(chan error, 1)
	var scanned atomic.Int64
	scanStart := time.Now()
	go func() {
		for sctx.Err() == nil {
			res, _, err := benchScan(sctx, c, table, opts, 0)
			if err != nil && sctx.Err() == nil {
				scans <- err
				return
			}
			scanned.Add(int64(res.rows))
		}
		scans <- nil
	}()
	busy, err := run()
	stop()
	serr := <-scans
	scanTook := time.Since(scanStart)
	if serr != nil {
		return fmt.Errorf("whole-table scan beside the lookups: %w", serr)
	}
	if err != nil {
		return fmt.Errorf("lookups during whole-table scans: %w", err)
	}
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "one-row lookups\tn\tp50 ms\tp90 ms\tp99 ms\tmax ms\tp99/p50\tsched p99 ms\tGC cycles\t")
	line := func(what string, lat []time.Duration, sched float64, gcs uint64) {
		slices.Sort(lat)
		q := func(f float64) time.Duration { return lat[min(len(lat)-1, int(f*float64(len(lat))))] }
		ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.1f\t%.2f\t%d\t\n", what, len(lat), ms(q(0.5)), ms(q(0.9)), ms(q(0.99)), ms(lat[len(lat)-1]),
			float64(q(0.99))/float64(q(0.5)), sched*1e3, gcs)
	}
	line("idle", idle, sched.p99[0], gcs.n[0])
	line(fmt.Sprintf("during whole-table scans (%d rows scanned, %.3f M rows/s)", scanned.Load(), float64(scanned.Load())/scanTook.Seconds()/1e6), busy, sched.p99[1], gcs.n[1])
	return tw.Flush()
}

// parseWindows parses --parallel: a comma-separated list of windows.
func parseWindows(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || p < 1 || p > client.MaxParallel {
			return nil, fmt.Errorf("--parallel %q: %q is not a window in 1..%d", s, f, client.MaxParallel)
		}
		out = append(out, p)
	}
	return out, nil
}

// benchResult is one timed pass over the table.
type benchResult struct {
	rows, bytes uint64 // bytes: keys and values
	took        time.Duration
	stats       *client.ScanStats // of a scan: what its streams did
}

func (r benchResult) rowsPerSec() float64 { return float64(r.rows) / r.took.Seconds() }
func (r benchResult) mbPerSec() float64   { return float64(r.bytes) / 1e6 / r.took.Seconds() }

func (r benchResult) String() string {
	s := fmt.Sprintf("%d rows in %v: %.3f M rows/s, %.1f MB/s", r.rows, r.took.Round(time.Millisecond), r.rowsPerSec()/1e6, r.mbPerSec())
	if st := r.stats; st != nil {
		s += fmt.Sprintf(" (%d batches, %d requests, %d resumes)", st.Batches, st.Requests, st.Resumes)
	}
	return s
}

// benchScan scans the whole table; with sample > 0 it also returns
// about sample of its keys, evenly spread.
func benchScan(ctx context.Context, c *client.Client, table string, opts client.ScanOptions, sample int) (benchResult, [][]byte, error) {
	var res benchResult
	var keys [][]byte
	start := time.Now()
	rows := c.Scan(ctx, table, client.Range{}, opts)
	defer rows.Close()
	for rows.Next() {
		r := rows.Row()
		// Every 97th key, then every other one kept, while they are too many.
		if sample > 0 && res.rows%97 == 0 {
			keys = append(keys, slices.Clone(r.Key))
			if len(keys) > 2*sample {
				for i := range sample {
					keys[i] = keys[2*i]
				}
				keys = keys[:sample]
			}
		}
		res.rows++
		res.bytes += uint64(len(r.Key) + len(r.Value))
	}
	res.took = time.Since(start)
	st := rows.Stats()
	res.stats = &st
	return res, keys, rows.Err()
}

// benchReader reads every tablet of meta's generation with the tablets
// reader: its index and blocks copied from the block store into memory,
// read once through a fresh host cache (decoded and checked against the
// index: tablets.VerifyBlock), then timed passes over the warm cache,
// of which the median counts; one tablet is in memory at a time.
func benchReader(ctx context.Context, g *globals, blocksDir, table string, gen uint64, passes int) (benchResult, error) {
	// The client role may not read blocks; the admin role may.
	conn, err := dialAs(ctx, g, "admin", 0)
	if err != nil {
		return benchResult{}, err
	}
	defer conn.Close()
	ms, err := conn.MetaStore(ctx)
	if err != nil {
		return benchResult{}, err
	}
	meta, err := ms.Get(ctx, table, gen)
	if err != nil {
		return benchResult{}, fmt.Errorf("table %s generation %d: %w", table, gen, err)
	}
	var store tablets.BlockStore
	if blocksDir != "" {
		store, err = tablets.NewDirStore(blocksDir)
	} else {
		store, err = conn.BlockStore(ctx)
	}
	if err != nil {
		return benchResult{}, err
	}
	var res benchResult
	for _, tm := range meta.GetTablets() {
		local := memBlocks{}
		for _, ref := range tm.GetFiles() {
			keys := []string{tablets.IndexKey(ref.GetId())}
			for i := range int(ref.GetBlocks()) {
				keys = append(keys, tablets.BlockKey(ref.GetId(), i))
			}
			for _, k := range keys {
				data, err := store.Get(ctx, k)
				if err != nil {
					return res, err
				}
				local[k] = data
			}
		}
		bc, err := cache.New(cache.DefaultConfig())
		if err != nil {
			return res, err
		}
		rd := tablets.NewTabletReader(tm.GetFiles(), bc.Fetcher(local))
		var timed []benchResult
		for i := range 1 + passes { // the first pass fills the cache
			pass := benchResult{}
			start := time.Now()
			it := rd.Scan(ctx, tablets.Range{}, nil)
			for it.Next() {
				e := it.Entry()
				pass.rows++
				pass.bytes += uint64(len(e.Key) + len(e.Value))
			}
			pass.took = time.Since(start)
			if err := it.Err(); err != nil {
				bc.Close()
				return res, fmt.Errorf("tablet %d, pass %d: %w", tm.GetRef().GetIndex(), i+1, err)
			}
			bc.Wait()
			if i > 0 {
				timed = append(timed, pass)
			}
		}
		bc.Close()
		slices.SortFunc(timed, func(a, b benchResult) int { return int(a.took - b.took) })
		pass := timed[len(timed)/2]
		res.rows += pass.rows
		res.bytes += pass.bytes
		res.took += pass.took
	}
	return res, nil
}

// memBlocks is a read-only in-memory tablets.BlockStore.
type memBlocks map[string][]byte

func (m memBlocks) Put(context.Context, string, []byte) error { return errors.New("read-only") }
func (m memBlocks) Delete(context.Context, string) error      { return errors.New("read-only") }
func (m memBlocks) Get(_ context.Context, key string) ([]byte, error) {
	if d, ok := m[key]; ok {
		return d, nil
	}
	return nil, fmt.Errorf("%w: %s", tablets.ErrNotFound, key)
}

// printBench prints the median of each mode's rounds, and the reader's.
func printBench(out io.Writer, windows []int, results, counts map[int][]benchResult, rd benchResult, reader bool) {
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "what\trows\tMB\tseconds\tM rows/s\tMB/s\t% of reader\t")
	line := func(what string, r benchResult) {
		pct := "-"
		if reader {
			pct = fmt.Sprintf("%.1f", 100*r.rowsPerSec()/rd.rowsPerSec())
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.3f\t%.3f\t%.1f\t%s\t\n", what, r.rows, float64(r.bytes)/1e6, r.took.Seconds(),
			r.rowsPerSec()/1e6, r.mbPerSec(), pct)
	}
	median := func(what string, rs []benchResult) {
		rs = slices.Clone(rs)
		slices.SortFunc(rs, func(a, b benchResult) int { return int(a.took - b.took) })
		if len(rs) > 1 {
			what += fmt.Sprintf(" (median of %d)", len(rs))
		}
		line(what, rs[len(rs)/2])
	}
	for _, p := range windows {
		median(fmt.Sprintf("scan, parallel %d", p), results[p])
	}
	for _, p := range windows {
		if len(counts[p]) > 0 {
			median(fmt.Sprintf("count, parallel %d", p), counts[p])
		}
	}
	if reader {
		line("reader alone (warm host cache)", rd)
	}
	tw.Flush()
}

// gcCycles counts this process's completed GC cycles over each set of
// lookups (runtime/metrics /gc/cycles/total:gc-cycles).
type gcCycles struct {
	from uint64
	n    []uint64
}

func gcCount() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

func (g *gcCycles) start() { g.from = gcCount() }
func (g *gcCycles) stop()  { g.n = append(g.n, gcCount()-g.from) }

// schedLatency is the p99 of this process's goroutine scheduling latency
// (runtime/metrics /sched/latencies:seconds: how long runnable goroutines
// waited for a processor) over each set of lookups, in seconds: a lookup
// wakes several goroutines of the client, so when a whole-table scan's
// goroutines hold the processors, its wait shows here.
type schedLatency struct {
	from *metrics.Float64Histogram
	p99  []float64
}

func schedHistogram() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

func (l *schedLatency) start() { l.from = schedHistogram() }

// stop appends the p99 since start (the upper bound of its bucket; 0
// when the runtime has no such metric or nothing was scheduled).
func (l *schedLatency) stop() {
	to := schedHistogram()
	p := 0.0
	if l.from != nil && to != nil && len(to.Counts) == len(l.from.Counts) {
		var total uint64
		for i := range to.Counts {
			total += to.Counts[i] - l.from.Counts[i]
		}
		var acc uint64
		for i := range to.Counts {
			if acc += to.Counts[i] - l.from.Counts[i]; total > 0 && float64(acc) >= 0.99*float64(total) {
				p = to.Buckets[i+1]
				break
			}
		}
	}
	l.p99 = append(l.p99, p)
}

// startTrace writes an execution trace (runtime/trace) to path until stop.
func startTrace(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--trace: %w", err)
	}
	if err := trace.Start(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--trace: %w", err)
	}
	return func() {
		trace.Stop()
		_ = f.Close()
	}, nil
}
