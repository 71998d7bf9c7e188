package client

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// send is Root.Send through the client's gate: nothing is sent once the
// client closes. (The remote the clients of a process share gates its
// sends too, until it stops: remoting.Tracker.GateSends.)
func (c *Client) send(pid *actor.PID, msg any) {
	if !c.gate.Enter() {
		return
	}
	defer c.gate.Leave()
	c.sys.Root.Send(pid, msg)
}

// requestFuture is Root.RequestFuture through the client's gate; the
// future is nil (and ok false) once the client closes.
func (c *Client) requestFuture(pid *actor.PID, msg any, timeout time.Duration) (f *actor.Future, ok bool) {
	if !c.gate.Enter() {
		return nil, false
	}
	defer c.gate.Leave()
	return c.sys.Root.RequestFuture(pid, msg, timeout), true
}
