package remoting

import "github.com/asynkron/protoactor-go/remote"

// EndpointWriterQueueSize is the initial size of a remote endpoint
// writer's mailbox ring in every actor system of scanplane (coordinator,
// scan server, client).
//
// protoactor allocates the ring at 1 000 000 slots (16 MB) by default,
// one per peer process; the ring doubles when full, so a small start
// loses nothing and saves that memory per peer.
const EndpointWriterQueueSize = 1024

// WriterQueueOption is the remote option that sets EndpointWriterQueueSize.
func WriterQueueOption() remote.ConfigOption {
	return remote.WithEndpointWriterQueueSize(EndpointWriterQueueSize)
}
