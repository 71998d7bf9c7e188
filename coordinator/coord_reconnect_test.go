package coordinator

import (
	"sync/atomic"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/scanplane/scanplane/messages"
)

// connectCounter stands for a scan server: it counts the connects (empty
// Cancels) a coordinator's host actor sends it.
type connectCounter struct{ n atomic.Int32 }

func (c *connectCounter) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(*messages.Cancel); ok && m.GetReason() == "connect" {
		c.n.Add(1)
	}
}

// spawnCounter spawns a connectCounter named name, stopped at the end.
func (r *rig) spawnCounter(name string) (*actor.PID, *connectCounter) {
	r.t.Helper()
	c := &connectCounter{}
	pid, err := r.as.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return c }), name)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = r.as.Root.StopFuture(pid).Wait() })
	return pid, c
}

// A server marked dead when its address's endpoint terminated (the
// remote's connection to it is gone: the event of a restarted host's
// previous incarnation, delivered after the new one's first heartbeat)
// is back in the view at its next heartbeat, and that heartbeat opens the
// connection again.
func TestEndpointTerminatedServerReconnectsAtNextHeartbeat(t *testing.T) {
	r := newRig(t, rigOpts{rows: 10, tablets: 1})
	pid, srv := r.spawnCounter("restarted-0")
	r.heartbeat("h", "h/0", pid, "second", 1)
	r.waitFor("the first connect", func() bool { return srv.n.Load() == 1 && r.alive("h/0") })
	r.as.Root.Send(r.co.registry, &remote.EndpointTerminatedEvent{Address: pid.Address})
	r.waitFor("the server marked dead", func() bool { return !r.alive("h/0") })
	r.heartbeat("h", "h/0", pid, "second", 1)
	r.waitFor("the server back in the view", func() bool { return r.alive("h/0") })
	r.waitFor("a second connect", func() bool { return srv.n.Load() == 2 })
}

// A connect that comes back undelivered (a dead letter) is sent again at
// the server's next heartbeat.
func TestDeadLetteredConnectSentAgain(t *testing.T) {
	r := newRig(t, rigOpts{rows: 10, tablets: 1})
	var lost atomic.Int32
	sub := r.as.EventStream.Subscribe(func(e any) {
		if d, ok := e.(*actor.DeadLetterEvent); ok {
			if m, ok := d.Message.(*messages.Cancel); ok && m.GetReason() == "connect" {
				lost.Add(1)
			}
		}
	})
	t.Cleanup(func() { r.as.EventStream.Unsubscribe(sub) })
	pid := actor.NewPID(r.as.Address(), "not-yet-0")
	r.heartbeat("h", "h/0", pid, "first", 1)
	// The dead-letter answer is on its way to the host actor once the
	// event is published, before the next heartbeat is sent.
	r.waitFor("the connect to be dead-lettered", func() bool { return lost.Load() == 1 })
	_, srv := r.spawnCounter("not-yet-0")
	r.heartbeat("h", "h/0", pid, "first", 1)
	r.waitFor("the connect sent again", func() bool { return srv.n.Load() == 1 })
}

// A leaving heartbeat of a server's earlier incarnation, delivered after
// the new incarnation's heartbeat, leaves the new one in the view.
func TestLeavingOfEarlierIncarnationKeepsSuccessor(t *testing.T) {
	r := newRig(t, rigOpts{rows: 10, tablets: 1})
	pid0, _ := r.spawnCounter("srv-0")
	pid1, _ := r.spawnCounter("srv-1")
	r.heartbeat("h", "h/0", pid0, "old", 1)
	r.waitFor("the old incarnation", func() bool { return r.alive("h/0") })
	r.heartbeat("h", "h/0", pid0, "new", 1)
	r.as.Root.Send(r.co.registry, &messages.Heartbeat{Host: "h", Server: "h/0", Incarnation: "old", Leaving: true})
	// The host actor takes its heartbeats in order: once h/1 is in the
	// view, the goodbye was applied.
	r.heartbeat("h", "h/1", pid1, "new", 1)
	r.waitFor("the host's second server", func() bool { return r.alive("h/1") })
	if !r.alive("h/0") {
		t.Fatal("the earlier incarnation's goodbye took the running incarnation of h/0 out of the view")
	}
	r.as.Root.Send(r.co.registry, &messages.Heartbeat{Host: "h", Server: "h/0", Incarnation: "new", Leaving: true})
	r.waitFor("the running incarnation's goodbye to take it out", func() bool { return !r.alive("h/0") })
}
