package sim

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/coordinator"
	"github.com/scanplane/scanplane/internal/actorenv"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/wire"
)

// panicker injects actor failures into one coordinator incarnation
// through its Env's middleware (actorenv.Panicking and relay): it knows
// the tablet actors that run, by tablet, and has the router pass a
// failure on to one of them.
type panicker struct {
	mu      sync.Mutex
	tablets map[string]*actor.PID // coordinator.TabletIdentity -> the tablet's actor
}

// tabletPanic asks the router's middleware to make the actor of tablet
// (a coordinator.TabletIdentity) panic; nothing if none runs.
type tabletPanic struct{ tablet, why string }

func newPanicker() *panicker { return &panicker{tablets: map[string]*actor.PID{}} }

// middleware is the coordinator's Env.Middleware.
func (p *panicker) middleware() []actor.ReceiverMiddleware {
	return []actor.ReceiverMiddleware{actorenv.Panicking, p.relay}
}

// relay tracks the tablet actors as they start and stop, and passes a
// tabletPanic on to its tablet's actor instead of handing it to the
// actor that received it (the router).
func (p *panicker) relay(next actor.ReceiverFunc) actor.ReceiverFunc {
	return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
		switch m := env.Message.(type) {
		case *tabletPanic:
			p.mu.Lock()
			pid := p.tablets[m.tablet]
			p.mu.Unlock()
			if pid != nil {
				c.ActorSystem().Root.Send(pid, &actorenv.Panic{Why: m.why})
			}
			return
		case *actor.Started, *actor.Stopped:
			if ta, ok := c.Actor().(*coordinator.TabletActor); ok {
				ref := ta.Tablet()
				id := coordinator.TabletIdentity(ref.GetTable(), ref.GetGeneration(), ref.GetIndex())
				p.mu.Lock()
				if _, started := m.(*actor.Started); started {
					p.tablets[id] = c.Self()
				} else if pid := p.tablets[id]; pid != nil && pid.Equal(c.Self()) {
					delete(p.tablets, id)
				}
				p.mu.Unlock()
			}
		}
		next(c, env)
	}
}

// inject makes an actor of the coordinator running on as panic as it
// handles its next message: "router", or the actor of tablet (sent
// through the router, as a request for the tablet is).
func (p *panicker) inject(as *actor.ActorSystem, target string, tablet *messages.TabletRef, why string) {
	router := actor.NewPID(as.Address(), wire.RouterName)
	if target == "router" {
		as.Root.Send(router, &actorenv.Panic{Why: why})
		return
	}
	id := coordinator.TabletIdentity(tablet.GetTable(), tablet.GetGeneration(), tablet.GetIndex())
	as.Root.Send(router, &tabletPanic{tablet: id, why: why})
}
