package actors

import (
	"bytes"
	"strings"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/messages"
)

// Direct requests (issue 11: no mailbox that every scan passes). A client
// that asks (ScanRequest.want_tablet_actor) learns the PID of the tablet
// actor that took its request (ScanRouted.tablet_actor) and sends the
// tablet's next ScanRequests and ScanDones straight to it, skipping the
// router. The router still decides everything a tablet actor cannot: a
// direct request for a moved tablet, one that avoids coordinators or was
// forwarded, or one whose tablet differs from the actor's goes on to the
// router, which handles it as if the client had sent it there.
//
// Nothing sent to a stopped tablet actor is lost. protoactor drops, without
// a dead letter, user messages that sit in an actor's mailbox when it
// stops; so a tablet actor's mailbox is wrapped (gatedMailbox): once the
// actor decided to stop, whatever its mailbox still hands over goes to the
// router instead. What arrives after the actor left the process registry
// becomes a dead letter, which the coordinator's event-stream subscriber
// also sends to the router (Coordinator.reroute). A rerouted ScanRequest
// asks for the new actor's PID, so the client's stale entry is replaced.

// routedScan is a ScanRequest handed to a tablet actor by its router
// (local message); a bare *messages.ScanRequest reaching a tablet actor
// came straight from a client.
type routedScan struct{ req *messages.ScanRequest }

// stopGate is shared by a tablet actor and its mailbox: closed when the
// actor decided to stop.
type stopGate struct {
	closed atomic.Bool
	co     *Coordinator
}

// gatedMailbox is the default mailbox, except that once its gate is
// closed user messages go to Coordinator.reroute instead of the actor.
type gatedMailbox struct {
	actor.Mailbox
	gate *stopGate
}

func gatedMailboxProducer(gate *stopGate) actor.MailboxProducer {
	inner := actor.Unbounded()
	return func() actor.Mailbox { return &gatedMailbox{Mailbox: inner(), gate: gate} }
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
		g.gate.co.reroute(actor.UnwrapEnvelopeMessage(msg))
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
		c.as.Root.Send(c.router, m.req)
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
	return pid != nil && pid.Address == c.as.Address() && strings.HasPrefix(pid.Id, RouterName+"/")
}

// onDirectScan takes a ScanRequest a client sent straight to this actor:
// validated as the router validates, then served here or passed to the
// router when the router must decide.
func (t *TabletActor) onDirectScan(c actor.Context, now time.Time, m *messages.ScanRequest) {
	t.co.counters.direct.Add(1)
	if err := ValidateScanRequest(m); err != nil {
		t.co.countBad("ScanRequest", err)
		rejectScan(t.co, c, m, messages.ErrorCode_ERROR_CODE_BAD_REQUEST, "bad ScanRequest: "+err.Error())
		return
	}
	if t.moved || m.GetForwardedBy() != "" || len(m.GetAvoidCoordinators()) > 0 || !t.serves(m.GetTablet()) {
		c.Send(c.Parent(), m)
		return
	}
	if err := t.co.quorumErr(); err != nil {
		rejectScan(t.co, c, m, messages.ErrorCode_ERROR_CODE_NO_COORDINATOR, err.Error())
		return
	}
	// A retiring actor takes it too: at idleStopOK it has a flow and stays.
	t.onScanRequest(now, m)
}

// onRoutedScan takes a ScanRequest from the router and, if the client asked,
// tells it this actor's PID.
func (t *TabletActor) onRoutedScan(c actor.Context, now time.Time, m *messages.ScanRequest) {
	// Before the request's StartScan: then the client (as a rig client in
	// one process) sees it before the rows. The client does not rely on
	// that order.
	if m.GetWantTabletActor() && !t.co.cfg.RouterOnly {
		if client := ToPID(m.GetClient()); client != nil {
			c.Send(client, &messages.ScanRouted{RequestId: m.GetRequestId(), Owner: t.self.Address, TabletActor: FromPID(t.self)})
		}
	}
	t.onScanRequest(now, m)
}

// serves reports whether ref is this actor's tablet.
func (t *TabletActor) serves(ref *messages.TabletRef) bool {
	own := t.meta.GetRef()
	return ref.GetTable() == t.table.GetName() && ref.GetGeneration() == t.table.GetGeneration() && ref.GetIndex() == own.GetIndex() &&
		bytes.Equal(ref.GetPrevEndRow(), own.GetPrevEndRow()) && bytes.Equal(ref.GetEndRow(), own.GetEndRow())
}

// rejectScan answers a scan request with an error.
func rejectScan(co *Coordinator, c actor.SenderContext, m *messages.ScanRequest, code messages.ErrorCode, msg string) {
	co.counters.failed.Add(1)
	if client := ToPID(m.GetClient()); client != nil {
		c.Send(client, &messages.ScanError{RequestId: m.GetRequestId(), Code: code, Message: msg})
	}
}
