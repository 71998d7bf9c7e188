package policysim

import (
	"time"

	"github.com/scanplane/scanplane/selection"
)

// Attempt phases at the server.
const (
	phaseTransit uint8 = iota // StartScan not arrived yet
	phaseQueued
	phaseRunning
	phaseEnded
)

// attempt is one dispatch as the model sees it: the flow's attempt and
// where it is at its server.
type attempt struct {
	req         *request
	n           uint32
	srv         int32
	hedge       bool
	busyTimeout int64
	arrived     int64 // at the server
	rif         int   // the server's running and queued scans when it arrived
	began       int64 // when a worker took it
	phase       uint8
}

// server is one modelled scan server: Workers scans run at once, the rest
// wait in a FIFO queue; a queued scan not started within its busy timeout
// is answered busy, as the scan server does.
type server struct {
	id      selection.ServerID
	host    int
	slow    float64 // service-time multiple of a fault
	fast    bool    // running at RateFactor·μ
	hung    bool
	running []*attempt
	queue   []*attempt
	head    int
	queued  int
	est     estimator
}

func (s *server) enqueue(a *attempt) {
	if s.head > 0 && s.head*2 >= len(s.queue) {
		n := copy(s.queue, s.queue[s.head:])
		clear(s.queue[n:])
		s.queue = s.queue[:n]
		s.head = 0
	}
	s.queue = append(s.queue, a)
	s.queued++
}

// next pops the oldest attempt still queued, or nil.
func (s *server) next() *attempt {
	for s.head < len(s.queue) {
		a := s.queue[s.head]
		s.queue[s.head] = nil
		s.head++
		if a.phase == phaseQueued {
			s.queued--
			return a
		}
	}
	return nil
}

func (s *server) stopRunning(a *attempt) {
	for i, r := range s.running {
		if r == a {
			last := len(s.running) - 1
			s.running[i] = s.running[last]
			s.running[last] = nil
			s.running = s.running[:last]
			return
		}
	}
}

// estimator is the scan server's latency estimate for prequal's probes, as
// the scan server computes it: the median latency, arrival to end, of the
// 8 of its last 128 finished scans that ended within 2 s and arrived at
// the RIF nearest the one asked (newer first on equal distance); 0 with
// none.
//
// The samples wait in a ring, each one's fields side by side (an
// estimate reads a sample's end, order and latency together); byRIF
// lists each RIF's samples (ring slots), oldest first. Samples end in
// the order they are added, so the ones too old to count are the oldest
// of each list, and the nearest ones are found RIF by RIF outward from
// the one asked, newest first.
type estimator struct {
	smp   []estSample
	byRIF [][]int32
	n     int
	next  int
}

// estSample is one finished scan: when it ended, its latency, its number
// among the server's samples (larger is newer) and its RIF at arrival.
type estSample struct {
	end int64
	lat int64
	seq int
	rif int
}

const (
	estSamples = 128
	estNearest = 8
	estMaxAge  = int64(2 * time.Second)
)

func (e *estimator) add(end int64, rif int, lat int64) {
	e.n++
	slot := len(e.smp)
	if slot < estSamples {
		e.smp = append(e.smp, estSample{end: end, lat: lat, seq: e.n, rif: rif})
	} else {
		slot = e.next
		// The sample replaced is the oldest: the first of its RIF's list.
		old := e.byRIF[e.smp[slot].rif]
		e.byRIF[e.smp[slot].rif] = append(old[:0], old[1:]...)
		e.smp[slot] = estSample{end: end, lat: lat, seq: e.n, rif: rif}
		e.next = (e.next + 1) % estSamples
	}
	for len(e.byRIF) <= rif {
		e.byRIF = append(e.byRIF, nil)
	}
	e.byRIF[rif] = append(e.byRIF[rif], int32(slot))
}

func (e *estimator) estimate(now int64, rif int) int64 {
	var lats [estNearest]int64
	k := 0
	smp := e.smp
	// newest is i when list[i] ended within estMaxAge, else -1: the
	// samples before it ended earlier, too old as well.
	newest := func(list []int32, i int) int {
		if i >= 0 && now-smp[list[i]].end > estMaxAge {
			return -1
		}
		return i
	}
	for d := 0; k < len(lats); d++ {
		lo, hi := rif-d, rif+d
		if lo < 0 && hi >= len(e.byRIF) {
			break
		}
		var a, b []int32
		if lo >= 0 && lo < len(e.byRIF) {
			a = e.byRIF[lo]
		}
		if d > 0 && hi < len(e.byRIF) {
			b = e.byRIF[hi]
		}
		// Merge the two lists newest first (equal distance: the newer
		// sample first), stopping at the first sample too old in each.
		i, j := newest(a, len(a)-1), newest(b, len(b)-1)
		for k < len(lats) && (i >= 0 || j >= 0) {
			var slot int32
			if j < 0 || (i >= 0 && smp[a[i]].seq > smp[b[j]].seq) {
				slot, i = a[i], newest(a, i-1)
			} else {
				slot, j = b[j], newest(b, j-1)
			}
			lats[k] = smp[slot].lat
			k++
		}
	}
	if k == 0 {
		return 0
	}
	for i := 1; i < k; i++ {
		for j := i; j > 0 && lats[j] < lats[j-1]; j-- {
			lats[j], lats[j-1] = lats[j-1], lats[j]
		}
	}
	if k%2 == 1 {
		return lats[k/2]
	}
	return (lats[k/2-1] + lats[k/2]) / 2
}
