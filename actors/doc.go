// Package actors holds scanplane's actors and the components that host them:
//
//   - ScanServerActor: one scan server; a bounded worker pool and queue
//     (ServerQueue, pure), streams RowBatches to clients with credit-based
//     flow control, answers Busy when a scan cannot start within its busy
//     timeout, honours Cancel.
//   - HostAgent: one scanserver process: one host block cache shared by its
//     scan-server actors, NATS heartbeats, fault injection.
//   - Coordinator: the registry (servers join by heartbeat, leave after
//     missed beats or when their endpoint terminates), one HostActor per host
//     (load counters → an immutable selection.LoadView), the router, and one
//     TabletActor per tablet (spawned lazily) that runs the scan flow
//     (ScanFlow, pure) and asks the profile's selection.Policy where to go.
//
// Concurrency contract: actor state is touched only inside Receive. Pure
// state machines (ServerQueue, ScanFlow) take `now` and return decisions;
// actors carry them out. Shared read-mostly state (the load view, table
// metadata) is published as immutable snapshots through atomic pointers.
// Everything started has a Close.
package actors
