package client

import (
	"errors"
	"sync"

	"github.com/scanplane/scanplane/tablets"
)

// prefetch reads the pieces of a scan several at a time, each in a
// goroutine of its own running the piece's TabletStream (tabletRun), and
// hands their verified batches to the caller of Rows.Next:
//
//   - ordered (Scan): piece by piece in key order. A piece starts only
//     while it is fewer than window pieces after the one the caller reads
//     (the head). The error of a piece reaches the caller when it gets
//     there, after every row before it; no piece after a failed one
//     starts.
//   - unordered (BatchScan): batches in the order they were verified, each
//     piece's in key order; window pieces run at once. The first error
//     ends the scan at the caller's next batch.
//
// Buffered bytes (keys and values of batches not yet taken) stay at most
// maxBytes, except that a batch is always accepted when nothing is
// buffered, or (ordered) for the head when it has none: the caller can
// always progress. A goroutine that cannot put its batch waits, and
// meanwhile does not acknowledge the stream's next batches, so its scan
// server stops after Config.Window batches.
type prefetch struct {
	r        *Rows
	pieces   []tablets.Piece
	ordered  bool
	window   int
	maxBytes int
	stop     chan struct{}
	wg       sync.WaitGroup
	// wake is signalled when a batch is put or a piece ends (the caller
	// waits on it).
	wake chan struct{}

	mu sync.Mutex
	// changed is closed (and replaced) when the caller takes a batch or
	// moves to the next piece: the goroutines waiting for room or for
	// the window wait on it.
	changed chan struct{}
	stopped bool
	next    int // the next piece to start
	head    int // ordered: the piece the caller reads
	// failedAt: ordered, the first piece that failed (len(pieces) if none).
	failedAt int
	slots    map[int]*slot // ordered: by piece
	ready    []qbatch      // unordered: batches in the order they were put
	running  int           // unordered: pieces started and not ended
	err      error         // unordered: the first error
	bytes    int           // buffered
	waiting  int           // goroutines waiting for room in put
	live     int           // goroutines started and not ended
	stats    ScanStats     // Tablets, Requests, Resumes, Batches
}

type slot struct {
	q    []qbatch
	done bool
	err  error
}

type qbatch struct {
	rows    []tablets.Entry
	counted uint64    // rows proven by count before rows (Rows.count)
	proof   *proofSeg // ScanOptions.Proofs: what proved rows
	bytes   int
}

// startPrefetch starts reading r.pieces with window goroutines.
func startPrefetch(r *Rows, window, maxBytes int) *prefetch {
	p := &prefetch{r: r, pieces: r.pieces, ordered: !r.unordered, window: window, maxBytes: maxBytes,
		stop: make(chan struct{}), wake: make(chan struct{}, 1), changed: make(chan struct{}),
		failedAt: len(r.pieces), slots: map[int]*slot{}}
	n := min(window, len(p.pieces))
	p.wg.Add(n)
	p.live = n
	for range n {
		go p.worker()
	}
	return p
}

func (p *prefetch) worker() {
	defer func() {
		p.mu.Lock()
		p.live--
		p.mu.Unlock()
		p.wg.Done()
	}()
	for {
		i, ok := p.claim()
		if !ok {
			return
		}
		err := p.read(i)
		p.end(i, err)
	}
}

// claim returns the next piece to read, waiting for the window; false
// when there is none or the scan stopped. (A scan with a limit reads one
// tablet at a time, without a prefetch.)
func (p *prefetch) claim() (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		switch {
		case p.stopped || p.next >= len(p.pieces) || p.next > p.failedAt || !p.ordered && p.err != nil:
			return 0, false
		case p.ordered && p.next >= p.head+p.window:
			ch := p.changed
			p.mu.Unlock()
			select {
			case <-ch:
			case <-p.stop:
			}
			p.mu.Lock()
			continue
		}
		i := p.next
		p.next++
		if p.ordered {
			p.slots[i] = &slot{}
		} else {
			p.running++
		}
		return i, true
	}
}

// read reads piece i, putting its batches; it returns the error that ended
// it (errStopped when the scan was closed).
func (p *prefetch) read(i int) error {
	var pending []qbatch
	var st, reported ScanStats
	t, err := p.r.startRun(p.pieces[i], 0, p.stop, &st, func(rows []tablets.Entry, counted uint64, pf *proofSeg) {
		pending = append(pending, qbatch{rows: rows, counted: counted, proof: pf})
	})
	if err != nil {
		p.addStats(st, &reported)
		return err
	}
	for {
		for _, b := range pending {
			if err := p.put(i, b); err != nil {
				pending = nil
				t.abandon()
				if !errors.Is(err, errStopped) {
					err = t.ctxErr(err)
				}
				p.addStats(st, &reported)
				return err
			}
		}
		pending = pending[:0]
		p.addStats(st, &reported)
		if t.finished {
			return nil
		}
		if err := t.step(); err != nil {
			t.abandon()
			// Rows the stream yielded with the failure are verified:
			// hand them over before the error.
			for _, b := range pending {
				if p.put(i, b) != nil {
					break
				}
			}
			p.addStats(st, &reported)
			return err
		}
	}
}

// addStats adds what a piece's stream did since *reported.
func (p *prefetch) addStats(st ScanStats, reported *ScanStats) {
	p.mu.Lock()
	p.stats.Tablets += st.Tablets - reported.Tablets
	p.stats.Requests += st.Requests - reported.Requests
	p.stats.Resumes += st.Resumes - reported.Resumes
	p.stats.Batches += st.Batches - reported.Batches
	p.mu.Unlock()
	*reported = st
}

// put hands a batch of piece i to the caller, waiting for room.
func (p *prefetch) put(i int, b qbatch) error {
	rows := b.rows
	if len(rows) == 0 && b.counted == 0 && b.proof == nil {
		return nil
	}
	n := 0
	for _, e := range rows {
		n += len(e.Key) + len(e.Value)
	}
	b.bytes = n
	ctx := p.r.ctx
	p.mu.Lock()
	for {
		if p.stopped {
			p.mu.Unlock()
			return errStopped
		}
		var s *slot
		if p.ordered {
			s = p.slots[i]
		}
		if p.bytes == 0 || p.bytes+n <= p.maxBytes || s != nil && i == p.head && len(s.q) == 0 {
			if s != nil {
				s.q = append(s.q, b)
			} else {
				p.ready = append(p.ready, b)
			}
			p.bytes += n
			p.mu.Unlock()
			p.signal()
			return nil
		}
		ch := p.changed
		p.waiting++
		p.mu.Unlock()
		var err error
		select {
		case <-ch:
		case <-p.stop:
		case <-ctx.Done():
			err = ctx.Err()
		}
		p.mu.Lock()
		p.waiting--
		if err != nil {
			p.mu.Unlock()
			return err
		}
	}
}

// end records that piece i ended, with err.
func (p *prefetch) end(i int, err error) {
	p.mu.Lock()
	if errors.Is(err, errStopped) {
		err = nil
	}
	if p.ordered {
		s := p.slots[i]
		s.done, s.err = true, err
		if err != nil && i < p.failedAt {
			p.failedAt = i
		}
	} else {
		p.running--
		if err != nil && p.err == nil {
			p.err = err
		}
	}
	p.mu.Unlock()
	p.signal()
}

func (p *prefetch) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// changedLocked wakes the goroutines waiting for room or for the window.
func (p *prefetch) changedLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// take returns the caller's next batch (ok), or the end of the scan (not
// ok), or the error that ended it.
func (p *prefetch) take() (qbatch, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if p.ordered {
			if p.head >= len(p.pieces) {
				return qbatch{}, false, nil
			}
			if s := p.slots[p.head]; s != nil {
				if len(s.q) > 0 {
					b := s.q[0]
					s.q[0] = qbatch{}
					s.q = s.q[1:]
					return p.taking(b), true, nil
				}
				if s.done {
					if s.err != nil {
						return qbatch{}, false, s.err
					}
					delete(p.slots, p.head)
					p.head++
					p.changedLocked()
					continue
				}
			}
		} else {
			switch {
			case p.err != nil:
				return qbatch{}, false, p.err
			case len(p.ready) > 0:
				b := p.ready[0]
				p.ready[0] = qbatch{}
				p.ready = p.ready[1:]
				return p.taking(b), true, nil
			case p.running == 0 && p.next >= len(p.pieces):
				return qbatch{}, false, nil
			}
		}
		p.mu.Unlock()
		<-p.wake
		p.mu.Lock()
	}
}

// taking accounts for the batch the caller takes.
func (p *prefetch) taking(b qbatch) qbatch {
	p.bytes -= b.bytes
	p.changedLocked()
	return b
}

func (p *prefetch) statsNow() ScanStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// close stops every goroutine (their streams are abandoned) and waits for
// them; safe to call more than once.
func (p *prefetch) close() {
	p.mu.Lock()
	if !p.stopped {
		p.stopped = true
		close(p.stop)
	}
	p.mu.Unlock()
	p.wg.Wait()
}
