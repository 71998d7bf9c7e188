package coordinator

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// tabletWatch is test middleware (CoordinatorConfig.Env.Middleware) that
// knows the running tablet actors by name (tabletActorName): each is
// recorded as it starts, again after a restart, and dropped as it stops.
type tabletWatch struct {
	mu   sync.Mutex
	pids map[string]*actor.PID
}

func newTabletWatch() *tabletWatch { return &tabletWatch{pids: map[string]*actor.PID{}} }

func (w *tabletWatch) middleware(next actor.ReceiverFunc) actor.ReceiverFunc {
	return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
		if ta, ok := c.Actor().(*TabletActor); ok {
			switch env.Message.(type) {
			case *actor.Started:
				w.mu.Lock()
				w.pids[ta.name()] = c.Self()
				w.mu.Unlock()
			case *actor.Stopped:
				w.mu.Lock()
				if pid := w.pids[ta.name()]; pid != nil && pid.Equal(c.Self()) {
					delete(w.pids, ta.name())
				}
				w.mu.Unlock()
			}
		}
		next(c, env)
	}
}

// pid is the running actor of tablet name; nil if none.
func (w *tabletWatch) pid(name string) *actor.PID {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pids[name]
}
