package wire

// TabletKind is the cluster kind of tablet actors: every coordinator
// member advertises it, and a tablet's owner is the member that
// cluster.Rendezvous picks for the tablet's identity among the members
// of this kind (see TabletIdentity).
const TabletKind = "tablet"

// EchoName is the actor id of a host agent's echo actor. It answers a
// small Row with the same Row and does nothing else, so a client can time
// a bare remote request/response to a scan-server process: the floor
// under a scan's round trip (client.Ping, BenchmarkOneRowScan).
const EchoName = "scanplane-echo"

// RouterName is the actor id of the coordinator's router: clients send
// ScanRequest, StatusRequest, RouteRequest and ReloadProfiles to it.
const RouterName = "scanplane-router"
