package client

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// sendGate orders the client's uses of the actor remote's send path
// before the remote stops. protoactor's endpoint manager reads its state
// unsynchronised on every send to a remote PID and on every
// EndpointTerminatedEvent published, and its stop writes that state; so
// Close shuts the gate, which waits for the uses under way and refuses
// later ones, before it releases the remote.
//
// A use is one call that returns at once (a Send, a RequestFuture, a
// Publish), never a wait for an answer. Uses may nest; the zero value is
// an open gate.
type sendGate struct {
	n    atomic.Int64  // uses under way, plus gateShut once shut
	idle chan struct{} // made by shut; closed once shut with no use under way
	once sync.Once
}

const gateShut = 1 << 40

// enter starts a use: true while the gate is open; the caller then calls
// leave when the use returns. false once shut: the caller sends nothing.
func (g *sendGate) enter() bool {
	if g.n.Add(1) >= gateShut {
		g.leave()
		return false
	}
	return true
}

// leave ends a use that enter let in (or one it refused).
func (g *sendGate) leave() {
	if g.n.Add(-1) == gateShut {
		g.once.Do(func() { close(g.idle) })
	}
}

// shut refuses every later use and returns once no use is under way.
// It is called once.
func (g *sendGate) shut() {
	g.idle = make(chan struct{})
	if g.n.Add(gateShut) == gateShut {
		g.once.Do(func() { close(g.idle) })
	}
	<-g.idle
}

// send is Root.Send through the gate: nothing is sent once the client
// closes.
func (c *Client) send(pid *actor.PID, msg any) {
	if !c.gate.enter() {
		return
	}
	defer c.gate.leave()
	c.sys.Root.Send(pid, msg)
}

// requestFuture is Root.RequestFuture through the gate; the future is nil
// (and ok false) once the client closes.
func (c *Client) requestFuture(pid *actor.PID, msg any, timeout time.Duration) (f *actor.Future, ok bool) {
	if !c.gate.enter() {
		return nil, false
	}
	defer c.gate.leave()
	return c.sys.Root.RequestFuture(pid, msg, timeout), true
}
