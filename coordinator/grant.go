package coordinator

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/internal/remoting"
	"github.com/scanplane/scanplane/messages"
)

// permitted reports whether the sender of the scan request c is handling
// may scan its table: the grant the remote Guard wrote into its header
// (remoting.PeerGrant). A request without one comes from a peer that may
// scan every table (a default client or admin certificate, a coordinator
// forwarding, plain text, this process). A refused request is answered
// PERMISSION_DENIED, naming the principal and the table, and counted by
// the Guard (reason grant).
func (c *Coordinator) permitted(ctx actor.Context, m *messages.ScanRequest) bool {
	g, ok, err := remoting.PeerGrant(ctx)
	if !ok {
		return true
	}
	table := m.GetTablet().GetTable()
	if err != nil {
		err = fmt.Errorf("scan of table %q refused: %w", table, err)
	} else if err = g.Check(table); err == nil {
		return true
	}
	var guard *remoting.Guard
	if c.sys != nil {
		guard = c.sys.Guard
	}
	guard.Refuse(m.GetClient().GetAddress(), remoting.ReasonGrant, "principal", g.Principal(), "table", table, "request", m.GetRequestId())
	rejectScan(&c.counters, ctx, m, messages.ErrorCode_ERROR_CODE_PERMISSION_DENIED, err.Error())
	return false
}
