package remoting

import (
	"log/slog"

	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// Transport sizes of the gRPC connections under every actor system of
// scanplane. protoactor keeps one gRPC stream per pair of processes, so a
// scan server's row batches to a client all share one stream.
const (
	// StreamWindow is the HTTP/2 flow-control window of that stream and
	// ConnWindow of its connection. gRPC's defaults start at 64 KiB and
	// grow by estimating the bandwidth-delay product, one round trip at a
	// time; a batch is up to 256 KiB (ScanServerConfig.BatchBytes) and a
	// scan keeps up to 8 in flight (client.DefaultWindow), so a fixed
	// window of 4 MiB lets the sender write a scan's window without
	// waiting for window updates. It bounds what a receiver buffers per
	// peer before its reader drains it.
	StreamWindow = 4 << 20
	ConnWindow   = 8 << 20
	// IOBuffer is the size of each connection's write and read buffers
	// (gRPC's default is 32 KiB): large enough that a row batch costs
	// about one read(2) and one write(2) (MEASUREMENTS.md, "Whole-tablet
	// scans").
	IOBuffer = 256 << 10
	// ClientMaxMessage is the largest gRPC message a client's remote
	// accepts (RemoteLimits.MaxMessage of TransportOptions). protoactor's
	// endpoint writer sends every message queued for a peer (up to 1000)
	// as one gRPC message, so row batches queued for a client behind
	// HTTP/2 flow control arrive together: a limit below the bytes a
	// scan server's streams to one client may have queued breaks the
	// connection and every stream on it.
	ClientMaxMessage = 256 << 20
)

// TransportOptions are the remote options of a client's gRPC transport:
// creds on both sides (nil: plaintext, for loopback only), guard in front
// of the server (required: nothing from the network reaches protoactor
// without it), DefaultRemoteLimits with ClientMaxMessage on the server
// (row batches arrive there) and the window and buffer sizes above. server are the other gRPC server options; remote's
// WithServerOptions and WithDialOptions replace their lists, so every
// option of either goes through here.
func TransportOptions(creds credentials.TransportCredentials, guard *Guard, server ...grpc.ServerOption) []remote.ConfigOption {
	lim := DefaultRemoteLimits
	lim.MaxMessage = ClientMaxMessage
	return TransportOptionsLimits(creds, guard, lim, server...)
}

// TransportOptionsLimits is TransportOptions with the server's limits
// lim (valid: RemoteLimits.Validate). The server closes every
// connection over lim.MaxConns and every failed handshake, counts them in
// guard and logs them on guard's logger, at most lim.LogBurst lines per
// lim.LogEvery and then one with the number held back.
func TransportOptionsLimits(creds credentials.TransportCredentials, guard *Guard, lim RemoteLimits, server ...grpc.ServerOption) []remote.ConfigOption {
	return transportOptions(creds, guard, lim, newBufferPool(), server...)
}

// transportOptions is TransportOptionsLimits with the buffer pool of both
// directions' frames and messages.
func transportOptions(creds credentials.TransportCredentials, guard *Guard, lim RemoteLimits, pool mem.BufferPool, server ...grpc.ServerOption) []remote.ConfigOption {
	// Received messages point into their receive buffers (recv.go): that
	// interceptor comes first, so the Guard and protoactor see its stream.
	server = append([]grpc.ServerOption{grpc.ChainStreamInterceptor(recvAliasing)}, server...)
	server = append(server, guard.ServerOptions()...)
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	var log *slog.Logger
	if guard != nil {
		log = guard.log
	}
	server = append(server, grpc.Creds(newCappedCreds(creds, lim, guard, newLogThrottle(log, lim.LogBurst, lim.LogEvery))))
	server = append(server, lim.serverOptions()...)
	// The frames and messages of both directions in buffers of one pool
	// that does not clear them (bufpool.go).
	codec := protoCodec{pool: pool}
	server = append(server,
		grpc.InitialWindowSize(StreamWindow), grpc.InitialConnWindowSize(ConnWindow), grpc.MaxRecvMsgSize(lim.MaxMessage),
		grpc.WriteBufferSize(IOBuffer), grpc.ReadBufferSize(IOBuffer), experimental.BufferPool(pool), grpc.ForceServerCodecV2(codec))
	return []remote.ConfigOption{
		remote.WithServerOptions(server...),
		remote.WithDialOptions(grpc.WithTransportCredentials(creds),
			grpc.WithInitialWindowSize(StreamWindow), grpc.WithInitialConnWindowSize(ConnWindow),
			grpc.WithWriteBufferSize(IOBuffer), grpc.WithReadBufferSize(IOBuffer), experimental.WithBufferPool(pool),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec))),
	}
}
