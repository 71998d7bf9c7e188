// Package sim is a deterministic simulation of scanplane that runs the
// real actors: several coordinators (coordinator.NewLocalCoordinator: the
// real registry, host actors, router and tablet actors, with their
// supervision, stopped-actor gate, forwarding to a tablet's owner and
// re-forwarding of what a dead owner did not get), real scan servers
// (scanserver.ScanServerActor, its admission queue, worker stream, window
// and hand-off), and clients that drive the client's real per-tablet
// protocol (tabletstream.TabletStream) with its routing to an owner or to a
// tablet actor's PID, checking every row against the tablet's block roots
// as client.Client does. The harness replaces only what is around them: the
// network, the clock, NATS (heartbeats and the cluster's members), the
// block and metadata stores (in memory, with the table written by the
// real tablets.Ingest).
//
// How the real actors run on a seed:
//
//   - Each process (coordinator, scanserver host, client) has its own
//     protoactor ActorSystem per incarnation, whose process registry
//     carries the process's address. Every other address resolves
//     (RegisterAddressResolver) to the simulated network, which clones
//     each message (proto.Clone, as a wire would), delays it per
//     connection in order, and in fault runs drops, duplicates, reorders
//     or delays it. No gRPC runs.
//   - The actors' environment (internal/actorenv, set through
//     CoordinatorConfig.Env and ScanServerConfig.Env, zero in production)
//     puts their mailboxes on a dispatcher that turns each mailbox run
//     into a step of the seeded scheduler, their timers on the fake
//     clock, and the goroutines they start (metadata loads, block-reading
//     workers) into coroutines: real goroutines that run only while the
//     scheduler hands them the turn and hand it back when they end or
//     wait (the worker's wait for the batch window). So exactly one thing
//     runs at a time, and a run is one sequence of steps drawn from its
//     seed: the same seed gives the same trace (TestSameSeedSameTrace).
//     A coordinator's Env also carries the harness's middleware
//     (panics.go), which makes its router or a tablet actor panic.
//   - Each process reads the run's clock plus its own skew (up to ±5 s in
//     some fault runs): requests carry time left, so skew must change
//     nothing, and the checks allow it nothing.
//   - The scan server's streaming stays on its worker (not made
//     actor-driven): the worker's only waits are the window (Env.Wait)
//     and the harness's slow block reads, both coroutine yields, so the
//     real hand-off between actor and worker (the stream's
//     fresh/streaming/cancelled race, the accept notice, acks) runs as
//     shipped.
//
// What stays outside the run: NATS itself (heartbeats are handed to each
// coordinator's registry, leases become the members each coordinator is
// told, with LeaseTTL of expiry), the lease provider and the cluster's
// gossip, the remote's transport and guard, and client.Client's iterator
// and goroutines around its TabletStreams (the harness routes as it does:
// to a tablet actor a ScanRouted named, else to the router; a straggler
// batch of a finished request gets a Cancel).
//
// Faults: network (drop, duplicate, reorder, late), processes paused
// (SIGSTOP: their mailbox runs, timers, goroutines and arriving messages
// wait) and killed and restarted at the same address as a new
// incarnation (messages in flight to the old one are lost; messages sent
// to a dead address come back to the sender as dead letters, as
// protoactor's remote reports them, which is what makes a coordinator
// re-route a request it forwarded to a dead owner), a host restarted at
// once while each coordinator's endpoint to its address still fails (its
// messages there come back as dead letters until the old incarnation's
// endpoint-terminated event, which arrives after the new incarnation's
// first heartbeats), coordinators' leases
// expiring while they are dead or paused (the others drop them from the
// members and take their tablets; the paused one learns when it runs
// again), clock skew, actor panics (router, tablet actor, scan server),
// and profile reloads on every coordinator during scans.
//
// The checks (check.go) run on every run: every scan gets exactly its
// rows in order or a named error, by its deadline; nothing of a scan is
// left on a server FlowBound after it ended (unless a fault touched it)
// and nothing anywhere at the end (flows, in-flight counts of the host
// actors, server jobs); a client avoids only servers that had a fault;
// a run without faults completes every scan within CalmBound; and, a few
// heartbeats after the last fault, every running coordinator's view has
// every server of every running host alive in its current incarnation,
// reached by the coordinator's connect. The
// mutants (mutants_test.go) break what is around the actors — servers
// that lie (the scan server's own FaultConfig.Lie, or rows changed on the
// wire) to clients that skip the proofs, lost Cancels, lost accept
// notices, a forwarded request the owner never gets, no ScanProgress —
// and show that the checks notice; a mutant inside an actor
// (a flow that counts a cancelled attempt as an error) would need a hook
// in shipped code, and is not kept.
//
// A failing seed replays exactly, with its full trace:
//
//	go test ./internal/sim -run 'TestSim$' -sim.seed=SEED -v
//	go test ./internal/sim -run 'TestSim$' -sim.seeds=100000 -timeout 0
//
// Concurrency contract: a run is confined to its scheduler's goroutine
// (and the coroutines it hands the turn to, one at a time); runs of
// different seeds share nothing mutable and go in parallel. The package
// is test infrastructure: nothing outside tests imports it.
package sim
