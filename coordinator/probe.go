package coordinator

import (
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
	"github.com/scanplane/scanplane/wire"
)

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
	self := wire.FromPID(t.self)
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
		t.d.counters.probesSent.Add(1)
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
	if err := wire.ValidateProbeReply(m); err != nil {
		t.d.countBad("ProbeReply", err)
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
		t.d.counters.probeReplies.Add(1)
		return
	}
}
