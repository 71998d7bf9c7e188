package loadtest

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestZipfShape compares the generator's rank frequencies with the Zipf
// law: ranks 0 and 1 are exact in Gray's method, the following ranks are
// approximated (YCSB's generator over-weights rank 2 by about 14%), and
// the head and tail masses match.
func TestZipfShape(t *testing.T) {
	const n, draws = 64, 400000
	z, err := NewZipf(n, 0.99)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 11))
	counts := make([]float64, n)
	for i := 0; i < draws; i++ {
		k := z.Next(r)
		if k < 0 || k >= n {
			t.Fatalf("rank %d out of [0, %d)", k, n)
		}
		counts[k]++
	}
	freq := func(i int) float64 { return counts[i] / draws }
	for i := 0; i < 10; i++ {
		tol := 0.03 // relative: exact ranks, sampling noise only
		if i >= 2 {
			tol = 0.20 // the continuous approximation
		}
		if got, want := freq(i), z.Prob(i); math.Abs(got-want) > tol*want {
			t.Errorf("rank %d: frequency %.4f, theory %.4f (tolerance %.0f%%)", i, got, want, 100*tol)
		}
	}
	var head, headWant, tail, tailWant float64
	for i := 0; i < n; i++ {
		if i < 8 {
			head, headWant = head+freq(i), headWant+z.Prob(i)
		} else if i >= n/2 {
			tail, tailWant = tail+freq(i), tailWant+z.Prob(i)
		}
	}
	if math.Abs(head-headWant) > 0.05*headWant {
		t.Errorf("top 8 ranks: %.4f of draws, theory %.4f", head, headWant)
	}
	if math.Abs(tail-tailWant) > 0.15*tailWant {
		t.Errorf("bottom half: %.4f of draws, theory %.4f", tail, tailWant)
	}
	if freq(0) < 1.8*freq(1) || freq(1) < freq(4) || freq(4) < freq(20) {
		t.Errorf("frequencies not decreasing with rank: %v", counts[:21])
	}
	for _, bad := range []float64{0, 1, -0.5, 1.5, math.NaN()} {
		if _, err := NewZipf(n, bad); err == nil {
			t.Errorf("NewZipf(theta %v) accepted", bad)
		}
	}
}

func testWorkload(t *testing.T, c WorkloadConfig) *Workload {
	t.Helper()
	w, err := NewWorkload(c)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestWorkloadOps: ops stay inside their tablet, have 1..ScanRows rows,
// the full-tablet fraction and the hot-tablet share hold, Zipfian
// popularity follows the permutation, and Op(k) is deterministic.
func TestWorkloadOps(t *testing.T) {
	bounds := []int{0, 100, 250, 400, 1000}
	w := testWorkload(t, WorkloadConfig{Rows: 1000, Bounds: bounds, Zipf: 0.99, ScanRows: 100, FullTablet: 0.1, HotTablet: 2, HotShare: 0.8, Seed: 3})
	const n = 20000
	full, hot := 0, 0
	perTablet := make([]int, 4)
	for k := uint64(0); k < n; k++ {
		op := w.Op(k, k%2 == 1)
		if op != w.Op(k, k%2 == 1) {
			t.Fatalf("Op(%d) not deterministic", k)
		}
		lo, hi := bounds[op.Tablet], bounds[op.Tablet+1]
		if op.Lo < lo || op.Hi > hi || op.Lo >= op.Hi {
			t.Fatalf("op %+v outside tablet %d [%d, %d)", op, op.Tablet, lo, hi)
		}
		if op.Full {
			full++
			if op.Lo != lo || op.Hi != hi {
				t.Fatalf("full op %+v is not the whole tablet", op)
			}
		} else if op.Hi-op.Lo > 100 {
			t.Fatalf("short op %+v has %d rows", op, op.Hi-op.Lo)
		}
		if op.Hot {
			hot++
			if op.Tablet != 2 || k%2 == 0 {
				t.Fatalf("hot op %+v", op)
			}
		}
		if k%2 == 0 {
			perTablet[op.Tablet]++
		}
	}
	if f := float64(full) / n; math.Abs(f-0.1) > 0.02 {
		t.Errorf("full-tablet fraction %.3f, want 0.1", f)
	}
	if f := float64(hot) / (n / 2); math.Abs(f-0.8) > 0.03 {
		t.Errorf("hot share %.3f, want 0.8", f)
	}
	if top := w.TabletByRank(0); perTablet[top] < perTablet[w.TabletByRank(3)]*2 {
		t.Errorf("most popular tablet %d got %d scans, least popular %d got %d", top, perTablet[top], w.TabletByRank(3), perTablet[w.TabletByRank(3)])
	}

	if _, err := NewWorkload(WorkloadConfig{Rows: 10, Bounds: []int{0, 5, 5, 10}, ScanRows: 1}); err == nil {
		t.Error("empty tablet accepted")
	}
	if _, err := NewWorkload(WorkloadConfig{Rows: 10, Bounds: []int{0, 9}, ScanRows: 1}); err == nil {
		t.Error("bounds not covering the rows accepted")
	}
}

func TestTabletBounds(t *testing.T) {
	got := TabletBounds([][]byte{[]byte("row000000010"), []byte("row000000025x")}, 40)
	want := []int{0, 10, 26, 40}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func TestScheduleAt(t *testing.T) {
	start := time.Unix(1000, 0)
	s := Schedule{Start: start, Rate: 250}
	for _, k := range []uint64{0, 1, 249, 250, 1000, 123457} {
		want := start.Add(time.Duration(k) * 4 * time.Millisecond)
		if got := s.At(k); got.Sub(want).Abs() > time.Microsecond {
			t.Errorf("At(%d) = %v, want %v", k, got, want)
		}
	}
	for _, d := range []time.Duration{0, time.Millisecond, 4 * time.Millisecond, 5 * time.Millisecond, time.Second, time.Second + time.Nanosecond} {
		n := s.Count(start.Add(d))
		if n > 0 && !s.At(n-1).Before(start.Add(d)) || s.At(n).Before(start.Add(d)) {
			t.Errorf("Count(+%v) = %d: At(n-1) = +%v, At(n) = +%v", d, n, s.At(n-1).Sub(start), s.At(n).Sub(start))
		}
	}
	if got := s.Count(start.Add(time.Second)); got != 250 {
		t.Errorf("Count(+1s) = %d, want 250", got)
	}
}

// TestOpenLoopNoCoordinatedOmission runs the open-loop worker against a
// fake cluster whose first scan stalls until ten more scans are due. Those
// scans start late, and their latency must count from their scheduled slot,
// not from when the (single) client got round to them; every slot of the
// window must be scanned.
func TestOpenLoopNoCoordinatedOmission(t *testing.T) {
	const rate = 200 // one slot every 5ms
	cfg := DefaultConfig()
	cfg.Rate, cfg.Clients, cfg.Drain = rate, 1, 10*time.Second
	w := testWorkload(t, WorkloadConfig{Rows: 1000, Bounds: []int{0, 500, 1000}, ScanRows: 10, HotTablet: 0, Seed: 1})
	t0 := time.Now().Add(10 * time.Millisecond)
	sched := Schedule{Start: t0, Rate: rate}
	p := &phase{cfg: cfg, wl: w, ver: NewVerifier(1000), kinds: []string{FaultNone}}
	p.measureStart = t0 // no warm-up
	p.end = sched.At(40)
	p.rec = newRecorder(p.measureStart, p.end.Sub(p.measureStart), 100*time.Millisecond)
	stallUntil := sched.At(10)
	p.scanner = func(ctx context.Context, op Op) outcome {
		if op.Seq == 0 {
			// The stalled server: wait (polling the clock) until slot 10 is due.
			for time.Now().Before(stallUntil) {
				time.Sleep(time.Millisecond)
			}
		}
		var tally Tally
		for i := op.Lo; i < op.Hi; i++ {
			tally.Add(rowKey(i), rowValue(i))
		}
		return outcome{rows: tally.Count, wrong: p.ver.Check(op.Lo, op.Hi, tally)}
	}
	var mu sync.Mutex
	lat := map[uint64]time.Duration{}
	starts := map[uint64]time.Time{}
	p.observe = func(op Op, o outcome) {
		mu.Lock()
		lat[op.Seq] = o.latency
		starts[op.Seq] = o.sched
		mu.Unlock()
	}
	var next atomic.Uint64
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.worker(ctx, t0, &next)

	if len(lat) != 40 {
		t.Fatalf("%d scans ran, want all 40 slots of the window", len(lat))
	}
	for k := uint64(0); k < 40; k++ {
		if !starts[k].Equal(sched.At(k)) {
			t.Errorf("scan %d measured from %v, want its slot %v", k, starts[k].Sub(t0), sched.At(k).Sub(t0))
		}
	}
	for k := uint64(1); k < 10; k++ {
		// Scan k could not start before the stall ended at slot 10.
		if min := stallUntil.Sub(sched.At(k)); lat[k] < min {
			t.Errorf("scan %d: latency %v, but it waited at least %v behind the stalled scan", k, lat[k], min)
		}
	}
	if lat[1] <= lat[9] {
		t.Errorf("later slots waited less: latency of scan 1 %v should exceed scan 9's %v", lat[1], lat[9])
	}
	if l := p.rec.live(); l.scans != 40 || l.wrong != 0 || l.errors != 0 {
		t.Errorf("recorder: %+v, want 40 scans, no wrong, no errors", l)
	}
	if p99 := p.rec.live().p99; p99 < stallUntil.Sub(sched.At(1)) {
		t.Errorf("p99 %v hides the stall (scan 1 waited %v)", p99, lat[1])
	}
}

// TestClosedLoop: with Rate 0 the worker runs scans back to back until the
// window ends, latency from each scan's own start.
func TestClosedLoop(t *testing.T) {
	// Bounded by scan count, not wall time (a short window may run no scan
	// at all on a busy machine): the window is long, and the
	// scanner ends it during scan number want. The worker checks the
	// window before every scan, so it must stop right after that one.
	const want = 20
	cfg := DefaultConfig()
	cfg.Rate, cfg.Clients = 0, 1
	w := testWorkload(t, WorkloadConfig{Rows: 100, Bounds: []int{0, 100}, ScanRows: 5, Seed: 1})
	p := &phase{cfg: cfg, wl: w, ver: NewVerifier(100), kinds: []string{FaultNone}}
	t0 := time.Now()
	p.measureStart, p.end = t0, t0.Add(time.Hour)
	p.rec = newRecorder(p.measureStart, time.Minute, time.Second)
	n := 0
	p.scanner = func(ctx context.Context, op Op) outcome {
		n++
		switch {
		case n > want:
			t.Fatalf("scan %d ran after the window ended during scan %d", n, want)
		case n == want:
			p.end = time.Now()
		}
		return outcome{rows: op.Hi - op.Lo}
	}
	var next atomic.Uint64
	p.worker(context.Background(), t0, &next)
	if n != want || p.rec.live().scans != want {
		t.Fatalf("%d scans ran, recorder saw %d; want %d back to back until the window ended", n, p.rec.live().scans, want)
	}
	if got := next.Load(); got != want+1 {
		t.Fatalf("worker took %d ops, want %d (the last one is not run: the window had ended)", got, want+1)
	}
}
