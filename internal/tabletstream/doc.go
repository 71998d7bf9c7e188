// Package tabletstream owns the client's side of the scan protocol for
// one tablet's piece of a range: TabletStream, a pure state machine that
// takes the time and the messages that arrive and returns the actions to
// carry out, and the verification of rows against the tablet's block
// roots (Roots). It does no IO and reads no clock, so package client runs
// it for real scans and the deterministic harness (internal/sim) drives
// the same code.
//
// Concurrency: a TabletStream is not safe for concurrent use; separate
// streams share nothing.
package tabletstream
