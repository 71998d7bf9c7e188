package client

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/scanplane/scanplane/wire"
)

// bulkSlots lets a Client's short scans go before its bulk work. Bulk
// work is what scans of several tablets do with a stream message
// (unpack, verify, yield), whether the goroutines of a parallel scan or
// the caller of one that reads a tablet at a time (Parallel 1, a limit)
// do it; short scans are scans of one tablet read in the caller's
// goroutine (a lookup). A short scan's request and rows pass
// through several goroutines of the process (the remote's writers and
// readers, the caller); when bulk work keeps every processor busy, each
// of those hand-offs waits behind it, so:
//
//   - at most one fewer goroutine than GOMAXPROCS (at least one) does
//     bulk work at a time, each for one message, and yields the
//     processor after it (runtime.Gosched): goroutines woken meanwhile
//     run first;
//   - while a short scan waits for a message, bulk work waits for it to
//     arrive, at most shortWait per message, so that a stream of short
//     scans slows bulk scans but does not stop them;
//   - a bulk stream that starts within shortRecent of a short scan's
//     start asks for a window of at most besideShortWindow batches: a
//     short scan's batch comes to the client on the connection of its
//     server's process, behind the batches that process sent before it,
//     and the client's reader decodes each of them first.
//
// The scan servers stop sending a stream whose messages wait, after its
// window. Safe for concurrent use.
type bulkSlots struct {
	ch chan struct{}
	// busy and peak count the holders now and the most at once.
	busy, peak atomic.Int32

	// lastShort: when the latest short scan started (UnixNano).
	lastShort atomic.Int64

	mu sync.Mutex
	// waiting counts the short scans waiting for a message; quiet is
	// closed while it is 0.
	waiting int
	quiet   chan struct{}
}

// shortWait bounds how long bulk work waits for short scans per message.
const shortWait = 5 * time.Millisecond

// shortRecent and besideShortWindow: a bulk stream that starts within
// shortRecent of a short scan's start has at most besideShortWindow
// batches in flight.
const (
	shortRecent       = time.Second
	besideShortWindow = 2
)

// newBulkSlots returns slots for n goroutines at once.
func newBulkSlots(n int) *bulkSlots {
	q := make(chan struct{})
	close(q)
	return &bulkSlots{ch: make(chan struct{}, n), quiet: q}
}

// bulkGoroutines is how many goroutines of a Client do bulk work at once.
func bulkGoroutines() int { return max(1, runtime.GOMAXPROCS(0)-1) }

// shortStarted notes that a short scan starts at now.
func (b *bulkSlots) shortStarted(now time.Time) { b.lastShort.Store(now.UnixNano()) }

// bulkWindow is the window of a bulk stream that starts at now, given the
// client's window w (0: the servers' default).
func (b *bulkSlots) bulkWindow(now time.Time, w uint32) uint32 {
	last := b.lastShort.Load()
	if last == 0 || now.UnixNano()-last >= int64(shortRecent) {
		return w
	}
	if w == 0 {
		w = wire.DefaultWindow
	}
	return min(w, besideShortWindow)
}

// shortWaiting and shortHeard bracket a short scan's wait for a message.
func (b *bulkSlots) shortWaiting() {
	b.mu.Lock()
	if b.waiting == 0 {
		b.quiet = make(chan struct{})
	}
	b.waiting++
	b.mu.Unlock()
}

func (b *bulkSlots) shortHeard() {
	b.mu.Lock()
	b.waiting--
	if b.waiting == 0 {
		close(b.quiet)
	}
	b.mu.Unlock()
}

// acquire takes a slot once no short scan waits (or shortWait passed);
// false once stop or done is closed first.
func (b *bulkSlots) acquire(stop, done <-chan struct{}) bool {
	b.mu.Lock()
	quiet := b.quiet
	b.mu.Unlock()
	select {
	case <-quiet:
	default:
		t := time.NewTimer(shortWait)
		defer t.Stop()
		select {
		case <-quiet:
		case <-t.C:
		case <-stop:
			return false
		case <-done:
			return false
		}
	}
	select {
	case b.ch <- struct{}{}:
	case <-stop:
		return false
	case <-done:
		return false
	}
	n := b.busy.Add(1)
	for {
		p := b.peak.Load()
		if n <= p || b.peak.CompareAndSwap(p, n) {
			break
		}
	}
	return true
}

// release gives the slot back and yields the processor.
func (b *bulkSlots) release() {
	b.busy.Add(-1)
	<-b.ch
	runtime.Gosched()
}
