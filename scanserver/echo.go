package scanserver

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/messages"
)

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
