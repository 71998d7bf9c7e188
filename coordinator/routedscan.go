package coordinator

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/wire"
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

// received wraps a validated ScanRequest that arrived now; maxAge is
// FlowConfig.MaxFlowAge.
func received(now time.Time, m *messages.ScanRequest, maxAge time.Duration) *routedScan {
	return &routedScan{req: m, deadline: wire.Deadline(now, m.GetTimeoutMs(), maxAge)}
}

// rejectScan answers a scan request with an error, counted in k.
func rejectScan(k *coordCounters, c actor.SenderContext, m *messages.ScanRequest, code messages.ErrorCode, msg string) {
	k.failed.Add(1)
	if client := wire.ToPID(m.GetClient()); client != nil {
		c.Send(client, &messages.ScanError{RequestId: m.GetRequestId(), Code: code, Message: msg})
	}
}
