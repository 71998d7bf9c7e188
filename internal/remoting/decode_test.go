package remoting

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// randomRemoteMessage is a RemoteMessage as protoactor's endpoint writer
// makes them, with every field of a batch, its envelopes and headers
// drawn at random (negative and large values included); one in ten is
// another message type.
func randomRemoteMessage(rng *rand.Rand) *remote.RemoteMessage {
	switch rng.IntN(20) {
	case 0:
		return connectMsg(fmt.Sprintf("127.0.0.1:%d", rng.IntN(65536)))
	case 1:
		return &remote.RemoteMessage{MessageType: &remote.RemoteMessage_DisconnectRequest{DisconnectRequest: &remote.DisconnectRequest{}}}
	}
	str := func(n int) string {
		b := make([]byte, rng.IntN(n+1))
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
		}
		if rng.IntN(8) == 0 && len(b) > 0 {
			return string(b) + "é"
		}
		return string(b)
	}
	i32 := func() int32 {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return -rng.Int32N(math.MaxInt32) - 1
		case 2:
			return rng.Int32()
		}
		return rng.Int32N(8)
	}
	pid := func() *actor.PID {
		return &actor.PID{Address: str(20), Id: str(12), RequestId: uint32(rng.IntN(3)) * rng.Uint32()}
	}
	b := &remote.MessageBatch{}
	for range rng.IntN(4) {
		b.TypeNames = append(b.TypeNames, str(40))
	}
	for range rng.IntN(4) {
		b.Targets = append(b.Targets, pid())
	}
	for range rng.IntN(4) {
		b.Senders = append(b.Senders, pid())
	}
	for range rng.IntN(12) {
		e := &remote.MessageEnvelope{TypeId: i32(), Target: i32(), Sender: i32(), SerializerId: i32(),
			TargetRequestId: uint32(rng.IntN(2)) * rng.Uint32(), SenderRequestId: uint32(rng.IntN(2)) * rng.Uint32()}
		if n := rng.IntN(3); n > 0 {
			e.MessageData = make([]byte, rng.IntN(n*1000))
			for i := range e.MessageData {
				e.MessageData[i] = byte(rng.Uint32())
			}
		}
		if rng.IntN(3) == 0 {
			e.MessageHeader = &remote.MessageHeader{}
			for range rng.IntN(3) {
				if e.MessageHeader.HeaderData == nil {
					e.MessageHeader.HeaderData = map[string]string{}
				}
				e.MessageHeader.HeaderData[str(8)] = str(16)
			}
		}
		b.Envelopes = append(b.Envelopes, e)
	}
	return &remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: b}}
}

// checkDecode fails unless decodeRemoteMessage(data) fails exactly when
// proto.Unmarshal does and gives a message proto.Equal to
// proto.Unmarshal's, whose bodies all point into data with no room to
// grow past their end when it reports aliasing, and none does when it
// does not. It returns whether bodies point into data.
func checkDecode(t testing.TB, data []byte) (aliased bool) {
	t.Helper()
	want := &remote.RemoteMessage{}
	wantErr := proto.Unmarshal(data, want)
	got := randomRemoteMessage(rand.New(rand.NewPCG(uint64(len(data)), 1))) // decoding resets it
	aliased, err := decodeRemoteMessage(data, got)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("decodeRemoteMessage(%x): error %v, proto.Unmarshal: %v", data, err, wantErr)
	}
	if err != nil {
		return false
	}
	if !proto.Equal(got, want) {
		t.Fatalf("decodeRemoteMessage(%x) =\n%v\nproto.Unmarshal:\n%v", data, got, want)
	}
	for _, e := range got.GetMessageBatch().GetEnvelopes() {
		d := e.GetMessageData()
		if len(d) == 0 {
			continue
		}
		if in := within(d, data); in != aliased || in && cap(d) != len(d) {
			t.Fatalf("aliased %v: an envelope body of %d bytes (cap %d) inside the %d bytes decoded: %v", aliased, len(d), cap(d), len(data), in)
		}
	}
	return aliased
}

// within reports whether sub lies inside data's memory.
func within(sub, data []byte) bool {
	if len(data) == 0 {
		return false
	}
	s, d := uintptr(unsafe.Pointer(unsafe.SliceData(sub))), uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	return s >= d && s+uintptr(len(sub)) <= d+uintptr(len(data))
}

// wireCases are encodings protoactor does not write but protobuf reads:
// fields repeated or out of order, unknown fields, other wire types,
// non-minimal varints, bad UTF-8, truncation.
func wireCases() [][]byte {
	tag := protowire.AppendTag
	bytesField := func(b []byte, num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(tag(b, num, protowire.BytesType), v)
	}
	varint := func(b []byte, num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(tag(b, num, protowire.VarintType), v)
	}
	batch := func(body []byte) []byte { return bytesField(nil, 1, body) }
	pid, _ := proto.Marshal(&actor.PID{Address: "a:1", Id: "x"})
	hdr1, _ := proto.Marshal(&remote.MessageHeader{HeaderData: map[string]string{"k": "1", "j": "2"}})
	hdr2, _ := proto.Marshal(&remote.MessageHeader{HeaderData: map[string]string{"k": "3"}})

	var env []byte
	env = varint(env, 1, 2)
	env = bytesField(env, 2, []byte("first"))
	env = varint(env, 3, 1<<40|5) // int32 of a wider varint: truncated
	env = bytesField(env, 6, hdr1)
	env = bytesField(env, 2, []byte("second body"))
	env = bytesField(env, 6, hdr2) // merged with the first header
	env = varint(env, 5, math.MaxUint64)
	env = append(tag(env, 7, protowire.VarintType), 0x81, 0x80, 0x80, 0x00) // non-minimal
	env = varint(env, 8, 9)

	cases := [][]byte{
		nil,
		batch(nil),
		batch(bytesField(nil, 3, nil)),
		batch(bytesField(bytesField(bytesField(bytesField(nil, 1, []byte("t")), 3, env), 2, pid), 4, pid)),
		batch(bytesField(bytesField(nil, 3, env), 3, bytesField(env, 2, nil))),                    // last body empty
		append(batch(bytesField(nil, 3, env)), batch(bytesField(nil, 3, env))...),                 // two batches: merged
		append(batch(bytesField(nil, 3, env)), bytesField(nil, 4, nil)...),                        // then another type
		append(batch(bytesField(nil, 3, env)), varint(nil, 9, 1)...),                              // unknown field
		batch(bytesField(nil, 3, varint(env, 99, 1))),                                             // unknown envelope field
		batch(bytesField(nil, 3, protowire.AppendFixed32(tag(nil, 1, protowire.Fixed32Type), 7))), // type id as fixed32
		batch(bytesField(nil, 3, varint(nil, 2, 7))),                                              // body as a varint
		batch(varint(nil, 1, 7)),                                          // type name as a varint
		batch(bytesField(nil, 5, nil)),                                    // unknown batch field
		batch(bytesField(nil, 1, []byte{0xff, 0xfe})),                     // not UTF-8
		batch(bytesField(nil, 2, []byte{0xff})),                           // malformed PID
		batch(bytesField(nil, 3, bytesField(nil, 6, []byte{0x0a, 0x05}))), // malformed header
		batch(bytesField(nil, 3, bytesField(nil, 6, nil))),                // empty header
		batch(bytesField(nil, 3, append(tag(nil, 1, protowire.VarintType), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01))), // varint overflow
		batch(bytesField(nil, 3, tag(nil, 0, protowire.VarintType))),                                                                           // field number 0
		batch(bytesField(nil, 3, tag(nil, 3, protowire.EndGroupType))),                                                                         // stray end group
	}
	whole := batch(bytesField(bytesField(nil, 1, []byte("t")), 3, env))
	for i := range whole {
		cases = append(cases, whole[:i]) // truncated
	}
	return cases
}

// TestDecodeRemoteMessageAsProto: on random batches as protoactor writes
// them, on every wire case, and on random corruptions of both, the decoder
// gives what proto.Unmarshal gives (or an error where it does), with the
// bodies pointing into the input.
func TestDecodeRemoteMessageAsProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	inputs := wireCases()
	for _, i := range []int{3, 4} { // fields repeated and out of order: decoded in place
		if !checkDecode(t, inputs[i]) {
			t.Fatalf("wire case %d: bodies copied, want them in place", i)
		}
	}
	for range 500 {
		m := randomRemoteMessage(rng)
		data, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		bodies := false
		for _, e := range m.GetMessageBatch().GetEnvelopes() {
			bodies = bodies || len(e.MessageData) > 0
		}
		if checkDecode(t, data) != bodies {
			t.Fatalf("a batch as protoactor writes it, bodies %v: aliased %v", bodies, !bodies)
		}
		inputs = append(inputs, data)
	}
	for _, data := range inputs {
		checkDecode(t, data)
		for range 8 {
			if len(data) == 0 {
				break
			}
			bad := bytes.Clone(data)
			switch rng.IntN(3) {
			case 0:
				bad[rng.IntN(len(bad))] ^= byte(1 + rng.IntN(255))
			case 1:
				bad = bad[:rng.IntN(len(bad))]
			case 2:
				bad[rng.IntN(len(bad))] = 0xff
			}
			checkDecode(t, bad)
		}
	}
}

// FuzzDecodeRemoteMessage: any input decodes as proto.Unmarshal decodes it
// or fails where it fails, without a panic, and bodies stay inside the
// input.
func FuzzDecodeRemoteMessage(f *testing.F) {
	for _, c := range wireCases() {
		f.Add(c)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		data, err := proto.Marshal(randomRemoteMessage(rng))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
	})
}
