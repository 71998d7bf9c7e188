package wire

import (
	"strconv"
	"strings"
)

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

// ServerID is the id of the scan server of index idx in the process whose
// actor address is addr: "<addr>/<idx>". It changes when the process
// restarts on another port.
func ServerID(addr string, idx int) string { return addr + "/" + strconv.Itoa(idx) }

// ServerLabel is the stable name of a scan server in metrics, the value
// of their server label: "<host>/<index>", the host's name and the
// server's index in its process (the last element of its id, ServerID).
// Unlike the id it survives a restart on another address.
func ServerLabel(host, id string) string {
	return host + "/" + id[strings.LastIndexByte(id, '/')+1:]
}

// ServerAddress is the actor address part of a scan server's id.
func ServerAddress(id string) string {
	if i := strings.LastIndexByte(id, '/'); i >= 0 {
		return id[:i]
	}
	return id
}
