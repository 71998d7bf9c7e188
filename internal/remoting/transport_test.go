package remoting

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/messages"
)

// TestLargeMessageBatch: protoactor's endpoint writer sends every message
// queued for a peer as one gRPC message, so row batches queued behind flow
// control arrive together, well over gRPC's default 4 MiB limit; the
// server takes them all and the stream ends cleanly.
func TestLargeMessageBatch(t *testing.T) {
	sys, _, got, addr := guardedRemoteWith(t, nil)
	probe := actor.NewPID(sys.Address(), "probe")
	conn := dial(t, addr)
	const n = 24 // 24 × 256 KiB = 6 MiB
	var msgs []proto.Message
	for i := range n {
		msgs = append(msgs, &messages.Row{Key: fmt.Appendf(nil, "k%02d", i), Value: bytes.Repeat([]byte{'v'}, 256<<10)})
	}
	msgs = append(msgs, &messages.Row{Key: []byte("marker")})
	sendStream(t, conn, "127.0.0.1:7000", batchOf(probe, msgs...))
	if rows := collectUntil(t, got, "marker"); len(rows) != n {
		t.Fatalf("got %d rows before the marker, want %d", len(rows), n)
	}
}
