package remoting

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/messages"
)

// TestBufferPool: Get(n) has length n in the smallest tier that holds
// it, and a buffer put back serves the next Get of its tier.
func TestBufferPool(t *testing.T) {
	p := newBufferPool()
	for _, n := range []int{0, 1, 256, 257, 4096, 100 << 10, 1 << 20, 4 << 20, 4<<20 + 1} {
		b := p.Get(n)
		want := 256
		for want < n {
			want *= 2
		}
		if len(*b) != n || n <= 4<<20 && cap(*b) != want || n > 4<<20 && cap(*b) < n {
			t.Fatalf("Get(%d): len %d cap %d, want len %d cap %d", n, len(*b), cap(*b), n, want)
		}
		p.Put(b)
	}
	// Refilled: sync.Pool may drop what it holds, so only what a Get
	// returns is checked.
	b := p.Get(3000)
	(*b)[0] = 7
	p.Put(b)
	if c := p.Get(3500); len(*c) != 3500 || cap(*c) != 4096 {
		t.Fatalf("Get(3500) after a Put of a 4 KiB buffer: len %d cap %d", len(*c), cap(*c))
	}
}

// TestProtoCodecRoundTrip: a message above gRPC's pooling threshold and
// a small one come back equal through the codec, with the pool's buffers
// reused in between.
func TestProtoCodecRoundTrip(t *testing.T) {
	c := protoCodec{pool: newBufferPool()}
	for _, n := range []int{10, 300 << 10} {
		for round := range 3 {
			in := &messages.RowBatch{RequestId: "r", Seq: uint64(round + 1), PackedRows: bytes.Repeat([]byte{byte(round + 1)}, n)}
			data, err := c.Marshal(in)
			if err != nil {
				t.Fatal(err)
			}
			out := &messages.RowBatch{}
			if err := c.Unmarshal(data, out); err != nil {
				t.Fatal(err)
			}
			data.Free()
			if !proto.Equal(in, out) {
				t.Fatalf("%d bytes, round %d: the message changed through the codec", n, round)
			}
		}
	}
	if err := c.Unmarshal(nil, struct{}{}); err == nil {
		t.Fatal("Unmarshal into a non-proto value: no error")
	}
}
