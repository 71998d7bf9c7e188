package policysim

import "github.com/scanplane/scanplane/scanflow"

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
	evProbe                         // a prequal probe reaches the server
	evProbeReply                    // its answer reaches the coordinator
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

// eventQ is a binary min-heap by (at, seq): equal times pop in push order,
// which makes a run deterministic. The heap holds keys and slot numbers
// only (no pointers: sifting needs no write barriers); the events wait in
// slots, reused once popped.
type eventQ struct {
	h     []qkey
	slots []event
	free  []int32
}

type qkey struct {
	at   int64
	seq  uint64
	slot int32
}

func (a qkey) less(b qkey) bool {
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}

func (q *eventQ) push(e event) {
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

func (q *eventQ) pop() event {
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

// peek is the time of the first event; the queue must not be empty.
func (q *eventQ) peek() int64 { return q.h[0].at }

func (q *eventQ) len() int { return len(q.h) }
