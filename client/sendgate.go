package client

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/scanplane/scanplane/internal/remoting"
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

// ask sends msg to pid through the client's gate, from a reply address
// of its own (remoting.Reply), and waits for the answer: at most timeout,
// or until ctx ends. It returns ErrClosed, having sent nothing, once the
// client closes; actor.ErrDeadLetter when the request could not be
// delivered, actor.ErrTimeout when nothing answered in time.
func (c *Client) ask(ctx context.Context, pid *actor.PID, msg any, timeout time.Duration) (any, error) {
	if !c.gate.Enter() {
		return nil, ErrClosed
	}
	r := remoting.NewReply(c.sys)
	defer r.Close()
	c.sys.Root.RequestWithCustomSender(pid, msg, r.PID())
	c.gate.Leave()
	return r.Wait(ctx, timeout)
}
