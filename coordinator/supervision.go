package coordinator

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Supervision: every actor of the coordinator is restarted when it panics,
// at most maxRestarts times in restartWindow (then it is stopped; the
// router spawns a tablet actor anew on its next request). What an actor
// held is not lost with it:
//
//   - a tablet actor that restarts ends each of its flows: their attempts
//     are cancelled and accounted to their hosts (so in-flight counts stay
//     exact), and a request that had no data yet goes back to the fresh
//     actor once — a second failure on it answers the client INTERNAL; a
//     request whose rows already stream goes on from its scan server;
//   - a router that restarts hands the requests it held (waiting for
//     metadata, or for a stopping tablet actor) to its fresh incarnation,
//     and its tablet actors, which stop with it, hand it theirs that had
//     no data yet; answers to work the old incarnation started are
//     dropped by the new one (routerEpoch).
const (
	maxRestarts   = 3
	restartWindow = 10 * time.Second
)

// supervisor is the strategy for the actors of kind what.
func (c *Coordinator) supervisor(what string) actor.SupervisorStrategy {
	return actor.NewOneForOneStrategy(maxRestarts, restartWindow, func(reason any) actor.Directive {
		c.counters.actorFailures.Add(1)
		c.warns.warn("actor_failure", "actor failed; restarting it (stopped after "+fmt.Sprint(maxRestarts)+" failures in "+restartWindow.String()+")",
			"actor", what, "reason", fmt.Sprint(reason))
		return actor.RestartDirective
	})
}
