package policysim

import (
	"math"
	"slices"

	"github.com/scanplane/scanplane/scanflow"
)

// evKind names a simulation event.
type evKind uint8

const (
	evArrival     evKind = iota + 1 // a request reaches its coordinator
	evStartScan                     // a StartScan reaches the server
	evCancel                        // a Cancel reaches the server
	evServerBusy                    // the busy timeout of a queued attempt passes at the server
	evNotice                        // the accept notice of a running attempt is due
	evServiceDone                   // a running attempt finishes
	evToClient                      // a server's message reaches the coordinator
	evFlowTimer                     // a ScanFlow timer fires
	evSignal                        // a busy or timeout load signal reaches every coordinator
	evHeartbeat                     // a host sends its load report
	evHeartbeatIn                   // the report reaches every coordinator
	evRateSwitch                    // the servers' rates are redrawn
	evSweep                         // coordinators drop servers that missed heartbeats
	evProbes                        // a decision's prequal probes reach their servers (probes.go)
	evHang                          // the hung server stops
)

// msgKind names a server's message to a coordinator.
type msgKind uint8

const (
	msgStarted  msgKind = iota + 1 // ScanStarted without first data (the accept notice)
	msgBusy                        // Busy
	msgFinished                    // ScanFinished with one batch (first data)
	msgCanceled                    // ScanFinished CANCELLED
)

// event is one entry of the queue; which fields count depends on kind.
type event struct {
	at    int64 // virtual ns
	seq   uint64
	kind  evKind
	msg   msgKind
	timer scanflow.TimerKind
	srv   int32
	n     uint32 // attempt number
	val   int64  // queue length, RIF or latency
	att   *attempt
	req   *request
	cl    *client
	hb    *beat
}

// eventQ holds the events in order of (at, seq): equal times pop in push
// order, which makes a run deterministic. Most events come a fixed delay
// after the moment they are pushed (a message's network latency, a
// server's accept notice, the first busy timeouts): pushed at a
// non-decreasing now with increasing seq, the events of one delay are in
// (at, seq) order already, so each such delay (a lane) is a FIFO. The
// others wait in a binary min-heap, which holds keys and slot numbers only
// (no pointers: sifting needs no write barriers); those events wait in
// slots, reused once popped. The first event is the least of the heap's
// top and the lanes' heads.
type eventQ struct {
	h     []qkey
	slots []event
	free  []int32
	lanes []lane
	// inLanes counts the events in the lanes.
	inLanes int
}

// lane is the FIFO of the events pushed delay after their push.
type lane struct {
	delay int64
	ev    []event
	head  int
}

type qkey struct {
	at   int64
	seq  uint64
	slot int32
}

func (a qkey) less(b qkey) bool {
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}

// setLanes gives each of delays (distinct, >= 0) a lane. The queue must
// be empty, and from then on every push must pass the time of the
// latest pop or later as now (non-decreasing).
func (q *eventQ) setLanes(delays []int64) {
	q.lanes = q.lanes[:0]
	for _, d := range delays {
		if d < 0 || slices.ContainsFunc(q.lanes, func(l lane) bool { return l.delay == d }) {
			continue
		}
		q.lanes = append(q.lanes, lane{delay: d})
	}
}

// push adds e, pushed at now.
func (q *eventQ) push(e event, now int64) {
	d := e.at - now
	for i := range q.lanes {
		if l := &q.lanes[i]; l.delay == d {
			if l.head > 0 && l.head*2 >= len(l.ev) {
				n := copy(l.ev, l.ev[l.head:])
				clear(l.ev[n:])
				l.ev, l.head = l.ev[:n], 0
			}
			l.ev = append(l.ev, e)
			q.inLanes++
			return
		}
	}
	var slot int32
	if n := len(q.free); n > 0 {
		slot = q.free[n-1]
		q.free = q.free[:n-1]
		q.slots[slot] = e
	} else {
		slot = int32(len(q.slots))
		q.slots = append(q.slots, e)
	}
	k := qkey{at: e.at, seq: e.seq, slot: slot}
	i := len(q.h)
	q.h = append(q.h, k)
	for i > 0 {
		p := (i - 1) / 2
		if !k.less(q.h[p]) {
			break
		}
		q.h[i] = q.h[p]
		i = p
	}
	q.h[i] = k
}

// first returns where the first event waits (-1: the heap's top, else
// its lane) and its time; the queue must not be empty.
func (q *eventQ) first() (src int, at int64) {
	src = -1
	best := qkey{at: math.MaxInt64, seq: math.MaxUint64}
	if len(q.h) > 0 {
		best = q.h[0]
	}
	for i := range q.lanes {
		l := &q.lanes[i]
		if l.head == len(l.ev) {
			continue
		}
		if k := (qkey{at: l.ev[l.head].at, seq: l.ev[l.head].seq}); k.less(best) {
			src, best = i, k
		}
	}
	return src, best.at
}

// pop removes and returns the first event.
func (q *eventQ) pop() event {
	src, _ := q.first()
	return q.popFrom(src)
}

// popFrom removes and returns the first event, which waits at src
// (first).
func (q *eventQ) popFrom(src int) event {
	if src >= 0 {
		l := &q.lanes[src]
		e := l.ev[l.head]
		l.ev[l.head] = event{}
		l.head++
		q.inLanes--
		return e
	}
	top := q.h[0]
	n := len(q.h) - 1
	last := q.h[n]
	q.h = q.h[:n]
	if n > 0 {
		q.h[0] = last
		q.down(0, n)
	}
	e := q.slots[top.slot]
	q.slots[top.slot] = event{}
	q.free = append(q.free, top.slot)
	return e
}

// compact drops the events dead reports true for and restores the heap
// order. The pop order is that of the (at, seq) keys, which are distinct,
// so the events left pop exactly as they would have.
func (q *eventQ) compact(dead func(*event) bool) {
	kept := q.h[:0]
	for _, k := range q.h {
		if dead(&q.slots[k.slot]) {
			q.slots[k.slot] = event{}
			q.free = append(q.free, k.slot)
			continue
		}
		kept = append(kept, k)
	}
	q.h = kept
	n := len(kept)
	for i := n/2 - 1; i >= 0; i-- {
		q.down(i, n)
	}
	for i := range q.lanes {
		l := &q.lanes[i]
		live := l.ev[:0]
		for j := l.head; j < len(l.ev); j++ {
			if !dead(&l.ev[j]) {
				live = append(live, l.ev[j])
			}
		}
		clear(l.ev[len(live):])
		q.inLanes -= len(l.ev) - l.head - len(live)
		l.ev, l.head = live, 0
	}
}

// down sifts the key at i down the first n keys of the heap.
func (q *eventQ) down(i, n int) {
	k := q.h[i]
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && q.h[r].less(q.h[l]) {
			m = r
		}
		if !q.h[m].less(k) {
			break
		}
		q.h[i] = q.h[m]
		i = m
	}
	q.h[i] = k
}

func (q *eventQ) len() int { return len(q.h) + q.inLanes }
