package coordinator

import (
	"bytes"
	"strings"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/wire"
	"google.golang.org/protobuf/proto"
)

// routedScan is a ScanRequest that this coordinator received and
// validated, with its deadline on our clock (local message between the
// router and tablet actors); a bare *messages.ScanRequest reaching a
// tablet actor or the router came from the network.
type routedScan struct {
	req *messages.ScanRequest
	// deadline: when the request arrived plus its timeout_ms, at most
	// FlowConfig.MaxFlowAge after it arrived.
	deadline time.Time
	// restarts: how often an actor failed while holding the request
	// (supervision.go).
	restarts int
	// attempts: the attempts a failed actor had made for it (the next
	// flow numbers its own after them).
	attempts uint32
}

// received wraps a validated ScanRequest that arrived now.
func (c *Coordinator) received(now time.Time, m *messages.ScanRequest) *routedScan {
	return &routedScan{req: m, deadline: wire.Deadline(now, m.GetTimeoutMs(), c.cfg.Flow.MaxFlowAge)}
}

// stopGate is shared by a tablet actor and its mailbox: closed when the
// actor decided to stop.
type stopGate struct {
	closed atomic.Bool
	co     *Coordinator
	box    atomic.Pointer[gatedMailbox] // the actor's current mailbox
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

// onDirectScan takes a ScanRequest a client sent straight to this actor:
// validated as the router validates, then served here or passed to the
// router when the router must decide.
func (t *TabletActor) onDirectScan(c actor.Context, now time.Time, m *messages.ScanRequest) {
	t.co.counters.direct.Add(1)
	if err := wire.ValidateScanRequest(m); err != nil {
		t.co.countBad("ScanRequest", err)
		rejectScan(t.co, c, m, messages.ErrorCode_ERROR_CODE_BAD_REQUEST, "bad ScanRequest: "+err.Error())
		return
	}
	if !t.co.permitted(c, m) {
		return
	}
	rs := t.co.received(now, m)
	if t.moved || m.GetForwardedBy() != "" || len(m.GetAvoidCoordinators()) > 0 || !t.serves(m.GetTablet()) {
		c.Send(c.Parent(), rs)
		return
	}
	if err := t.co.quorumErr(); err != nil {
		rejectScan(t.co, c, m, messages.ErrorCode_ERROR_CODE_NO_COORDINATOR, err.Error())
		return
	}
	// A retiring actor takes it too: at idleStopOK it has a flow and stays.
	t.onScanRequest(now, rs)
}

// onRoutedScan takes a ScanRequest from the router and, if the client asked,
// tells it this actor's PID.
func (t *TabletActor) onRoutedScan(c actor.Context, now time.Time, rs *routedScan) {
	m := rs.req
	// Before the request's StartScan: then the client (as a rig client in
	// one process) sees it before the rows. The client does not rely on
	// that order.
	if m.GetWantTabletActor() && !t.co.cfg.RouterOnly {
		if client := wire.ToPID(m.GetClient()); client != nil {
			c.Send(client, &messages.ScanRouted{RequestId: m.GetRequestId(), Owner: t.self.Address, TabletActor: wire.FromPID(t.self)})
		}
	}
	t.onScanRequest(now, rs)
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
	if client := wire.ToPID(m.GetClient()); client != nil {
		c.Send(client, &messages.ScanError{RequestId: m.GetRequestId(), Code: code, Message: msg})
	}
}
