package remoting

import (
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// bufferPool is the gRPC buffer pool of the transport (mem.BufferPool):
// buffers in power-of-two tiers from 256 B to 4 MiB, not cleared on Get.
// gRPC's default pool clears every buffer it hands out, to its whole
// capacity, and its tiers jump from 32 KiB to 1 MiB: a row batch of
// 100-300 KiB cost the clearing of 1 MiB on each side. gRPC fills every
// byte of a buffer it uses (it reads a frame or marshals a message into
// exactly the length it asks for), so nothing stale is ever read.
// Buffers larger than the top tier are allocated and dropped. Safe for
// concurrent use.
type bufferPool struct {
	tiers [bufTiers]sync.Pool
}

const (
	bufMinShift = 8  // 256 B
	bufMaxShift = 22 // 4 MiB
	bufTiers    = bufMaxShift - bufMinShift + 1
)

var _ mem.BufferPool = (*bufferPool)(nil)

func newBufferPool() *bufferPool { return &bufferPool{} }

// tier is the index of the smallest tier that holds n bytes (n <= 4 MiB).
func bufTier(n int) int {
	if n <= 1<<bufMinShift {
		return 0
	}
	return bits.Len(uint(n-1)) - bufMinShift
}

// Get returns a buffer of length n.
func (p *bufferPool) Get(n int) *[]byte {
	if n > 1<<bufMaxShift {
		b := make([]byte, n)
		return &b
	}
	t := bufTier(n)
	if b, ok := p.tiers[t].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<(t+bufMinShift))
	return &b
}

// Put returns a buffer that Get handed out; others are dropped.
func (p *bufferPool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<bufMinShift || c > 1<<bufMaxShift || c&(c-1) != 0 {
		return
	}
	*b = (*b)[:0]
	p.tiers[bufTier(c)].Put(b)
}

// protoCodec is gRPC's proto codec (encoding/proto) over a pool of its
// own: gRPC's codec takes its buffers from the process-wide default
// pool, which clears them (see bufferPool).
type protoCodec struct{ pool mem.BufferPool }

var _ encoding.CodecV2 = protoCodec{}

// Name is the codec's content subtype, the same as gRPC's own proto codec:
// the bytes on the wire are the same.
func (protoCodec) Name() string { return "proto" }

// Marshal encodes v into one buffer of the pool (a small message into a
// buffer of its own, as gRPC's codec does).
func (c protoCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("remoting: cannot marshal %T: not a proto.Message", v)
	}
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true} // the size was just computed
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := c.pool.Get(size)
	if _, err := opts.MarshalAppend((*buf)[:0], m); err != nil {
		c.pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, c.pool)}, nil
}

// Unmarshal decodes data into v (which copies what it keeps), or, for
// the *aliasedRecv of an aliasingStream, into its message with the
// envelopes' bodies pointing into the buffer it hands over (recv.go).
func (c protoCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*aliasedRecv); ok {
		buf := data.MaterializeToBuffer(c.pool)
		aliased, err := decodeRemoteMessage(buf.ReadOnlyData(), r.msg)
		if err != nil || !aliased {
			buf.Free()
			return err
		}
		r.buf = buf
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("remoting: cannot unmarshal into %T: not a proto.Message", v)
	}
	buf := data.MaterializeToBuffer(c.pool)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}
