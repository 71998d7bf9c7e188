// Package loadtest is scanplane's load-test harness: it owns the workload
// generator (Zipfian or uniform tablet popularity, YCSB-E short scans and
// whole-tablet scans, open- or closed-loop arrivals), the ground-truth
// verifier, fault injection on a local cluster of real processes, the
// per-policy runner and the report (HDR latency histograms, report.json,
// PNG plots). cmd/loadtest is its command line.
//
// # How a run works
//
// Run starts a local cluster (localcluster: Coordinators coordinators —
// one with embedded NATS, or several each embedding one node of a NATS
// cluster — and one scanserver process per host) or connects to a running
// one,
// ingests Rows generated rows (tablets.GenerateRows) over Tablets tablets
// unless the table is already there, and then runs one phase per (fault,
// policy), faults outer, policies inner. A phase on a local cluster:
//
//  1. restarts every host process, so each policy starts from cold block
//     caches and fresh server identities (no learned state carried over)
//     and is warmed equally; the fault host is started with the
//     scanserver's fault flags when the fault has them (slow-server:
//     --fault-pause SlowPause --fault-server 0, one server of the host;
//     slow-host: --fault-slow SlowFactor; heterogeneous: --workers
//     Workers/2 where the other hosts get --workers Workers, checked
//     against the workers the host's heartbeats report). Those faults are
//     active from the restart, through the warm-up and the whole measurement
//     window. The
//     coordinator warms a new server's connections in both directions on
//     its first heartbeat, so no phase starts with servers shunned for
//     busy timeouts of connection setup (Result.Servers shows any);
//  2. rewrites the coordinators' profiles file (ProfilesJSON: one default
//     profile with the policy) and reloads it (every coordinator: the
//     client's through a reload request, all of them with SIGHUP, and
//     waits until each runs the policy);
//  3. runs Warmup of workload (not in the figures) then Duration of measurement;
//     timed faults (hung-server: SIGSTOP/SIGCONT of the fault host's
//     process; crash-host: SIGKILL then restart; crash-coordinator:
//     SIGKILL of the fault coordinator — by default the one the client
//     sends its requests to — then a restart on its ports and data
//     directory; hung-coordinator: SIGSTOP/SIGCONT of it, its NATS node
//     included; hot-tablet: HotShare of
//     the scans on one tablet; antagonist: a CPU-burning child process
//     beside the fault host's scanserver, both pinned to one CPU, killed
//     at the window's end when the scanserver gets its affinity back, see
//     BurnMain) cover [FaultAfter, FaultAfter+FaultFor) of the measurement
//     window;
//  4. collects the Result: HDR latency percentiles (p99.9 included), the
//     longest stretch of the window in which no scan completed with the
//     right rows (LongestGapMs: what a coordinator fault costs shows here),
//     the coordinators' dispatch, hedge and busy counters (deltas over the
//     window, summed over every coordinator), and the hosts' block cache
//     hits and misses from their heartbeats (deltas).
//
// Every scan is checked against the ground truth (Verifier: row count and
// a checksum of keys and values); a wrong or missing row counts in Wrong
// (in WarmupWrong during warm-up, reported too). In open loop (Rate > 0)
// scan k is due at start + k/Rate and its latency counts from that moment,
// so a stall is charged to every scan it delayed (no coordinated
// omission); Clients bounds the scans in flight.
//
// # Concurrency contract
//
// Run is safe to call from one goroutine at a time per process: it starts
// one client.Client, whose protoactor remote must be the process's only
// one. Zipf, Workload, Verifier and a finished Report are immutable and
// safe for concurrent use.
package loadtest
