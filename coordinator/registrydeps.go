package coordinator

import (
	"log/slog"
	"sync"
	"time"

	"github.com/scanplane/scanplane/internal/actorenv"
)

// registryDeps is what the registry actor needs of its coordinator: the
// counters it bumps, its log, the load board and status map its host
// actors feed, the host -> PID map tablet actors read, and the settings
// its host actors run by. Built once per registry incarnation; it does not
// change after, and all it points to is safe for concurrent use.
type registryDeps struct {
	tally
	log *slog.Logger
	// board and status: the load view and per-server status host actors write.
	board  *LoadBoard
	status *sync.Map
	// hostPIDs: host name -> its host actor's *actor.PID.
	hostPIDs *sync.Map
	// Settings (CoordinatorConfig).
	misses     int           // HeartbeatMisses
	forget     time.Duration // HostForget
	sweepEvery time.Duration // SweepInterval
	maxHosts   int           // MaxHosts
	// now reads the coordinator's clock; env wraps the host actors' props.
	now func() time.Time
	env actorenv.Env
}

// registryDeps builds what the registry actor needs of c.
func (c *Coordinator) registryDeps() *registryDeps {
	cfg := &c.cfg
	return &registryDeps{tally: c.tally(), log: c.log, board: c.board, status: &c.status, hostPIDs: &c.hostPIDs,
		misses: cfg.HeartbeatMisses, forget: cfg.HostForget, sweepEvery: cfg.SweepInterval, maxHosts: cfg.MaxHosts,
		now: cfg.Clock, env: cfg.Env}
}
