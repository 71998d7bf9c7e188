package scanserver

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/internal/actorenv"
)

// A scan-server actor that panics is replaced by a fresh one (newActor),
// at most maxRestarts times in restartWindow; after that it is stopped.
// The failed actor first ends its scans as a stop does (queued ones are
// answered Busy, running ones end cancelled), so their tablet actors try
// again, on this server or another.
const (
	maxRestarts   = 3
	restartWindow = 10 * time.Second
)

// ServerProps are the props of a scan-server actor made by newActor, for
// every incarnation, under an explicit restart strategy logging on log,
// with opts added (a harness's ScanServerConfig.Env.Props: its
// dispatcher, and middleware that injects failures).
func ServerProps(newActor func() *ScanServerActor, log *slog.Logger, opts ...actor.PropsOption) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return newActor() }, append([]actor.PropsOption{actor.WithGuardian(restartStrategy("scan server", log))}, opts...)...)
}

func restartStrategy(what string, log *slog.Logger) actor.SupervisorStrategy {
	return actor.NewOneForOneStrategy(maxRestarts, restartWindow, func(reason any) actor.Directive {
		log.Error("actor failed; restarting it", "actor", what, "reason", fmt.Sprint(reason),
			"stops_after", fmt.Sprintf("%d failures in %v", maxRestarts, restartWindow))
		return actor.RestartDirective
	})
}

// inlineDispatch is the props option that runs a scan-server actor's
// messages on the goroutine that delivers them (the remote reader of the
// peer's connection, a worker, a timer) instead of starting a goroutine
// per burst of messages: a StartScan reaches its worker with one
// goroutine hand-off, not two. The actor does not block in Receive (scans
// run on workers), except under an injected pause (FaultConfig.PauseFor),
// which must stop this server only, not every server of the process
// behind the same connection: then the default dispatcher is kept.
func inlineDispatch(f FaultConfig) []actor.PropsOption {
	if newPauseGate(f, time.Time{}) != nil {
		return nil
	}
	return []actor.PropsOption{actor.WithDispatcher(actorenv.InlineDispatcher())}
}
