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
// which makes a run deterministic.
type eventQ struct{ h []event }

func (q *eventQ) less(i, j int) bool {
	if q.h[i].at != q.h[j].at {
		return q.h[i].at < q.h[j].at
	}
	return q.h[i].seq < q.h[j].seq
}

func (q *eventQ) push(e event) {
	q.h = append(q.h, e)
	i := len(q.h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

func (q *eventQ) pop() event {
	top := q.h[0]
	n := len(q.h) - 1
	q.h[0] = q.h[n]
	q.h[n] = event{}
	q.h = q.h[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && q.less(r, l) {
			m = r
		}
		if !q.less(m, i) {
			break
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
	return top
}

func (q *eventQ) len() int { return len(q.h) }
