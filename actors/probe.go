package actors

// Prequal's probes (docs/policies.md, prequal) as real messages: a tablet
// actor whose profile's policy is a selection.Prober sends messages.Probe
// to the servers the policy names after each decision and feeds each
// messages.ProbeReply into the policy's pool; a scan server answers a
// Probe at once with its requests in flight and its latency estimate for
// that RIF (latencyEstimator). The decision logic is in selection
// (prequal.go); this file only sends, answers, matches and validates.

import (
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
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

// ValidateProbe checks a Probe from the network, naming the bad field.
// Unknown fields are ignored (protobuf skips them when decoding).
func ValidateProbe(m *messages.Probe) error {
	if ToPID(m.GetReplyTo()) == nil {
		return bad("reply_to pid is missing")
	}
	if err := checkPid("reply_to", m.GetReplyTo()); err != nil {
		return err
	}
	return checkNames("server", m.GetServer())
}

// ValidateProbeReply checks a ProbeReply from the network.
func ValidateProbeReply(m *messages.ProbeReply) error {
	switch {
	case m.GetId() == 0:
		return bad("id is 0")
	case m.GetRif() > MaxQueueLen+MaxWorkers:
		return bad("rif %d is over %d", m.GetRif(), MaxQueueLen+MaxWorkers)
	case m.GetLatencyUs() < 0 || m.GetLatencyUs() > time.Hour.Microseconds():
		return bad("latency_us %d is outside [0, 1h]", m.GetLatencyUs())
	}
	return checkNames("server", m.GetServer())
}

// onProbe answers a Probe (scan-server actor): RIF = scans running plus
// queued, and the latency estimate at that RIF. A bad probe is dropped
// and logged (it has no one to answer).
func (s *ScanServerActor) onProbe(m *messages.Probe) {
	if err := ValidateProbe(m); err != nil {
		s.log.Warn("bad Probe", "err", err)
		return
	}
	s.counters.Probes.Add(1)
	rif := s.queue.Len() + s.queue.Active()
	s.sys.Root.Send(ToPID(m.GetReplyTo()), &messages.ProbeReply{Id: m.GetId(), Server: s.id, Rif: uint32(rif),
		LatencyUs: s.lat.estimate(time.Now(), rif).Microseconds()})
}

// Outstanding probes of a tablet actor.
const (
	// probeOutstanding bounds a tablet actor's unanswered probes; the
	// oldest are forgotten beyond it (their answers are then ignored).
	probeOutstanding = 256
	// probeForget: an answer later than this is ignored (it would be too
	// old for the pool anyway: probeMaxAge defaults to 1 s).
	probeForget = 2 * time.Second
)

// probeOut is one probe a tablet actor sent and has no answer for yet.
type probeOut struct {
	id     uint64
	server selection.ServerID
	sink   selection.Prober
	sent   time.Time
}

// prober is a tablet actor's probe bookkeeping: probes sent, oldest first,
// matched by id when answered. Owned by the tablet actor.
type prober struct {
	next uint64
	out  []probeOut
}

// sendProbes probes the servers pr names for the decision just made with
// in (tablet actor). Servers without an address are skipped.
func (t *TabletActor) sendProbes(now time.Time, pr selection.Prober, in *selection.Input) {
	targets := pr.ProbeTargets(in)
	if len(targets) == 0 {
		return
	}
	p := &t.probes
	if p.next == 0 {
		p.next = t.rng.Uint64()>>1 | 1
	}
	p.forget(now)
	self := FromPID(t.self)
	for _, id := range targets {
		s := in.View.Server(id)
		if s == nil || s.Address == "" {
			continue
		}
		p.next++
		if len(p.out) >= probeOutstanding {
			p.out = slices.Delete(p.out, 0, 1)
		}
		p.out = append(p.out, probeOut{id: p.next, server: id, sink: pr, sent: now})
		t.root.Send(actor.NewPID(s.Address, s.ActorID), &messages.Probe{Id: p.next, ReplyTo: self, Server: string(id)})
		t.co.counters.probesSent.Add(1)
	}
}

// forget drops probes sent more than probeForget before now.
func (p *prober) forget(now time.Time) {
	k := 0
	for k < len(p.out) && now.Sub(p.out[k].sent) > probeForget {
		k++
	}
	p.out = slices.Delete(p.out, 0, k)
}

// onProbeReply feeds an answer to the pool of the policy that asked for
// it (tablet actor). Answers that match no outstanding probe (unknown id,
// another server, forgotten) or fail validation are dropped.
func (t *TabletActor) onProbeReply(now time.Time, m *messages.ProbeReply) {
	if err := ValidateProbeReply(m); err != nil {
		t.co.countBad("ProbeReply", err)
		return
	}
	p := &t.probes
	p.forget(now)
	for i, o := range p.out {
		if o.id != m.GetId() {
			continue
		}
		if string(o.server) != m.GetServer() {
			return
		}
		p.out = slices.Delete(p.out, i, i+1)
		o.sink.AddProbe(selection.ProbeReply{Server: o.server, RIF: int(m.GetRif()),
			Latency: time.Duration(m.GetLatencyUs()) * time.Microsecond, At: now}, t.rng)
		t.co.counters.probeReplies.Add(1)
		return
	}
}
