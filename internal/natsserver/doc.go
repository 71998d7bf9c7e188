// Package natsserver owns the NATS server with JetStream that a
// coordinator embeds, and its guards: the TLS users of secured mode and
// their per-role permissions and accounts (permissions.go, accounts.go),
// the consumer guard that deletes the consumers a restricted user may not
// keep (consumerguard.go), the watch of the cluster's quorum (quorum.go)
// and the restart of JetStream after it ran out of disk space
// (outofspace.go). Only the coordinator's command, and tests and tools
// that start clusters, import it: the client library and the scan server
// reach NATS through package bus and never link nats-server. Its tests
// run bus's connections and stores over it: secured (every role's
// permissions, inbox isolation, the consumer guard) and clustered
// (replicas, quorum, corrupt replicas).
//
// Clustering: StartServer with ServerConfig.ClusterListen and Routes makes
// the embedded server one node of a NATS cluster (three coordinators, each
// embedding a node, is the highly available setup on one machine or
// three). Each node needs its own client port, route port and StoreDir,
// and a server Name unique in the cluster and stable across restarts
// (JetStream knows peers by name; a node restarted with the same name and
// store rejoins with its data). StartServer returns once the client port
// is ready; EmbeddedServer.WaitJetStream waits for the metadata leader. A
// new cluster elects its first leader only once every node its routes
// name (at least two) is up; after that a majority keeps JetStream
// running (what bus's buckets then keep: see package bus, Clustering).
// ServerConfig.LocalDirectGets keeps the direct gets of named streams on
// the node a client sent them to, answered by its own replica: the
// coordinator sets it for the blocks bucket when every node holds a
// replica.
//
// Concurrency contract: an EmbeddedServer is safe for concurrent use; its
// guards and watches run on goroutines of their own until Close, which
// stops them and the server and waits for both.
package natsserver
