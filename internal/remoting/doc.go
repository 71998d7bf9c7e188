// Package remoting owns the actor system every scanplane process runs and
// its network edge: protoactor's remote over gRPC with mutual TLS when
// configured (StartSystem, SystemConfig), the transport's window and
// buffer sizes (TransportOptions), the decoding of received messages in
// place of copies (decode.go, recv.go), the Guard that refuses what the
// remote does not serve, and what a peer's certificate role may not send
// (the role table, roles.go), before protoactor reads it, and a stop that
// does not race protoactor's shutdown (Tracker.Stop).
//
// Concurrency: a System is started once and closed once; Tracker and Guard
// are safe for concurrent use (their interceptors run on gRPC's handler
// goroutines).
package remoting
