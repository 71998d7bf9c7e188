package scanserver

import (
	"slices"
	"time"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/wire"
)

// Latency estimate of a scan server (the Prequal server side).
const (
	// probeSamples: finished scans a server remembers for its estimate.
	probeSamples = 128
	// probeNearest: the estimate is the median latency of this many
	// remembered scans whose RIF at arrival was nearest the current RIF.
	probeNearest = 8
	// probeSampleAge: scans that ended longer ago than this do not count.
	// Without it a server that had a few slow scans and then got none
	// (because its estimate was high) would report them for ever.
	probeSampleAge = 2 * time.Second
)

// latencyEstimator answers "how long does a scan that arrives now take":
// Prequal servers report the median latency of recent requests that
// arrived at a similar RIF. It keeps the last probeSamples finished scans
// as (RIF at arrival, latency from arrival to end, end time) and
// estimates, for a RIF r at time now, the median latency of the
// probeNearest samples nearest r (by |RIF − r|, the newer first on equal
// distance) among those that ended within probeSampleAge; 0 with none.
// Pure (time is a parameter), owned by one scan-server actor.
type latencyEstimator struct {
	rif  []int
	lat  []time.Duration
	end  []time.Time
	next int // ring position of the oldest sample once full
	// seq[i] orders samples by age (larger = newer).
	seq  []uint64
	n    uint64
	pick []int // scratch
	lats []time.Duration
}

// add records a scan that arrived at RIF rif and ended at end after lat.
func (e *latencyEstimator) add(end time.Time, rif int, lat time.Duration) {
	e.n++
	if len(e.rif) < probeSamples {
		e.rif, e.lat, e.end, e.seq = append(e.rif, rif), append(e.lat, lat), append(e.end, end), append(e.seq, e.n)
		return
	}
	e.rif[e.next], e.lat[e.next], e.end[e.next], e.seq[e.next] = rif, lat, end, e.n
	e.next = (e.next + 1) % probeSamples
}

func (e *latencyEstimator) estimate(now time.Time, rif int) time.Duration {
	e.pick = e.pick[:0]
	for i := range e.rif {
		if now.Sub(e.end[i]) <= probeSampleAge {
			e.pick = append(e.pick, i)
		}
	}
	if len(e.pick) == 0 {
		return 0
	}
	dist := func(i int) int {
		d := e.rif[i] - rif
		if d < 0 {
			return -d
		}
		return d
	}
	slices.SortFunc(e.pick, func(a, b int) int {
		if da, db := dist(a), dist(b); da != db {
			return da - db
		}
		switch {
		case e.seq[a] > e.seq[b]:
			return -1
		case e.seq[a] < e.seq[b]:
			return 1
		}
		return 0
	})
	k := min(probeNearest, len(e.pick))
	e.lats = e.lats[:0]
	for _, i := range e.pick[:k] {
		e.lats = append(e.lats, e.lat[i])
	}
	slices.Sort(e.lats)
	if k%2 == 1 {
		return e.lats[k/2]
	}
	return (e.lats[k/2-1] + e.lats[k/2]) / 2
}

// onProbe answers a Probe (scan-server actor): RIF = scans running plus
// queued, and the latency estimate at that RIF. A bad probe is dropped
// and logged (it has no one to answer).
func (s *ScanServerActor) onProbe(m *messages.Probe) {
	if err := wire.ValidateProbe(m); err != nil {
		s.log.Warn("bad Probe", "err", err)
		return
	}
	s.counters.Probes.Add(1)
	rif := s.queue.Len() + s.queue.Active()
	s.sys.Root.Send(wire.ToPID(m.GetReplyTo()), &messages.ProbeReply{Id: m.GetId(), Server: s.id, Rif: uint32(rif),
		LatencyUs: s.lat.estimate(s.now(), rif).Microseconds()})
}
