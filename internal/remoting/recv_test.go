package remoting

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/messages"
)

// poisonPool is a bufferPool that overwrites every buffer put back with
// poison, so that a reader of a freed buffer sees it, and counts the
// buffers out.
type poisonPool struct {
	p   *bufferPool
	mu  sync.Mutex
	out int
}

const poison = 0xA5

func newPoisonPool() *poisonPool { return &poisonPool{p: newBufferPool()} }

func (p *poisonPool) Get(n int) *[]byte {
	p.mu.Lock()
	p.out++
	p.mu.Unlock()
	return p.p.Get(n)
}

func (p *poisonPool) Put(b *[]byte) {
	full := (*b)[:cap(*b)]
	for i := range full {
		full[i] = poison
	}
	p.mu.Lock()
	p.out--
	p.mu.Unlock()
	p.p.Put(b)
}

func (p *poisonPool) outstanding() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out
}

// codecStream is a server stream that receives each of msgs as gRPC
// does: the message in pooled buffers (two, so the codec materializes it
// into a third), decoded by the codec, its buffers freed after, then
// io.EOF.
type codecStream struct {
	grpc.ServerStream
	codec protoCodec
	pool  mem.BufferPool
	msgs  [][]byte
}

func (s *codecStream) RecvMsg(m any) error {
	if len(s.msgs) == 0 {
		return io.EOF
	}
	data := s.msgs[0]
	s.msgs = s.msgs[1:]
	half := len(data) / 2
	var in mem.BufferSlice
	for _, part := range [][]byte{data[:half], data[half:]} {
		b := s.pool.Get(len(part))
		copy(*b, part)
		in = append(in, mem.NewBuffer(b, s.pool))
	}
	defer in.Free()
	return s.codec.Unmarshal(in, m)
}

// rowBatchMessage is a RemoteMessage of n RowBatch envelopes to the probe
// at addr, batch i's packed rows size bytes of byte(seq+i).
func rowBatchMessage(addr string, seq, n, size int) *remote.RemoteMessage {
	b := &remote.MessageBatch{TypeNames: []string{"scanplane.internal.v1.RowBatch"}, Targets: []*actor.PID{{Address: addr, Id: "probe"}}}
	for i := range n {
		data, err := proto.Marshal(&messages.RowBatch{Seq: uint64(seq*n + i), PackedRows: bytes.Repeat([]byte{byte(seq + i)}, size)})
		if err != nil {
			panic(err)
		}
		b.Envelopes = append(b.Envelopes, &remote.MessageEnvelope{MessageData: data})
	}
	return &remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: b}}
}

// TestAliasingStreamHoldsBufferUntilNextRecv: a received batch's bodies
// point into a receive buffer that stays intact until the receiver asks
// for the next message; the stream holds one buffer at a time and none
// once the handler has returned.
func TestAliasingStreamHoldsBufferUntilNextRecv(t *testing.T) {
	pool := newPoisonPool()
	const size = 4 << 10
	var msgs [][]byte
	for seq := range 5 {
		data, err := proto.Marshal(rowBatchMessage("a:1", seq, 3, size))
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, data)
	}
	ss := &codecStream{codec: protoCodec{pool: pool}, pool: pool, msgs: msgs}
	received := 0
	handler := func(_ any, s grpc.ServerStream) error {
		for seq := 0; ; seq++ {
			m := &remote.RemoteMessage{}
			err := s.RecvMsg(m)
			if err == io.EOF {
				if n := pool.outstanding(); n != 0 {
					t.Errorf("at the end of the stream: %d buffers held, want 0", n)
				}
				return nil
			}
			if err != nil {
				return err
			}
			if n := pool.outstanding(); n != 1 {
				t.Errorf("message %d: %d buffers held, want 1", seq, n)
			}
			envs := m.GetMessageBatch().GetEnvelopes()
			if len(envs) != 3 {
				t.Fatalf("message %d: %d envelopes, want 3", seq, len(envs))
			}
			for i, e := range envs {
				rb := &messages.RowBatch{}
				if err := proto.Unmarshal(e.GetMessageData(), rb); err != nil || !bytes.Equal(rb.PackedRows, bytes.Repeat([]byte{byte(seq + i)}, size)) {
					t.Errorf("message %d envelope %d: body changed before the next RecvMsg (%v)", seq, i, err)
				}
			}
			received++
		}
	}
	if err := recvAliasing(nil, ss, &grpc.StreamServerInfo{}, handler); err != nil {
		t.Fatal(err)
	}
	if n := pool.outstanding(); received != len(msgs) || n != 0 {
		t.Fatalf("%d messages received, %d buffers not freed after the handler returned; want %d, 0", received, n, len(msgs))
	}
}

// TestAliasingStreamFreesOnReturn: a handler that returns before the
// stream ends (protoactor's reader does on a batch it cannot handle)
// leaves no receive buffer held: the stream frees the last one.
func TestAliasingStreamFreesOnReturn(t *testing.T) {
	pool := newPoisonPool()
	var msgs [][]byte
	for seq := range 2 {
		data, err := proto.Marshal(rowBatchMessage("a:1", seq, 2, 4<<10))
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, data)
	}
	ss := &codecStream{codec: protoCodec{pool: pool}, pool: pool, msgs: msgs}
	errStop := errors.New("stop after the first message")
	handler := func(_ any, s grpc.ServerStream) error {
		if err := s.RecvMsg(&remote.RemoteMessage{}); err != nil {
			return err
		}
		if n := pool.outstanding(); n != 1 {
			t.Errorf("after the first message: %d buffers held, want 1", n)
		}
		return errStop
	}
	if err := recvAliasing(nil, ss, &grpc.StreamServerInfo{}, handler); !errors.Is(err, errStop) {
		t.Fatalf("recvAliasing: %v, want the handler's error", err)
	}
	if n := pool.outstanding(); n != 0 {
		t.Fatalf("%d buffers held after the handler returned mid-stream, want 0", n)
	}
}

// TestAliasingStreamMalformedMessage: a message that does not decode
// fails RecvMsg and leaves no receive buffer held, neither its own nor
// the previous message's.
func TestAliasingStreamMalformedMessage(t *testing.T) {
	pool := newPoisonPool()
	data, err := proto.Marshal(rowBatchMessage("a:1", 0, 2, 4<<10))
	if err != nil {
		t.Fatal(err)
	}
	ss := &codecStream{codec: protoCodec{pool: pool}, pool: pool, msgs: [][]byte{data, data[:len(data)-1]}}
	var recvErr error
	handler := func(_ any, s grpc.ServerStream) error {
		if err := s.RecvMsg(&remote.RemoteMessage{}); err != nil {
			return err
		}
		recvErr = s.RecvMsg(&remote.RemoteMessage{})
		if n := pool.outstanding(); n != 0 {
			t.Errorf("after a message that does not decode: %d buffers held, want 0", n)
		}
		return recvErr
	}
	if err := recvAliasing(nil, ss, &grpc.StreamServerInfo{}, handler); err == nil || err != recvErr {
		t.Fatalf("recvAliasing: %v, want the error of the truncated message", err)
	}
}

// TestCodecUnmarshalAliases: decoding a received batch of row batches
// allocates no copy of its bodies: a few allocations, whatever the number
// of envelopes, and a few hundred bytes, whatever their size.
func TestCodecUnmarshalAliases(t *testing.T) {
	c := protoCodec{pool: &listPool{}}
	data, err := proto.Marshal(rowBatchMessage("127.0.0.1:1", 1, 16, 64<<10))
	if err != nil {
		t.Fatal(err)
	}
	in := mem.BufferSlice{mem.SliceBuffer(data[:len(data)/2]), mem.SliceBuffer(data[len(data)/2:])}
	held := true
	recv := func() {
		r := aliasedRecv{msg: &remote.RemoteMessage{}}
		if err := c.Unmarshal(in, &r); err != nil || len(r.msg.GetMessageBatch().GetEnvelopes()) != 16 {
			t.Fatalf("Unmarshal: %v", err)
		}
		if r.buf == nil {
			held = false
			return
		}
		r.buf.Free()
	}
	recv()
	allocs := testing.AllocsPerRun(50, recv)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const runs = 20
	for range runs {
		recv()
	}
	runtime.ReadMemStats(&after)
	perRun := (after.TotalAlloc - before.TotalAlloc) / runs
	t.Logf("%.0f allocations, %d bytes per message of %d bytes", allocs, perRun, len(data))
	if allocs > 16 || perRun > 4<<10 {
		t.Fatalf("%.0f allocations and %d bytes per message of 16 envelopes, %d bytes: want at most 16 and 4 KiB", allocs, perRun, len(data))
	}
	if !held {
		t.Fatal("no receive buffer held: the bodies are copies")
	}
}

// listPool is a mem.BufferPool that keeps every buffer put back (a
// sync.Pool drops some under the race detector).
type listPool struct {
	mu   sync.Mutex
	free []*[]byte
}

func (p *listPool) Get(n int) *[]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, b := range p.free {
		if cap(*b) >= n {
			p.free = append(p.free[:i], p.free[i+1:]...)
			*b = (*b)[:n]
			return b
		}
	}
	b := make([]byte, n)
	return &b
}

func (p *listPool) Put(b *[]byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free = append(p.free, b)
}

// BenchmarkCodecUnmarshalBatch: the codec's decoding of a received message
// of 16 row batches of 64 KiB, as an aliasingStream asks for it.
func BenchmarkCodecUnmarshalBatch(b *testing.B) {
	c := protoCodec{pool: newBufferPool()}
	data, err := proto.Marshal(rowBatchMessage("127.0.0.1:1", 1, 16, 64<<10))
	if err != nil {
		b.Fatal(err)
	}
	in := mem.BufferSlice{mem.SliceBuffer(data[:len(data)/2]), mem.SliceBuffer(data[len(data)/2:])}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		r := aliasedRecv{msg: &remote.RemoteMessage{}}
		if err := c.Unmarshal(in, &r); err != nil {
			b.Fatal(err)
		}
		if r.buf != nil {
			r.buf.Free()
		}
	}
}

// TestRemoteReceivesFromHeldBuffers: through a real remote whose buffer
// pool poisons every buffer put back, every row batch of many large
// messages reaches its actor intact: protoactor's reader is done with a
// message's bodies before it asks for the next message, and no receive
// buffer is freed before then.
func TestRemoteReceivesFromHeldBuffers(t *testing.T) {
	pool := newPoisonPool()
	quiet := actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) })
	sys := actor.NewActorSystem(quiet)
	tr := NewTracker()
	lim := DefaultRemoteLimits
	lim.MaxMessage = ClientMaxMessage
	rem := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0, transportOptions(nil, NewGuard(nil, sys), lim, pool, tr.ServerOption())...))
	rem.Start()
	t.Cleanup(func() {
		tr.Stop(rem, 10*time.Second)
		sys.Shutdown()
	})
	const msgs, perMsg, size = 40, 8, 32 << 10
	var (
		mu   sync.Mutex
		got  int
		bad  []string
		seen = map[uint64]bool{}
	)
	_, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		rb, ok := c.Message().(*messages.RowBatch)
		if !ok {
			return
		}
		seq, i := int(rb.Seq)/perMsg, int(rb.Seq)%perMsg
		mu.Lock()
		defer mu.Unlock()
		got++
		if seen[rb.Seq] || !bytes.Equal(rb.PackedRows, bytes.Repeat([]byte{byte(seq + i)}, size)) {
			bad = append(bad, fmt.Sprintf("batch %d (%d bytes)", rb.Seq, len(rb.PackedRows)))
		}
		seen[rb.Seq] = true
	}), "probe")
	if err != nil {
		t.Fatal(err)
	}
	conn := dial(t, sys.Address())
	batches := []*remote.RemoteMessage{connectMsg("127.0.0.1:7000")}
	for seq := range msgs {
		batches = append(batches, rowBatchMessage(sys.Address(), seq, perMsg, size))
	}
	sendRaw(t, conn, batches...)
	testutil.Eventually(t, 30*time.Second, "every row batch received", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got == msgs*perMsg
	})
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("%d of %d row batches changed in transit: %v", len(bad), got, bad)
	}
}
