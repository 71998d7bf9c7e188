package scanserver

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
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
