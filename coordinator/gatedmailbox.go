package coordinator

import (
	"strings"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/wire"
	"google.golang.org/protobuf/proto"
)

// stopGate is shared by a tablet actor and its mailbox: closed when the
// actor decided to stop.
type stopGate struct {
	closed atomic.Bool
	// reroute takes what the mailbox holds once closed (Coordinator.reroute).
	reroute func(msg any) bool
	box     atomic.Pointer[gatedMailbox] // the actor's current mailbox
}

// queued is the number of user messages waiting in the actor's mailbox.
func (g *stopGate) queued() int {
	if m := g.box.Load(); m != nil {
		return m.UserMessageCount()
	}
	return 0
}

// gatedMailbox is the default mailbox, except that once its gate is
// closed user messages go to Coordinator.reroute instead of the actor.
type gatedMailbox struct {
	actor.Mailbox
	gate *stopGate
}

func gatedMailboxProducer(gate *stopGate) actor.MailboxProducer {
	inner := actor.Unbounded()
	return func() actor.Mailbox {
		m := &gatedMailbox{Mailbox: inner(), gate: gate}
		gate.box.Store(m)
		return m
	}
}

// RegisterHandlers implements actor.Mailbox.
func (m *gatedMailbox) RegisterHandlers(inv actor.MessageInvoker, d actor.Dispatcher) {
	m.Mailbox.RegisterHandlers(gatedInvoker{MessageInvoker: inv, gate: m.gate}, d)
}

type gatedInvoker struct {
	actor.MessageInvoker
	gate *stopGate
}

// InvokeUserMessage implements actor.MessageInvoker. (Stopping and Stopped
// reach the actor without passing here.)
func (g gatedInvoker) InvokeUserMessage(msg any) {
	if g.gate.closed.Load() {
		g.gate.reroute(actor.UnwrapEnvelopeMessage(msg))
		return
	}
	g.MessageInvoker.InvokeUserMessage(msg)
}

// reroute sends a client's message that found its tablet actor stopped to
// the router; it reports whether msg was one (other messages for a stopped
// tablet actor belong to flows that ended with it).
func (c *Coordinator) reroute(msg any) bool {
	switch m := msg.(type) {
	case *messages.ScanRequest:
		fwd := proto.Clone(m).(*messages.ScanRequest)
		fwd.WantTabletActor = !c.cfg.RouterOnly // the client's entry is stale
		c.as.Root.Send(c.router, fwd)
	case *routedScan:
		// The idle-stop handshake sends none after idleStopOK; kept total.
		c.as.Root.Send(c.router, m)
	case *messages.ScanDone:
		c.as.Root.Send(c.router, m)
	default:
		return false
	}
	c.counters.rerouted.Add(1)
	return true
}

// isTabletActor reports whether pid names one of this coordinator's tablet
// actors (children of the router).
func (c *Coordinator) isTabletActor(pid *actor.PID) bool {
	return pid != nil && pid.Address == c.as.Address() && strings.HasPrefix(pid.Id, wire.RouterName+"/")
}
