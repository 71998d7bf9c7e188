package sim

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/scanplane/scanplane/messages"
	"google.golang.org/protobuf/proto"
	"time"
)

// NetFaults: each message is delayed by MinDelay..MaxDelay, in order per
// pair of processes (a connection), and in runs with network faults
// dropped, duplicated, reordered (delivered out of its connection's
// order) or late (up to LateMax) with these probabilities.
type NetFaults struct {
	MinDelay, MaxDelay, LateMax    time.Duration
	Drop, Duplicate, Reorder, Late float64
}

// network carries messages between the processes' actor systems: every
// address other than its own resolves, in each actor system, to a
// netProcess, which hands the message here. Each message is cloned
// (proto.Clone), so no two processes share one, as on a real wire.
type network struct {
	w        *world
	cfg      NetFaults
	last     map[[2]string]time.Time // last arrival per connection
	inFlight int
	// failing: the endpoints (from, to address) whose connect failed and
	// that report it at until (restartRace); what incarnation inc of from
	// sends to the address until then is a dead letter.
	failing map[[2]string]failingEndpoint
	// connects: the connects (a host actor's empty Cancel) delivered, by
	// coordinator, server PID and server incarnation.
	connects map[connectKey]bool
}

type failingEndpoint struct {
	inc   int
	until time.Time
}

type connectKey struct {
	from, to string
	inc      int
}

// netProcess is the actor.Process of every remote PID in one incarnation
// of a process's actor system.
type netProcess struct {
	w    *world
	from *proc
	inc  int
}

// SendUserMessage implements actor.Process.
func (np *netProcess) SendUserMessage(to *actor.PID, message any) {
	_, msg, sender := actor.UnwrapEnvelope(message)
	pm, ok := msg.(proto.Message)
	if !ok {
		np.w.violate("%s sent a local message %T to %s: it cannot cross the network", np.from.addr, msg, to)
		return
	}
	np.w.net.send(np.from, np.inc, sender, to, pm)
}

// SendSystemMessage implements actor.Process: no actor of the project
// watches a remote actor, so none crosses the network.
func (np *netProcess) SendSystemMessage(to *actor.PID, message any) {
	np.w.trace.printf("%s: system message %T to %s not sent (remote watches are not simulated)", np.from.addr, message, to)
}

// Stop implements actor.Process.
func (np *netProcess) Stop(to *actor.PID) {}

// send carries msg from incarnation inc of from (sender: the sending
// actor, or nil) to the actor to.
func (n *network) send(from *proc, inc int, sender, to *actor.PID, msg proto.Message) {
	w := n.w
	s := w.s
	if from.inc != inc || from.state == procDead {
		return // a goroutine of a dead incarnation
	}
	msg = proto.Clone(msg)
	if w.mut.count != nil {
		if id, _ := requestOf(msg); id != "" {
			if w.mut.count[id] == nil {
				w.mut.count[id] = map[string]int{}
			}
			w.mut.count[id][string(msg.ProtoReflect().Descriptor().Name())]++
		}
	}
	if sender != nil {
		sender = proto.Clone(sender).(*actor.PID)
	}
	to = proto.Clone(to).(*actor.PID)
	if w.mut.drop != nil && w.mut.drop(from.addr, to, msg) {
		w.trace.printf("%s -> %s: %s DROPPED BY THE MUTANT", from.addr, to, describe(msg))
		return
	}
	if w.mut.deliver != nil {
		w.mut.deliver(msg)
	}
	switch m := msg.(type) {
	case *messages.ScanRequest:
		if m.GetForwardedBy() != "" {
			w.stats.Forwarded++
		}
	case *messages.StartScan:
		w.dispatched[attemptKey{m.GetRequestId(), m.GetAttempt()}] = s.now
	case *messages.Cancel:
		w.cancelled(from, to, m)
	case *messages.ScanFinished:
		delete(w.jobs, jobKey{m.GetServer(), m.GetRequestId(), m.GetAttempt()})
	case *messages.Busy:
		delete(w.jobs, jobKey{m.GetServer(), m.GetRequestId(), m.GetAttempt()})
	}
	target := w.procs[to.Address]
	if target == nil {
		w.trace.printf("%s -> %s: %s to an unknown address", from.addr, to, describe(msg))
		return
	}
	if target.state == procDead {
		// Connection refused: the sender's remote reports the message
		// as a dead letter once it gives up connecting.
		w.trace.printf("%s -> %s: %s refused (%s is down)", from.addr, to, describe(msg), to.Address)
		if from.sys != nil {
			from.at(s.uniform(n.cfg.MinDelay, w.cfg.Faults.DetectMax), inc, "dead letter", func() {
				from.sys.EventStream.Publish(&actor.DeadLetterEvent{PID: to, Message: msg, Sender: sender})
			}, nil)
		}
		return
	}
	key := [2]string{from.addr, to.Address}
	if f, ok := n.failing[key]; ok && f.inc == inc && s.now.Before(f.until) {
		// Queued behind the failed connect: the writer answers it once
		// its back-off is over, as protoactor's does (a DeadLetterResponse
		// to a request's sender, else a dead-letter event).
		w.trace.printf("%s -> %s: %s dead-lettered at %s (the endpoint is failing)", from.addr, to, describe(msg), fmtDur(f.until.Sub(epoch)))
		w.stats.Kinds["dead letter of a failing endpoint"]++
		from.at(f.until.Sub(s.now), inc, "dead letter", func() {
			if sender != nil {
				from.sys.Root.Send(sender, &actor.DeadLetterResponse{Target: to})
				return
			}
			from.sys.EventStream.Publish(&actor.DeadLetterEvent{PID: to, Message: msg})
		}, nil)
		return
	}
	at := s.now.Add(s.uniform(n.cfg.MinDelay, n.cfg.MaxDelay))
	fault := ""
	switch {
	case s.chance(n.cfg.Drop):
		fault = "dropped"
	case s.chance(n.cfg.Late):
		fault = "late"
		at = s.now.Add(s.uniform(n.cfg.MaxDelay, n.cfg.LateMax))
	case s.chance(n.cfg.Reorder):
		fault = "reordered"
	default:
		if last := n.last[key]; at.Before(last) {
			at = last
		}
		n.last[key] = at
	}
	dup := fault == "" && s.chance(n.cfg.Duplicate)
	if dup {
		fault = "duplicated"
	}
	if fault != "" {
		w.faults.message(from.addr, to.Address, msg, fault)
	}
	if w.trace.on {
		w.trace.printf("%s -> %s: %s%s", from.addr, to, describe(msg), map[bool]string{true: " [" + fault + "]", false: ""}[fault != ""])
	}
	if fault == "dropped" {
		return
	}
	tinc := target.inc
	copies := 1
	if dup {
		copies = 2
	}
	for range copies {
		n.inFlight++
		s.at(at, "deliver", func() {
			n.inFlight--
			target.run(tinc, func() {
				if c, ok := msg.(*messages.Cancel); ok && c.GetReason() == "connect" {
					n.connects[connectKey{from.addr, to.Address + "/" + to.Id, tinc}] = true
				}
				n.deliver(target, sender, to, proto.Clone(msg))
			}, func() {
				w.trace.printf("%s lost on its way to %s: the process died", describe(msg), to)
			})
		})
		at = at.Add(s.uniform(0, n.cfg.MaxDelay))
	}
}

// deliver hands msg to its actor (a dead letter there if it has none).
func (n *network) deliver(target *proc, sender, to *actor.PID, msg proto.Message) {
	if c := n.w.clientAt(target); c != nil {
		c.receive(msg)
		return
	}
	if m, ok := msg.(*messages.StartScan); ok {
		n.w.jobs[jobKey{m.GetServer(), m.GetRequestId(), m.GetAttempt()}] = target
	}
	p, _ := target.sys.ProcessRegistry.Get(to)
	var m any = msg
	if sender != nil {
		m = &actor.MessageEnvelope{Message: msg, Sender: sender}
	}
	p.SendUserMessage(to, m)
}

// endpointLost tells the actor system of p that the process at addr is
// gone (its remote's endpoint terminated).
func endpointLost(p *proc, addr string) {
	if p.sys != nil && p.state != procDead {
		p.sys.EventStream.Publish(&remote.EndpointTerminatedEvent{Address: addr})
	}
}
