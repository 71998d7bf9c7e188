// Package protosim is a deterministic simulation of the scan protocol, in
// the style of etcd raft's in-memory network test harness. It composes
// the project's real pure state machines — the client's per-tablet
// protocol (client.TabletStream), the tablet actor's flow
// (coordinator.ScanFlow) with a Picker over a real selection policy
// (accumulo-host, adaptive, clickhouse-random with hedging), and the scan
// server's admission queue (scanserver.ServerQueue) — with thin simulated
// shells: coordinators (router, load book, tablet actors), scanserver
// processes (a streamer of the ground truth's rows with row counts and
// tablets.RowDigest checksums, honouring the window, BatchAck, Cancel
// with unless_streaming and deadlines) and client processes.
//
// Everything runs over a simulated network driven by a seeded scheduler:
// a fake clock that moves only from event to event (timers are events),
// and one math/rand/v2 PCG stream seeded with the run's seed. The network
// drops, delays, duplicates and reorders messages; processes are paused
// (SIGSTOP: messages and timers wait, time passes), killed (state lost)
// and restarted on the same address as a new incarnation; coordinators
// are lost and come back. ConfigFor(seed) draws a run's shape and fault
// mix; Run simulates it and checks the properties listed in check.go on
// every run. A failing seed replays exactly, with its full trace:
//
//	go test ./internal/protosim -run 'TestProtocol$' -protosim.seed=SEED -v
//	go test ./internal/protosim -run 'TestProtocol$' -protosim.seeds=1000000 -timeout 0
//
// Concurrency contract: one run is confined to one goroutine and is
// deterministic — it reads no clock, starts no goroutine, never ranges
// over a map where the order matters, and shares nothing mutable with
// other runs, so runs of different seeds may go in parallel. The package
// is test infrastructure: nothing outside tests imports it.
package protosim
