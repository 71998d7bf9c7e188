package remoting

import (
	"unicode/utf8"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Receiving without copying the envelopes' bodies.
//
// protoactor's remote sends every actor message between two processes as
// an envelope of a MessageBatch, its body (message_data) a serialized
// message. proto.Unmarshal copies every bytes field, so decoding a batch
// with it copies every body into fresh memory before protoactor's reader
// deserializes that body (another unmarshal, which copies what the actor
// message keeps). decodeRemoteMessage decodes a MessageBatch with the
// bodies pointing into the receive buffer instead, and aliasingStream
// keeps that buffer out of the pool until the reader asks for the next
// message or the stream ends.
//
// That is safe because protoactor's reader (remote.endpointReader at the
// version in go.mod) handles a message completely before its next Recv
// and keeps no reference into a body: for each envelope it deserializes
// the body synchronously (the proto serializer with proto.Unmarshal, the
// JSON serializer through encoding/json or string(body), both copies) and
// sends the result on; ConnectRequest and the other message types carry no
// body, and decodeRemoteMessage leaves them to proto.Unmarshal. The Guard
// (guard.go) reads bodies in place and copies what it keeps (strings).
// Everything else decodeRemoteMessage returns (type names, PIDs, headers)
// is a copy, as proto.Unmarshal makes it: actors keep sender PIDs.

// decodeRemoteMessage decodes data into m as proto.Unmarshal does, except
// that the message_data of a MessageBatch's envelopes are sub-slices of
// data (capacity cut at their end) instead of copies. It reports whether
// any envelope points into data. What its fast path does not decode
// exactly as protobuf would (another message type than a batch, unknown
// fields, a field of an unexpected wire type, a malformed PID or header,
// bytes that are not well-formed) goes to proto.Unmarshal, which copies,
// and whose error is returned.
func decodeRemoteMessage(data []byte, m *remote.RemoteMessage) (aliased bool, err error) {
	if b, ok := decodeBatchMessage(data); ok {
		m.Reset()
		m.MessageType = &remote.RemoteMessage_MessageBatch{MessageBatch: b}
		for _, e := range b.Envelopes {
			if len(e.MessageData) > 0 {
				return true, nil
			}
		}
		return false, nil
	}
	return false, proto.Unmarshal(data, m)
}

// Field numbers of remote.proto.
const (
	fieldRemoteMessageBatch = 1

	fieldBatchTypeNames = 1
	fieldBatchTargets   = 2
	fieldBatchEnvelopes = 3
	fieldBatchSenders   = 4

	fieldEnvTypeID          = 1
	fieldEnvMessageData     = 2
	fieldEnvTarget          = 3
	fieldEnvSender          = 4
	fieldEnvSerializerID    = 5
	fieldEnvMessageHeader   = 6
	fieldEnvTargetRequestID = 7
	fieldEnvSenderRequestID = 8
)

// decodeBatchMessage decodes a RemoteMessage that is exactly one
// message_batch field; ok is false for anything else.
func decodeBatchMessage(data []byte) (b *remote.MessageBatch, ok bool) {
	num, typ, n := protowire.ConsumeTag(data)
	if n < 0 || num != fieldRemoteMessageBatch || typ != protowire.BytesType {
		return nil, false
	}
	body, m := protowire.ConsumeBytes(data[n:])
	if m < 0 || n+m != len(data) {
		return nil, false
	}
	return decodeBatch(body)
}

// decodeBatch decodes a MessageBatch in two passes: the first checks the
// tags and counts each repeated field, so the second fills slices of the
// right length.
func decodeBatch(data []byte) (*remote.MessageBatch, bool) {
	var count [fieldBatchSenders + 1]int
	for rest := data; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 || typ != protowire.BytesType || num < fieldBatchTypeNames || num > fieldBatchSenders {
			return nil, false
		}
		_, m := protowire.ConsumeBytes(rest[n:])
		if m < 0 {
			return nil, false
		}
		count[num]++
		rest = rest[n+m:]
	}
	b := &remote.MessageBatch{}
	if c := count[fieldBatchTypeNames]; c > 0 {
		b.TypeNames = make([]string, 0, c)
	}
	pids := make([]actor.PID, count[fieldBatchTargets]+count[fieldBatchSenders])
	if c := count[fieldBatchTargets]; c > 0 {
		b.Targets = make([]*actor.PID, 0, c)
	}
	if c := count[fieldBatchSenders]; c > 0 {
		b.Senders = make([]*actor.PID, 0, c)
	}
	var envs []remote.MessageEnvelope
	if c := count[fieldBatchEnvelopes]; c > 0 {
		envs = make([]remote.MessageEnvelope, c)
		b.Envelopes = make([]*remote.MessageEnvelope, 0, c)
	}
	for rest := data; len(rest) > 0; {
		// The first pass checked every tag and length.
		num, _, n := protowire.ConsumeTag(rest)
		v, m := protowire.ConsumeBytes(rest[n:])
		rest = rest[n+m:]
		switch num {
		case fieldBatchTypeNames:
			if !utf8.Valid(v) {
				return nil, false // proto.Unmarshal refuses it
			}
			b.TypeNames = append(b.TypeNames, string(v))
		case fieldBatchTargets, fieldBatchSenders:
			pid := &pids[0]
			pids = pids[1:]
			if proto.Unmarshal(v, pid) != nil {
				return nil, false
			}
			if num == fieldBatchTargets {
				b.Targets = append(b.Targets, pid)
			} else {
				b.Senders = append(b.Senders, pid)
			}
		case fieldBatchEnvelopes:
			e := &envs[len(b.Envelopes)]
			if !decodeEnvelope(v, e) {
				return nil, false
			}
			b.Envelopes = append(b.Envelopes, e)
		}
	}
	return b, true
}

// decodeEnvelope decodes a MessageEnvelope into the zero e, message_data
// pointing into data. Of a field that occurs more than once the last
// occurrence counts, and occurrences of message_header are merged, as in
// proto.Unmarshal.
func decodeEnvelope(data []byte, e *remote.MessageEnvelope) bool {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return false
		}
		data = data[n:]
		switch num {
		case fieldEnvTypeID, fieldEnvTarget, fieldEnvSender, fieldEnvSerializerID, fieldEnvTargetRequestID, fieldEnvSenderRequestID:
			if typ != protowire.VarintType {
				return false
			}
			v, m := protowire.ConsumeVarint(data)
			if m < 0 {
				return false
			}
			data = data[m:]
			switch num {
			case fieldEnvTypeID:
				e.TypeId = int32(v)
			case fieldEnvTarget:
				e.Target = int32(v)
			case fieldEnvSender:
				e.Sender = int32(v)
			case fieldEnvSerializerID:
				e.SerializerId = int32(v)
			case fieldEnvTargetRequestID:
				e.TargetRequestId = uint32(v)
			case fieldEnvSenderRequestID:
				e.SenderRequestId = uint32(v)
			}
		case fieldEnvMessageData, fieldEnvMessageHeader:
			if typ != protowire.BytesType {
				return false
			}
			v, m := protowire.ConsumeBytes(data)
			if m < 0 {
				return false
			}
			data = data[m:]
			if num == fieldEnvMessageData {
				e.MessageData = nil
				if len(v) > 0 {
					e.MessageData = v[:len(v):len(v)]
				}
				continue
			}
			if e.MessageHeader == nil {
				e.MessageHeader = &remote.MessageHeader{}
			}
			if (proto.UnmarshalOptions{Merge: true}).Unmarshal(v, e.MessageHeader) != nil {
				return false
			}
		default:
			return false // unknown to this decoder: proto.Unmarshal keeps it
		}
	}
	return true
}
