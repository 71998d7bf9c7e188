// Package wire is what every scanplane process must agree on: the
// well-known actor names (RouterName, EchoName) and cluster kind
// (TabletKind), the conversion between wire and protoactor PIDs, the
// limits of wire messages and their validation (each Validate function
// names the bad field, wrapping ErrBadMessage), the default flow control,
// and when a table generation counts as deleted (Stale). The client, the
// coordinator and the scan server import it; it imports neither.
//
// Concurrency: everything here is a pure function or a constant.
package wire
