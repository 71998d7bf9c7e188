// Package client is scanplane's Go client library: it scans key ranges of
// the tables of a scanplane cluster.
//
// The default way to scan is NewAPI: an API scans through the public API
// (scanplane.v1) that every coordinator serves on its HTTP port
// (Config.API; empty: DefaultAPIAddrs, the coordinators of `scanctl
// up`). It only dials (no actor system, no NATS unless
// Config.APIReadMeta, no listening socket), so it scans from behind NAT
// and from outside the cluster's network; its Scan, All and Count read a
// range like Client's, checking every row's proof, failing over to the
// next coordinator and resuming after the last key received.
//
// Dial (New and Start in one step) opts into the actor path, for
// clients inside the cluster's network: the scan servers dial the
// client's own actor endpoint (Config.Listen, Config.Advertise) and
// stream rows straight to it; a Client also ingests, routes, batch-scans
// and reads tablets in parallel. Config.NATSURL names the
// cluster's NATS nodes (DefaultNATSURLs: the three nodes of `scanctl
// up`); the client finds the coordinators from the leases they keep on
// NATS, or uses Config.Coordinators. A cluster started with a secrets
// directory (`scanctl up --secure`, or --secrets on every process)
// requires mutual TLS: set Config.TLS from TLSFromSecrets(dir).
//
// Scan (or All, its range-over-func form) returns the rows of a Range
// (KeyRange, Prefix, SingleKey; Range{} is the whole table) exactly once
// each, in key order, or an error that says what failed. ScanOptions.Hints
// pick the profile the coordinator schedules the scan with ("scan_type").
// Every row is verified before it is handed over: against the block
// digests ingest recorded in the table's metadata (a scan server's block
// proofs must tie each row to them, and show that none is missing), and
// against the batch's row count (and, for a table without digests, its
// checksum). If the server streaming a
// tablet dies, stalls, fails or sends rows that fail verification, the
// client resumes after the last key it handed over, on another server; if the coordinator is lost, requests
// go to another (or the same, once back) or the scan fails naming it.
//
// A Scan over several tablets reads ScanOptions.Parallel of them at once
// (DefaultParallel), verified in goroutines of their own, and still
// yields rows in key order, holding at most about
// ScanOptions.MaxBufferBytes for the caller; an error of a later tablet
// reaches the caller after every row before it. BatchScan reads the
// union of many ranges, each tablet's piece in key order, the pieces
// interleaved. Close a Rows that is not read to its end.
//
// Errors wrap sentinels to test with errors.Is: ErrNoCoordinator,
// ErrNoTable, ErrClosed, ErrStream, ErrUnverified, and for an error the cluster answered
// (*ScanError) ErrScan and the sentinel of its code (ErrNoServers,
// ErrOverloaded, ErrStorage, ...). ErrDeadlineExceeded is
// context.DeadlineExceeded: a scan's deadline passed, in the client or in
// the cluster.
//
// Ingest and NewWriter write a table (the admin role's certificate on a
// secured cluster: AdminTLSFromSecrets): rows in any order, in bounded
// memory (WriteOptions.SortBuffer, spilling sorted runs to a temporary
// directory), published as the table's new generation only at Commit.
//
// Status, Route and ReloadAll are the control calls behind `scanctl
// status`, `scanctl route` and `scanctl reload`.
//
// The per-tablet protocol is a pure state machine (internal/tabletstream);
// Rows is the shell that runs it.
//
// Concurrency contract: a Client is safe for concurrent use by many
// goroutines; each Rows iterator belongs to one goroutine. New does no IO;
// Start connects; Close releases everything and returns within a few
// seconds. Several Clients may run in one process: they share one actor
// remote (see Client.Start).
package client
