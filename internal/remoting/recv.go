package remoting

import (
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
)

// aliasedRecv is what an aliasingStream asks gRPC to decode a
// RemoteMessage into: protoCodec.Unmarshal decodes msg with
// decodeRemoteMessage and sets buf to the receive buffer msg points into
// (nil when it points into none), which the receiver frees.
type aliasedRecv struct {
	msg *remote.RemoteMessage
	buf mem.Buffer
}

// recvAliasing is the stream interceptor that lets the messages of a
// stream point into its receive buffers (decode.go). It must be the
// first of the chain: every interceptor after it sees the stream it
// wraps, and the buffer of a message is freed when that stream's next
// message is asked for or when the handler returns.
func recvAliasing(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	s := &aliasingStream{ServerStream: ss}
	defer s.release()
	return h(srv, s)
}

// aliasingStream holds the receive buffer of the last RemoteMessage it
// received until RecvMsg is called again. Like any gRPC stream, it takes
// one RecvMsg at a time.
type aliasingStream struct {
	grpc.ServerStream
	recv aliasedRecv
	held mem.Buffer
}

// RecvMsg frees the buffer of the previous message (its receiver is done
// with it: it asks for the next one) and receives m, a RemoteMessage
// pointing into the buffer it keeps.
func (s *aliasingStream) RecvMsg(m any) error {
	s.release()
	rm, ok := m.(*remote.RemoteMessage)
	if !ok {
		return s.ServerStream.RecvMsg(m)
	}
	s.recv = aliasedRecv{msg: rm}
	err := s.ServerStream.RecvMsg(&s.recv)
	s.held, s.recv = s.recv.buf, aliasedRecv{}
	return err
}

func (s *aliasingStream) release() {
	if s.held != nil {
		s.held.Free()
		s.held = nil
	}
}
