package coordinator

import (
	"bytes"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/wire"
)

// onDirectScan takes a ScanRequest a client sent straight to this actor:
// validated as the router validates, then served here or passed to the
// router when the router must decide.
func (t *TabletActor) onDirectScan(c actor.Context, now time.Time, m *messages.ScanRequest) {
	t.d.counters.direct.Add(1)
	if err := wire.ValidateScanRequest(m); err != nil {
		t.d.countBad("ScanRequest", err)
		rejectScan(t.d.counters, c, m, messages.ErrorCode_ERROR_CODE_BAD_REQUEST, "bad ScanRequest: "+err.Error())
		return
	}
	if !t.d.permitted(c, m) {
		return
	}
	rs := received(now, m, t.d.flow.MaxFlowAge)
	if t.moved || m.GetForwardedBy() != "" || len(m.GetAvoidCoordinators()) > 0 || !t.serves(m.GetTablet()) {
		c.Send(c.Parent(), rs)
		return
	}
	if err := t.d.quorumErr(); err != nil {
		rejectScan(t.d.counters, c, m, messages.ErrorCode_ERROR_CODE_NO_COORDINATOR, err.Error())
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
	if m.GetWantTabletActor() && !t.d.routerOnly {
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
