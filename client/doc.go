// Package client is scanplane's Go client library. A Client knows the
// coordinators (Config.Coordinators, or their leases on NATS), keeps
// table metadata, and scans key ranges: Scan returns an iterator that
// yields exactly the rows of the range, in key order, each once — or an
// error that says what failed. Every batch is verified (row count and
// checksum) before its rows are handed over. If the server streaming a
// tablet dies, stalls or sends a batch that fails verification, the client
// resumes after the last key it handed over, on another server; if the
// coordinator is lost, requests go to another (or the same, once back) or
// the scan fails naming it (README, "When something dies").
//
// The per-tablet protocol is a pure state machine, TabletStream; Rows is
// the shell that runs it.
//
// Concurrency contract: a Client is safe for concurrent use by many
// goroutines; each Rows iterator belongs to one goroutine. New does no IO;
// Start connects; Close releases everything and returns within about a
// second.
package client
