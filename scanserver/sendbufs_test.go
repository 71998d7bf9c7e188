package scanserver

import "testing"

// TestSendBufs: a batch's buffer comes back only once the client
// acknowledged that batch or a later one, and never for a client in the
// server's own actor system (it holds the message itself).
func TestSendBufs(t *testing.T) {
	same := func(a, b []byte) bool { return cap(a) > 0 && cap(b) > 0 && &a[:1][0] == &b[:1][0] }
	s := sendBufs{remote: true}
	b1 := s.get(100, 0)
	s.sent(1, append(b1, "rows of batch 1"...))
	b2 := s.get(100, 0)
	if same(b1, b2) {
		t.Fatal("batch 1's buffer reused before any ack")
	}
	s.sent(2, b2)
	if b3 := s.get(100, 1); !same(b3, b1) || len(b3) != 0 {
		t.Fatalf("batch 1's buffer not reused (emptied) after its ack: len %d", len(b3))
	} else {
		s.sent(3, b3)
	}
	if b4 := s.get(100, 1); same(b4, b2) {
		t.Fatal("batch 2's buffer reused after the ack of batch 1 only")
	}
	if b5 := s.get(200, 3); cap(b5) < 200 || same(b5, b2) || same(b5, b1) {
		t.Fatalf("a buffer too small came back for 200 bytes (cap %d)", cap(b5))
	}
	if b6 := s.get(100, 3); !same(b6, b2) && !same(b6, b1) {
		t.Fatal("no spare buffer after the ack of batch 3")
	}
	if len(s.inflight) != 0 || len(s.spare) > maxSpareBufs {
		t.Fatalf("%d in flight, %d spare (max %d)", len(s.inflight), len(s.spare), maxSpareBufs)
	}

	local := sendBufs{}
	l1 := local.get(100, 0)
	local.sent(1, l1)
	if l2 := local.get(100, 1); same(l1, l2) {
		t.Fatal("a local client's buffer reused")
	}
}
