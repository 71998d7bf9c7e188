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
type estimator struct {
	rif  []int
	lat  []int64
	end  []int64
	seq  []int
	n    int
	next int
}

const (
	estSamples = 128
	estNearest = 8
	estMaxAge  = int64(2 * time.Second)
)

func (e *estimator) add(end int64, rif int, lat int64) {
	e.n++
	if len(e.rif) < estSamples {
		e.rif, e.lat, e.end, e.seq = append(e.rif, rif), append(e.lat, lat), append(e.end, end), append(e.seq, e.n)
		return
	}
	e.rif[e.next], e.lat[e.next], e.end[e.next], e.seq[e.next] = rif, lat, end, e.n
	e.next = (e.next + 1) % estSamples
}

func (e *estimator) estimate(now int64, rif int) int64 {
	// near: the nearest samples so far, best first; dist and seq theirs.
	var near, dist, seq [estNearest]int
	k := 0
	for i, r := range e.rif {
		if now-e.end[i] > estMaxAge {
			continue
		}
		d, sq := max(r-rif, rif-r), e.seq[i]
		// Sample i comes before near[j] when nearer, or as near and newer.
		if k == len(near) && !(d < dist[k-1] || (d == dist[k-1] && sq > seq[k-1])) {
			continue
		}
		j := min(k, len(near)-1)
		for j > 0 && (d < dist[j-1] || (d == dist[j-1] && sq > seq[j-1])) {
			near[j], dist[j], seq[j] = near[j-1], dist[j-1], seq[j-1]
			j--
		}
		near[j], dist[j], seq[j] = i, d, sq
		if k < len(near) {
			k++
		}
	}
	if k == 0 {
		return 0
	}
	var lats [estNearest]int64
	for i := 0; i < k; i++ {
		lats[i] = e.lat[near[i]]
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
