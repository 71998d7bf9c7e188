package client

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// TestBulkWaitsForShortScans: bulk work waits while a short scan waits
// for a message, until it is heard or for shortWait at most; slots bound
// the goroutines doing bulk work at once; a closed stop ends a wait.
func TestBulkWaitsForShortScans(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBulkSlots(1)
		acquired := func(stop <-chan struct{}) <-chan time.Duration {
			got := make(chan time.Duration, 1)
			start := time.Now()
			go func() {
				if b.acquire(stop, nil) {
					got <- time.Since(start)
				} else {
					got <- -1
				}
			}()
			return got
		}
		pending := func(got <-chan time.Duration, what string) {
			t.Helper()
			synctest.Wait()
			select {
			case d := <-got:
				t.Fatalf("%s: bulk work went on after %v", what, d)
			default:
			}
		}

		// Heard: the bulk work goes on at once.
		b.shortWaiting()
		got := acquired(nil)
		pending(got, "a short scan waits")
		b.shortHeard()
		if d := <-got; d != 0 {
			t.Fatalf("bulk work went on %v after the short scan heard its message, want at once", d)
		}

		// The slot is held: a second goroutine waits for it.
		got = acquired(nil)
		pending(got, "the one slot is held")
		b.release()
		if d := <-got; d != 0 {
			t.Fatalf("bulk work went on %v after the slot was released, want at once", d)
		}
		if p := b.peak.Load(); p != 1 {
			t.Fatalf("%d goroutines held one slot at once", p)
		}
		b.release()

		// Not heard: the bulk work goes on after shortWait.
		b.shortWaiting()
		if d := <-acquired(nil); d != shortWait {
			t.Fatalf("bulk work went on after %v while a short scan waited, want %v", d, shortWait)
		}
		b.release()

		// Stopped while waiting.
		stop := make(chan struct{})
		got = acquired(stop)
		pending(got, "stop not yet closed")
		close(stop)
		if d := <-got; d != -1 {
			t.Fatal("acquire took a slot after stop was closed")
		}
		b.shortHeard()
	})
}

// TestParallelScanTakesBulkSlots: the goroutines of a parallel scan over
// 4 tablets handle their messages within the client's bulk slots (one
// here), and every row comes in order; a lookup leaves no short scan
// marked waiting, whether it ends or is cancelled.
func TestParallelScanTakesBulkSlots(t *testing.T) {
	c := fakeTable(t)
	c.bulk = newBulkSlots(1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows := c.Scan(ctx, "t", Range{}, ScanOptions{AllowUnverified: true, Parallel: 4})
	defer rows.Close()
	readFakeRows(t, rows, 0)
	if p := c.bulk.peak.Load(); p != 1 {
		t.Fatalf("at most %d goroutines of the parallel scan handled messages at once, want 1 (its one slot)", p)
	}

	for _, cancelled := range []bool{false, true} {
		lctx, lcancel := context.WithCancel(ctx)
		if cancelled {
			lcancel()
		}
		rows := c.Scan(lctx, "t", SingleKey(fakeRowKey(30)), ScanOptions{AllowUnverified: true})
		got := 0
		for rows.Next() {
			got++
		}
		rows.Close()
		lcancel()
		if !cancelled && (got != 1 || rows.Err() != nil) {
			t.Fatalf("lookup: %d rows, err %v", got, rows.Err())
		}
		c.bulk.mu.Lock()
		waiting := c.bulk.waiting
		c.bulk.mu.Unlock()
		if waiting != 0 {
			t.Fatalf("after a lookup (cancelled %v): %d short scans still marked waiting", cancelled, waiting)
		}
	}
}

// TestSerialScanTakesBulkSlots: a scan of several tablets read one at a
// time in its caller's goroutine (Parallel 1) handles its messages in
// the client's bulk slots, as a parallel scan does, and gives every row
// in order; a scan within one tablet (a lookup, a short range) takes no
// slot.
func TestSerialScanTakesBulkSlots(t *testing.T) {
	c := fakeTable(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.bulk = newBulkSlots(1)
	rows := c.Scan(ctx, "t", Range{}, ScanOptions{AllowUnverified: true, Parallel: 1})
	defer rows.Close()
	readFakeRows(t, rows, 0)
	if rows.par != nil {
		t.Fatal("the scan with Parallel 1 ran a prefetch")
	}
	if p := c.bulk.peak.Load(); p != 1 {
		t.Fatalf("the scan of 4 tablets read one at a time held %d bulk slots at most, want its 1", p)
	}

	for _, rng := range []Range{SingleKey(fakeRowKey(30)), KeyRange(fakeRowKey(26), fakeRowKey(40))} {
		c.bulk = newBulkSlots(1)
		rows := c.Scan(ctx, "t", rng, ScanOptions{AllowUnverified: true, Parallel: 1})
		n := 0
		for rows.Next() {
			n++
		}
		rows.Close()
		if rows.Err() != nil || n == 0 {
			t.Fatalf("scan of %s: %d rows, err %v", rng, n, rows.Err())
		}
		if p := c.bulk.peak.Load(); p != 0 {
			t.Fatalf("the scan of %s within one tablet took a bulk slot", rng)
		}
	}
}

// TestOnlyShortScansTakeHandOff: the endpoint actor yields the processor
// to the reader of a short scan (one range within one tablet, or a seek:
// a limit of at most shortLimit rows) after each of its messages; the streams of a scan of several tablets, read one at
// a time by its caller or by a prefetch's goroutines, are bulk work and
// wait their turn.
func TestOnlyShortScansTakeHandOff(t *testing.T) {
	c := fakeTable(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stop := make(chan struct{})
	defer close(stop)
	for _, tc := range []struct {
		name  string
		rng   Range
		limit uint64
		stop  <-chan struct{}
		short bool
	}{
		{"a lookup", SingleKey(fakeRowKey(30)), 0, nil, true},
		{"a range within one tablet", KeyRange(fakeRowKey(26), fakeRowKey(40)), 0, nil, true},
		{"a seek: a scan of 4 tablets with a limit of 1", Range{}, 1, nil, true},
		{"a scan of 4 tablets with a limit of shortLimit", Range{}, shortLimit, nil, true},
		{"a scan of 4 tablets with a limit above shortLimit", Range{}, shortLimit + 1, nil, false},
		{"a scan of 4 tablets read by its caller", Range{}, 0, nil, false},
		{"a scan of 4 tablets read by a prefetch", Range{}, 0, stop, false},
	} {
		rows := c.Scan(ctx, "t", tc.rng, ScanOptions{AllowUnverified: true, Parallel: 1})
		if err := rows.plan(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		run, err := rows.startRun(rows.pieces[0], tc.limit, tc.stop, &rows.stats, func([]tablets.Entry, uint64, *proofSeg) {})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		handOff, short := run.in.handOff, run.short
		// Read the piece to its end: no connection is left half made.
		for !run.finished {
			if err := run.step(); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		run.abandon()
		rows.Close()
		if handOff != tc.short || short != tc.short {
			t.Fatalf("%s: hand-off %v, short %v; want both %v", tc.name, handOff, short, tc.short)
		}
	}
}

// TestEndpointDeliversInline: the endpoint actor hands a row batch to its
// request's inbox on the goroutine that delivers it, before Send
// returns: no goroutine hand-off between the remote reader and the
// stream.
func TestEndpointDeliversInline(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	c := &Client{sys: sys, inboxes: map[string]*inbox{}}
	pid := sys.Root.Spawn(c.endpointProps())
	in := newInbox()
	c.inboxes["r1"] = in
	for i := range 3 {
		sys.Root.Send(pid, &messages.RowBatch{RequestId: "r1", Attempt: uint32(i + 1)})
		m, _ := in.take()
		if b, ok := m.(*messages.RowBatch); !ok || b.GetAttempt() != uint32(i+1) {
			t.Fatalf("message %d: the inbox holds %v when Send returns", i+1, m)
		}
	}
}

// TestBulkWindowBesideShortScans: a bulk stream that starts within
// shortRecent of a short scan's start asks for at most besideShortWindow
// batches in flight; one that starts later, or before any short scan,
// the client's window.
func TestBulkWindowBesideShortScans(t *testing.T) {
	c := fakeTable(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	window := func(rng Range) (uint32, bool) {
		t.Helper()
		rows := c.Scan(ctx, "t", rng, ScanOptions{AllowUnverified: true, Parallel: 1})
		defer rows.Close()
		if err := rows.plan(); err != nil {
			t.Fatal(err)
		}
		run, err := rows.startRun(rows.pieces[0], 0, nil, &rows.stats, func([]tablets.Entry, uint64, *proofSeg) {})
		if err != nil {
			t.Fatal(err)
		}
		defer run.abandon()
		for !run.finished {
			if err := run.step(); err != nil {
				t.Fatal(err)
			}
		}
		return run.window, run.short
	}
	c.cfg.Window = DefaultWindow
	if w, short := window(Range{}); short || w != DefaultWindow {
		t.Fatalf("a bulk stream before any short scan: window %d (short %v), want %d", w, short, DefaultWindow)
	}
	if w, short := window(SingleKey(fakeRowKey(30))); !short || w != DefaultWindow {
		t.Fatalf("a lookup: window %d (short %v), want %d", w, short, DefaultWindow)
	}
	if w, _ := window(Range{}); w != besideShortWindow {
		t.Fatalf("a bulk stream right after a lookup: window %d, want %d", w, besideShortWindow)
	}
	c.cfg.Window = 1
	if w, _ := window(Range{}); w != 1 {
		t.Fatalf("a bulk stream right after a lookup, client window 1: window %d, want 1", w)
	}
	c.cfg.Window = 0 // the servers' default
	if w, _ := window(Range{}); w != besideShortWindow {
		t.Fatalf("a bulk stream right after a lookup, the servers' window: window %d, want %d", w, besideShortWindow)
	}
	c.cfg.Window = DefaultWindow
	c.bulk.lastShort.Add(-int64(shortRecent)) // the lookup started shortRecent earlier
	if w, _ := window(Range{}); w != DefaultWindow {
		t.Fatalf("a bulk stream shortRecent after a lookup: window %d, want %d", w, DefaultWindow)
	}
}
