package remoting

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Reply is a reply address for one request: the sender PID to request
// with (Root.RequestWithCustomSender), and a wait for the first answer.
//
// It replaces protoactor's futures, whose process sets the answer without
// the lock its timeout takes, so an answer (or the remote's
// DeadLetterResponse) that arrives as the request times out, or after,
// races with the waiter reading the result. A Reply's process hands the
// answer over a channel; later answers are dropped.
type Reply struct {
	sys *actor.ActorSystem
	pid *actor.PID
	ch  chan any
}

// NewReply registers a reply address in sys; Close removes it.
func NewReply(sys *actor.ActorSystem) *Reply {
	r := &Reply{sys: sys, ch: make(chan any, 1)}
	r.pid, _ = sys.ProcessRegistry.Add(replyProcess{ch: r.ch}, "reply"+sys.ProcessRegistry.NextId())
	return r
}

// PID is the sender to request with.
func (r *Reply) PID() *actor.PID { return r.pid }

// Wait returns the first answer. It returns actor.ErrDeadLetter when the
// request could not be delivered (a DeadLetterResponse answered),
// actor.ErrTimeout when nothing answered within timeout (<= 0: no bound
// but ctx), and ctx's error when ctx ends first.
func (r *Reply) Wait(ctx context.Context, timeout time.Duration) (any, error) {
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case m := <-r.ch:
		if _, ok := m.(*actor.DeadLetterResponse); ok {
			return nil, actor.ErrDeadLetter
		}
		return m, nil
	case <-expired:
		return nil, actor.ErrTimeout
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close removes the reply address; what arrives later is a dead letter,
// or, sent on a PID that still holds the process, dropped.
func (r *Reply) Close() { r.sys.ProcessRegistry.Remove(r.pid) }

// replyProcess keeps the first message sent to a Reply.
type replyProcess struct{ ch chan any }

func (p replyProcess) SendUserMessage(_ *actor.PID, message any) {
	_, msg, _ := actor.UnwrapEnvelope(message)
	select {
	case p.ch <- msg:
	default:
	}
}

func (replyProcess) SendSystemMessage(*actor.PID, any) {}

func (replyProcess) Stop(*actor.PID) {}
