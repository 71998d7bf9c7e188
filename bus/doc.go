// Package bus owns everything scanplane does over NATS as a client:
// connecting to a NATS server or cluster with JetStream (the coordinator's
// embedded one, internal/natsserver, or an external one), the versioned
// subject names and the reply inboxes of secured users, publishing and subscribing the
// protobuf signals of messages/ (heartbeats, busy and timeout events,
// metadata changes), and the JetStream key-value stores: BlockStore for
// tablet-file blocks, MetaStore for table metadata, and LeaseStore for the
// coordinators' leases (one key per coordinator, renewed every second,
// gone after a TTL: how clients and the coordinators' cluster provider
// find the live coordinators).
//
// Concurrency contract: a Conn, a BlockStore, a MetaStore and a LeaseStore
// are safe for concurrent use by any number of goroutines. Subscription
// callbacks run on NATS goroutines (one per subscription, so calls of one
// callback are serialised) and must not block for long: hand the message
// to an actor or a channel and return. A payload that fails to decode is counted
// (Conn.DecodeErrors) and logged, and never reaches the callback.
// MetaStore.Watch and LeaseStore.Watch call their callback from one
// goroutine of their own, which re-synchronises after every reconnect and
// ends with its context or Conn.Close. A Lease renews from a goroutine of
// its own until Close.
//
// Errors: every store operation is bounded by Config.OpTimeout and every
// failure wraps a sentinel: ErrNotFound, ErrCorrupt (a value JetStream
// still indexes but can no longer read from disk), ErrStoreFull,
// ErrUnavailable (no answer in time, no connection, JetStream off),
// ErrStorage, ErrTooLarge or ErrConflict — or the caller's own context
// error.
//
// Clustering: with a NATS cluster (internal/natsserver's nodes, or an
// external cluster), Config.Replicas sets how many nodes keep each
// bucket: with 3,
// losing one node loses no data and no write (a connection attached to a
// live node keeps reading and writing; one attached to the dead node
// reconnects to another; a restarted node catches up with both buckets;
// internal/natsserver's TestClusterReplicas3); losing two of three makes every write fail with
// ErrUnavailable within OpTimeout, while reads may still be answered by
// the lone node, possibly stale. Opening a bucket retries, up to Config.BucketWait, while
// the cluster is forming or has too few nodes for its replicas.
//
// Sizes: NATS's default max payload is 1 MiB (the embedded server is started
// with 8 MiB, natsserver.ServerConfig.MaxPayload). Blocks and metadata values must stay well under 1 MiB; the
// stores reject larger values with ErrTooLarge before sending them.
package bus
