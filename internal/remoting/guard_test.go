package remoting

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/messages"
)

// guardedRemote starts a plain-text remote behind a Guard with one
// actor, "probe", that forwards the key of every *messages.Row it
// receives to got.
func guardedRemote(t *testing.T) (*actor.ActorSystem, *Guard, chan gotMsg) {
	t.Helper()
	sys, g, got, _ := guardedRemoteWith(t, nil)
	return sys, g, got
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestGuardRefusesUnservedMethods calls protoactor's unary methods, whose
// handlers panic, and a stream method scanplane does not serve: each
// answers Unimplemented and the process goes on serving its actors.
func TestGuardRefusesUnservedMethods(t *testing.T) {
	sys, g, got := guardedRemote(t)
	conn := dial(t, sys.Address())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc := remote.NewRemotingClient(conn)
	_, err := rc.ListProcesses(ctx, &remote.ListProcessesRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("ListProcesses: %v, want Unimplemented", err)
	}
	_, err = rc.GetProcessDiagnostics(ctx, &remote.GetProcessDiagnosticsRequest{Pid: &actor.PID{Address: sys.Address(), Id: "probe"}})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("GetProcessDiagnostics: %v, want Unimplemented", err)
	}
	if g.Refused() != 2 {
		t.Fatalf("Refused() = %d, want 2", g.Refused())
	}
	sendBatches(t, conn, validBatch(sys.Address(), "after"))
	waitPID(t, got, "after")
}

// TestGuardDropsMalformedBatches sends batches whose indices point
// outside their tables (protoactor's reader panics on them) between two
// valid ones: the malformed ones are dropped, the valid ones delivered,
// all on one stream.
func TestGuardDropsMalformedBatches(t *testing.T) {
	sys, g, got := guardedRemote(t)
	conn := dial(t, sys.Address())
	bad := func(mut func(*remote.MessageBatch)) *remote.MessageBatch {
		b := validBatch(sys.Address(), "bad")
		mut(b)
		return b
	}
	malformed := []*remote.MessageBatch{
		bad(func(b *remote.MessageBatch) { b.Targets = nil }),
		bad(func(b *remote.MessageBatch) { b.Envelopes[0].Target = 5 }),
		bad(func(b *remote.MessageBatch) { b.Envelopes[0].Target = -1 }),
		bad(func(b *remote.MessageBatch) { b.Envelopes[0].Sender = 3 }),
		bad(func(b *remote.MessageBatch) { b.Envelopes[0].Sender = -2 }),
		bad(func(b *remote.MessageBatch) { b.Envelopes[0].TypeId = 1 }),
		bad(func(b *remote.MessageBatch) { b.Envelopes[0].TypeId = -1 }),
	}
	batches := append([]*remote.MessageBatch{validBatch(sys.Address(), "first")}, malformed...)
	batches = append(batches, validBatch(sys.Address(), "last"))
	sendBatches(t, conn, batches...)
	waitPID(t, got, "first")
	waitPID(t, got, "last")
	if g.Refused() != uint64(len(malformed)) {
		t.Fatalf("Refused() = %d, want %d", g.Refused(), len(malformed))
	}
}

// TestCheckBatchNil: nil entries, which the wire cannot carry but a
// batch built in-process can, are refused too.
func TestCheckBatchNil(t *testing.T) {
	for name, mut := range map[string]func(*remote.MessageBatch){
		"nil envelope": func(b *remote.MessageBatch) { b.Envelopes = append(b.Envelopes, nil) },
		"nil target":   func(b *remote.MessageBatch) { b.Targets[0] = nil },
		"nil sender": func(b *remote.MessageBatch) {
			b.Senders = []*actor.PID{nil}
			b.Envelopes[0].Sender = 1
		},
	} {
		b := validBatch("a:1", "x")
		if err := CheckBatch(b); err != nil {
			t.Fatalf("valid batch refused: %v", err)
		}
		mut(b)
		if err := CheckBatch(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestGuardRecoversHandlerPanic: a panic in the stream handler ends that
// stream with Internal and is counted; the process lives.
func TestGuardRecoversHandlerPanic(t *testing.T) {
	g := NewGuard(nil, nil)
	err := g.stream(nil, fakeStream{}, &grpc.StreamServerInfo{FullMethod: ReceiveMethod}, func(any, grpc.ServerStream) error {
		var m map[string]int
		m["x"]++ // nil map write: a runtime panic
		return nil
	})
	if status.Code(err) != codes.Internal || g.Panics() != 1 {
		t.Fatalf("err %v, panics %d; want Internal and 1", err, g.Panics())
	}
}

// TestGuardLogIsRateLimited: a burst of refusals logs one line per
// second per reason, and the next line says how many were suppressed.
func TestGuardLogIsRateLimited(t *testing.T) {
	var out strings.Builder
	g := NewGuard(slog.New(slog.NewTextHandler(&out, nil)), nil)
	now := time.Unix(1000, 0)
	g.now = func() time.Time { return now }
	for range 100 {
		g.refuse("peer", ReasonUnserved)
	}
	now = now.Add(guardLogEvery)
	g.refuse("peer", ReasonUnserved)
	g.refuse("peer", ReasonMalformed)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "suppressed=99") || g.Refused() != 102 {
		t.Fatalf("refused %d, log:\n%s\nwant 3 lines, the second with suppressed=99", g.Refused(), out.String())
	}
}

type fakeStream struct{ grpc.ServerStream }

func (fakeStream) Context() context.Context { return context.Background() }

func (fakeStream) SetHeader(metadata.MD) error { return nil }

// validBatch is a one-envelope batch that delivers Row{Key: id} to the
// probe actor at addr.
func validBatch(addr, id string) *remote.MessageBatch {
	data, err := proto.Marshal(&messages.Row{Key: []byte(id)})
	if err != nil {
		panic(err)
	}
	return &remote.MessageBatch{
		TypeNames: []string{"scanplane.internal.v1.Row"},
		Targets:   []*actor.PID{{Address: addr, Id: "probe"}},
		Envelopes: []*remote.MessageEnvelope{{Target: 0, TypeId: 0, MessageData: data}},
	}
}

// sendBatches sends batches on one Receive stream, then closes it and
// waits until the server has read everything (its end of the stream).
func sendBatches(t *testing.T, conn *grpc.ClientConn, batches ...*remote.MessageBatch) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := remote.NewRemotingClient(conn).Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range batches {
		if err := stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: b}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("stream ended with %v, want a clean end", err)
		}
	}
}

func waitPID(t *testing.T, got chan gotMsg, id string) {
	t.Helper()
	select {
	case m := <-got:
		if m.key != id {
			t.Fatalf("probe got %+v, want the Row %q", m, id)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("probe did not get %q", id)
	}
}
