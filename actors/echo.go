package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/scanplane/scanplane/messages"
)

// EchoName is the actor id of a host agent's echo actor. It answers a
// small Row with the same Row and does nothing else, so a client can time
// a bare remote request/response to a scan-server process: the floor
// under a scan's round trip (client.Ping, BenchmarkOneRowScan).
const EchoName = "scanplane-echo"

// maxEchoBytes bounds what the echo actor sends back (key + value): it
// answers probes, not bulk data from the network.
const maxEchoBytes = 1024

type echoActor struct{}

func (echoActor) Receive(c actor.Context) {
	r, ok := c.Message().(*messages.Row)
	if !ok || c.Sender() == nil || len(r.GetKey())+len(r.GetValue()) > maxEchoBytes {
		return
	}
	c.Respond(r)
}
