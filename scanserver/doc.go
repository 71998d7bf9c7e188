// Package scanserver is the scan-server program: one HostAgent per
// process, holding one host block cache shared by its ScanServerActors,
// publishing their heartbeats and busy signals on NATS, and injecting the
// faults it is configured with.
//
// A ScanServerActor runs scans with a bounded worker pool and queue
// (ServerQueue, pure) and streams RowBatches to clients with credit-based
// flow control, each carrying the attempt's cumulative row count and
// tablets.RowDigest checksum (ScanFinished carries the totals), and the
// block proofs of its rows; a scan whose client checks the proofs
// (StartScan.proofs_checked) goes without the checksum. It answers
// Busy when a scan cannot start within its busy timeout, honours Cancel —
// except a Cancel{unless_streaming} for an attempt that already sent a
// RowBatch, since the client may be reading that stream — and answers
// Prequal probes with its requests in flight and a latency estimate
// (LatencyEstimator).
//
// Concurrency contract: actor state is touched only inside Receive;
// scans run on the actor's worker goroutines and report back to it as
// messages. Everything started has a Close.
package scanserver
