// Package coordinator is the coordinator program's actors:
//
//   - the registry: servers join by valid heartbeat, leave after missed
//     beats or when their endpoint terminates; at most MaxHosts host
//     actors;
//   - one HostActor per host: load counters → an immutable
//     selection.LoadView (LoadBoard); reaped once all its servers are gone;
//   - the router, and one TabletActor per tablet (spawned lazily by the
//     tablet's owner, stopped when idle) that runs the scan flow (ScanFlow,
//     pure) and asks the profile's selection.Policy where to go;
//   - cluster membership: the coordinators form a Proto.Actor cluster whose
//     members announce themselves through leases (LeaseProvider); a
//     tablet's owner is chosen by rendezvous hashing over the members.
//
// Every scan flow ends (see ScanFlow): on success, on ScanDone, when every
// attempt has ended and one delivered data, or at its deadline (the
// request's, else FlowConfig.MaxFlowAge); attempts on servers that left the
// view are ended by a periodic check. The client picks the winning stream;
// the tablet actor follows and never cancels a stream that already sent a
// batch.
//
// Liveness: a server leaves the view when its endpoint terminates, when it
// restarts (a new incarnation), or when it has missed HeartbeatMisses
// heartbeats while the coordinator was running (see Liveness): a sweep
// that runs late — the coordinator was stopped, paused by GC or a VM
// freeze, or backed up — forgives its lateness, because the heartbeats of
// that time may still sit unread in its socket or mailboxes. Attempts on a
// server that left the view end as errors and count against it; an attempt
// the flow had already told to stop ends as cancelled and is never
// counted.
//
// Nothing sent to a stopping actor is lost: a tablet actor that wants to
// stop for idleness, and a host actor whose servers are gone, first ask
// their parent (router, registry), which stops routing to them and holds
// what arrives meanwhile; the actor stops only if it is still idle, else
// stays and gets what was held. Every queue the coordinator holds is
// bounded (CoordinatorConfig documents each bound; a request beyond one is
// answered OVERLOADED), and failures that would otherwise go unseen — dead
// letters, failed publishes, invalid wire messages, overload — are counted
// in StatusReply and Coordinator.Collectors and logged at warn, at most one
// line per kind per CoordinatorConfig.WarnEvery.
//
// Concurrency contract: actor state is touched only inside Receive. Pure
// state machines (ScanFlow, Liveness) take `now` and return decisions;
// actors carry them out. Shared read-mostly state (the load view, table
// metadata) is published as immutable snapshots through atomic pointers.
// Everything started has a Close.
package coordinator
