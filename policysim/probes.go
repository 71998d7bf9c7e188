package policysim

import (
	"time"

	"github.com/scanplane/scanplane/selection"
)

// Prequal's probes. A decision's probes leave together and reach their
// servers together: their events would have consecutive sequence numbers
// and one time, so no other event can come between them, and one event
// (evProbes) carries them all. Each answer reaches the coordinator one
// way later; what it changes (the policy's probe pool, and the
// coordinator's random source, which rounds its reuse budget) only a
// decision of that coordinator reads, so the coordinator keeps the
// answers in arrival order and pools those that arrived before an event
// when that event asks it for a decision (takeAnswers). Both keep every
// event's time and sequence number, counted in Result.Events, as if each
// probe and each answer were an event of its own: the run is the same.

// probeAnswer is a server's answer to a probe on its way to the
// coordinator: it arrives at at with sequence number seq.
type probeAnswer struct {
	at  int64
	seq uint64
	srv int32
	rif int32
	lat int64
}

// pushProbes sends c's probes to the servers ids, one way from now.
func (s *sim) pushProbes(c *client, ids []selection.ServerID) {
	var b int32
	if n := len(s.freeBatches); n > 0 {
		b = s.freeBatches[n-1]
		s.freeBatches = s.freeBatches[:n-1]
	} else {
		b = int32(len(s.batches))
		s.batches = append(s.batches, nil)
	}
	srvs := s.batches[b][:0]
	for _, id := range ids {
		srvs = append(srvs, s.index(id))
	}
	s.batches[b] = srvs
	e := event{at: s.now + int64(s.cfg.OneWay), kind: evProbes, cl: c, val: int64(b)}
	// The first probe's sequence number; the others take the next ones.
	s.push(e)
	s.seq += uint64(len(srvs) - 1)
	s.res.Events += len(srvs) - 1
}

// probes: a decision's probes reach their servers, which answer (a hung
// server answers nothing).
func (s *sim) probes(e event) {
	c := e.cl
	srvs := s.batches[e.val]
	for _, i := range srvs {
		sv := s.servers[i]
		if sv.hung {
			continue
		}
		rif := len(sv.running) + sv.queued
		s.seq++
		s.res.Events++
		c.answers = append(c.answers, probeAnswer{at: s.now + int64(s.cfg.OneWay), seq: s.seq, srv: i, rif: int32(rif),
			lat: sv.est.estimate(s.now, rif)})
	}
	s.freeBatches = append(s.freeBatches, int32(e.val))
}

// takeAnswers pools, in arrival order, the answers that reached c before
// the event being processed (time s.now, sequence number s.cur).
func (s *sim) takeAnswers(c *client) {
	k := c.ansHead
	for ; k < len(c.answers); k++ {
		a := &c.answers[k]
		if a.at > s.now || (a.at == s.now && a.seq > s.cur) {
			break
		}
		c.prober.AddProbe(selection.ProbeReply{Server: s.servers[a.srv].id, RIF: int(a.rif), Latency: time.Duration(a.lat), At: s.t(a.at)}, c.rng)
	}
	if k == len(c.answers) {
		c.answers, k = c.answers[:0], 0
	} else if k > 64 && 2*k >= len(c.answers) {
		n := copy(c.answers, c.answers[k:])
		c.answers, k = c.answers[:n], 0
	}
	c.ansHead = k
}
