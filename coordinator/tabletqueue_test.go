package coordinator

import (
	"strings"
	"sync"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/scanplane/scanplane/internal/testutil/servertest"
	"github.com/scanplane/scanplane/messages"
)

// TestTabletQueueAnswersOverloaded: scan requests that find more than
// MaxTabletQueue messages waiting in their tablet actor's mailbox are
// answered OVERLOADED, naming the backlog; once it is worked off,
// requests run again.
func TestTabletQueueAnswersOverloaded(t *testing.T) {
	var mu sync.Mutex
	gates := map[string]*stopGate{} // tablet actor id -> its gate
	r := newRig(t, rigOpts{rows: 100, tablets: 2, coord: func(c *CoordinatorConfig) {
		c.MaxTabletQueue = 2
		c.Env.Middleware = append(c.Env.Middleware, func(next actor.ReceiverFunc) actor.ReceiverFunc {
			return func(ctx actor.ReceiverContext, env *actor.MessageEnvelope) {
				if ta, ok := ctx.Actor().(*TabletActor); ok {
					if _, started := env.Message.(*actor.Started); started {
						mu.Lock()
						gates[ctx.Self().Id] = ta.gate
						mu.Unlock()
					}
				}
				next(ctx, env)
			}
		})
	}})
	r.addServer("h1", 0, servertest.Default(), nil)
	r.checkRows(r.scan(r.request(0)), 0) // spawns tablet 0's actor
	mu.Lock()
	if len(gates) != 1 {
		mu.Unlock()
		t.Fatalf("%d tablet actors spawned, want 1", len(gates))
	}
	var gate *stopGate
	for _, g := range gates {
		gate = g
	}
	mu.Unlock()
	box := gate.box.Load()
	box.PostSystemMessage(&actor.SuspendMailbox{})
	const n = 6
	var scans []*rigScan
	for range n {
		scans = append(scans, r.start(r.request(0), false))
	}
	r.waitFor("the requests queued", func() bool { return gate.queued() >= n })
	box.PostSystemMessage(&actor.ResumeMailbox{})
	overloaded := 0
	for _, s := range scans {
		r.wait(s)
		switch {
		case s.err == nil:
			r.checkRows(s, 0)
		case s.err.GetCode() == messages.ErrorCode_ERROR_CODE_OVERLOADED && strings.Contains(s.err.GetMessage(), "MaxTabletQueue 2"):
			overloaded++
		default:
			t.Fatalf("scan ended with %v", s.err)
		}
	}
	if overloaded == 0 || overloaded == n {
		t.Fatalf("%d of %d requests OVERLOADED, want some (those that found more than 2 waiting) and not all", overloaded, n)
	}
	r.checkRows(r.scan(r.request(0)), 0)
}
