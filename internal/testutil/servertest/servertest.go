// Package servertest builds real scan-server actors (package scanserver,
// unchanged) for the in-process tests of the coordinator, which never
// import scanserver (internal/archtest): a test says what it sets of a
// server with a Config and gets the actor to spawn and its counts. The
// coordinator's tests thus depend on the scan server only through its
// messages and these few settings.
//
// Concurrency contract: New may be called from any goroutine; a Counts is
// safe to read while the actor runs.
package servertest

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/scanplane/scanplane/scanserver"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
)

// Config is what a coordinator test sets of a scan server; Default gives
// scanserver's defaults, and every setting it leaves out keeps its
// default.
type Config struct {
	// Workers: scans run concurrently.
	Workers int
	// MaxQueue: scans waiting for a worker beyond Workers.
	MaxQueue int
	// Window: unacknowledged batches in flight when the request says 0.
	Window int
	// AckTimeout: a client that acknowledges nothing this long is gone.
	AckTimeout time.Duration
	// Clock reads the time the server decides with; nil = time.Now.
	Clock func() time.Time
	// SlowFactor and SlowFloor make every block read SlowFactor times
	// slower, at least SlowFloor (scanserver.FaultConfig); 0 = off.
	SlowFactor float64
	SlowFloor  time.Duration
}

// Default returns scanserver's default settings.
func Default() Config {
	d := scanserver.DefaultScanServerConfig()
	return Config{Workers: d.Workers, MaxQueue: d.MaxQueue, Window: d.Window, AckTimeout: d.AckTimeout,
		Clock: d.Clock, SlowFactor: d.Fault.SlowFactor, SlowFloor: d.Fault.SlowFloor}
}

// Deps say who the server is and what it reads.
type Deps struct {
	// ID names the scan server (wire.ServerID); Host is its host.
	ID, Host string
	// Fetcher reads the blocks; required.
	Fetcher tablets.BlockFetcher
	// Gens, when set, tells a block of a generation newer ingests deleted
	// (STALE_GENERATION); nil: never.
	Gens wire.GenerationSource
	// System is the actor system the actor runs on; required.
	System *actor.ActorSystem
	// Life ends when the test's servers should stop pausing; nil:
	// context.Background().
	Life context.Context
	// Counts receives the server's counts, kept across restarts of the
	// actor when every New of it gets the same; nil: New makes one.
	Counts *Counts
}

// Counts are a server's counts of what it did.
type Counts struct{ c scanserver.ServerCounters }

// Scans counts the scans the server started.
func (c *Counts) Scans() uint64 { return c.c.Scans.Load() }

// Probes counts the Prequal probes the server answered.
func (c *Counts) Probes() uint64 { return c.c.Probes.Load() }

// New returns a real scan-server actor configured by cfg (the settings
// Config leaves out keep scanserver's defaults), and its counts.
func New(cfg Config, d Deps) (actor.Actor, *Counts) {
	sc := scanserver.DefaultScanServerConfig()
	sc.Workers, sc.MaxQueue, sc.Window, sc.AckTimeout, sc.Clock = cfg.Workers, cfg.MaxQueue, cfg.Window, cfg.AckTimeout, cfg.Clock
	sc.Fault.SlowFactor, sc.Fault.SlowFloor = cfg.SlowFactor, cfg.SlowFloor
	counts := d.Counts
	if counts == nil {
		counts = &Counts{}
	}
	return scanserver.NewScanServerActor(sc, scanserver.ServerDeps{ID: d.ID, Host: d.Host, Fetcher: d.Fetcher, Gens: d.Gens,
		System: d.System, Life: d.Life, Counters: &counts.c}), counts
}

// ActorName is the name a host agent gives its scan server idx (the PID's
// id on the host agent's actor system).
func ActorName(idx int) string { return scanserver.ServerActorID(idx) }
