package client

import (
	"fmt"
	"strings"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/scanplane/scanplane/messages"
)

// maxTabletActors bounds the tablet actors a client remembers; beyond it
// an arbitrary entry is dropped (its tablet's next request goes through
// the router again).
const maxTabletActors = 1 << 16

// tabletActorDirectory remembers, per tablet, the PID of the tablet actor
// that took one of its requests (ScanRouted.tablet_actor), so that the
// tablet's next ScanRequests and ScanDones skip the coordinator's router
// (docs/protocol.md). A stale entry costs a detour, never a
// request: the coordinator hands what reaches a stopped tablet actor to
// its router, which asks the new actor to send its PID. An entry goes
// when its coordinator is lost, or when a ScanRouted says the tablet is
// served at another address. Not safe for concurrent use (Client.mu).
type tabletActorDirectory struct {
	pids map[tabletKey]*actor.PID
}

type tabletKey struct {
	table string
	gen   uint64
	idx   uint32
}

func keyOf(ref *messages.TabletRef) tabletKey {
	return tabletKey{ref.GetTable(), ref.GetGeneration(), ref.GetIndex()}
}

// lookup returns the tablet actor of ref at the coordinator addr, or nil.
func (d *tabletActorDirectory) lookup(ref *messages.TabletRef, addr string) *actor.PID {
	if pid := d.pids[keyOf(ref)]; pid != nil && pid.Address == addr {
		return pid
	}
	return nil
}

// learn takes a ScanRouted for a request of ref: with a tablet actor it
// remembers it (after checking it is one of router's children at the
// owner's address: the message came from the network); without one the
// request was forwarded to owner, and an entry elsewhere is dropped.
// router is the actor id of the router at the owner's address.
func (d *tabletActorDirectory) learn(ref *messages.TabletRef, m *messages.ScanRouted, router string) error {
	k := keyOf(ref)
	ta := m.GetTabletActor()
	if ta == nil {
		if pid := d.pids[k]; pid != nil && pid.Address != m.GetOwner() {
			delete(d.pids, k)
		}
		return nil
	}
	switch {
	case m.GetOwner() == "":
		return fmt.Errorf("client: ScanRouted %s: tablet_actor without owner", m.GetRequestId())
	case ta.GetAddress() != m.GetOwner():
		return fmt.Errorf("client: ScanRouted %s: tablet_actor address %q is not the owner %q", m.GetRequestId(), ta.GetAddress(), m.GetOwner())
	case !strings.HasPrefix(ta.GetId(), router+"/") || len(ta.GetId()) > 512:
		return fmt.Errorf("client: ScanRouted %s: tablet_actor id %.64q is not a child of router %q", m.GetRequestId(), ta.GetId(), router)
	}
	if d.pids == nil {
		d.pids = map[tabletKey]*actor.PID{}
	}
	if _, ok := d.pids[k]; !ok && len(d.pids) >= maxTabletActors {
		for old := range d.pids {
			delete(d.pids, old)
			break
		}
	}
	d.pids[k] = actor.NewPID(ta.GetAddress(), ta.GetId())
	return nil
}

// forgetAddr drops every entry at the coordinator addr (it was lost).
func (d *tabletActorDirectory) forgetAddr(addr string) {
	for k, pid := range d.pids {
		if pid.Address == addr {
			delete(d.pids, k)
		}
	}
}

// requestTarget is where a ScanRequest for ref goes: the tablet's actor at
// the coordinator addr when known, else addr's router, and then req asks
// for the tablet actor's PID. A request that avoids coordinators always
// goes through the router (it decides where it is served).
func (c *Client) requestTarget(ref *messages.TabletRef, addr string, req *messages.ScanRequest) *actor.PID {
	if !c.cfg.RouterOnly && len(req.GetAvoidCoordinators()) == 0 {
		if pid := c.tabletActorAt(ref, addr); pid != nil {
			return pid
		}
		req.WantTabletActor = true
	}
	return c.routerPID(addr)
}

// doneTarget is where a ScanDone for ref goes: as requestTarget.
func (c *Client) doneTarget(ref *messages.TabletRef, addr string) *actor.PID {
	if pid := c.tabletActorAt(ref, addr); pid != nil {
		return pid
	}
	return c.routerPID(addr)
}

// tabletActorAt is ref's tablet actor at the coordinator addr, if known.
func (c *Client) tabletActorAt(ref *messages.TabletRef, addr string) *actor.PID {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tabletActors.lookup(ref, addr)
}

// onScanRouted updates the tablet actor directory from a ScanRouted for a
// request of ref; a bad one is logged and ignored.
func (c *Client) onScanRouted(ref *messages.TabletRef, m *messages.ScanRouted) {
	c.mu.Lock()
	err := c.tabletActors.learn(ref, m, c.routerActorIDLocked(m.GetOwner()))
	c.mu.Unlock()
	if err != nil {
		c.log.Warn("ignored a bad tablet actor address", "err", err)
	}
}
