package bus

import (
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/messages"
)

// FuzzSubscribe: any bytes published on a heartbeat, busy, timeout or
// meta-changed subject reach the subscriber as the message they decode
// to, or are counted as undecodable (DecodeErrors) or, for a signal
// whose host and server are not its subject's, as mismatched
// (MismatchedSignals) and dropped; nothing panics and every payload is
// accounted for. The path is the real one: a
// raw NATS publish to an embedded server, the subscription's decoding.
// `go test -fuzz FuzzSubscribe -run '^$' ./bus/` explores.
func FuzzSubscribe(f *testing.F) {
	srv := startServer(f)
	sub := connect(f, srv)
	pub := connect(f, srv)
	var (
		mu        sync.Mutex
		delivered int
		last      proto.Message
	)
	got := func(m proto.Message) {
		mu.Lock()
		delivered++
		last = m
		mu.Unlock()
	}
	s1, err := sub.SubscribeHeartbeats(func(h *messages.Heartbeat) { got(h) })
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s1.Close() })
	s2, err := sub.SubscribeSignals(func(_ SignalKind, s *messages.LoadSignal) { got(s) })
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s2.Close() })
	s3, err := sub.SubscribeMetaChanged(func(m *messages.TableMeta) { got(m) })
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s3.Close() })
	// The server must have the subscriptions before the first publish
	// from the other connection, or that message has no subscriber.
	if err := sub.nc.Flush(); err != nil {
		f.Fatal(err)
	}

	hb, _ := proto.Marshal(&messages.Heartbeat{Host: "h", Server: "h:1/0", Pid: &messages.Pid{Address: "h:1", Id: "s"}, Workers: 4})
	sig, _ := proto.Marshal(&messages.LoadSignal{Host: "h", Server: "h:1/0", QueueLen: 3})
	// Of the subject's host and server (fuzz, s): delivered.
	hbOwn, _ := proto.Marshal(&messages.Heartbeat{Host: "fuzz", Server: "s", Workers: 4})
	sigOwn, _ := proto.Marshal(&messages.LoadSignal{Host: "fuzz", Server: "s", QueueLen: 3})
	meta, _ := proto.Marshal(&messages.TableMeta{Name: "t", Generation: 2, SplitPoints: [][]byte{[]byte("m")}})
	for kind := uint8(0); kind < 4; kind++ {
		f.Add(kind, hb)
		f.Add(kind, sig)
		f.Add(kind, hbOwn)
		f.Add(kind, sigOwn)
		f.Add(kind, meta)
		f.Add(kind, []byte{})
		f.Add(kind, []byte{0xff, 0xff, 0xff})
		f.Add(kind, []byte{0x0a, 0x80, 0x80, 0x80, 0x80, 0x10})
	}
	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		if len(data) > 512<<10 {
			return // NATS's payload limit is 1 MiB; stay well under it
		}
		var subject string
		var want proto.Message
		switch kind % 4 {
		case 0:
			subject, want = HeartbeatSubject("fuzz", "s"), &messages.Heartbeat{}
		case 1:
			subject, want = BusySubject("fuzz", "s"), &messages.LoadSignal{}
		case 2:
			subject, want = TimeoutSubject("fuzz", "s"), &messages.LoadSignal{}
		case 3:
			subject, want = MetaChangedSubject, &messages.TableMeta{}
		}
		decodes := proto.Unmarshal(data, want) == nil
		deliverable := decodes
		if p, ok := want.(interface{ GetHost() string }); ok && decodes {
			s := want.(interface{ GetServer() string })
			deliverable = CheckSignalSubject(subject, p.GetHost(), s.GetServer()) == nil
		}
		mu.Lock()
		before := delivered
		mu.Unlock()
		errsBefore := sub.DecodeErrors() + sub.MismatchedSignals()
		if err := pub.nc.Publish(subject, data); err != nil {
			t.Fatal(err)
		}
		if err := pub.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		var d int
		var m proto.Message
		var e uint64
		if !testutil.Poll(30*time.Second, func() bool {
			mu.Lock()
			d, m = delivered, last
			mu.Unlock()
			e = sub.DecodeErrors() + sub.MismatchedSignals()
			return d+int(e) > before+int(errsBefore)
		}) {
			t.Fatalf("%q on %s: neither delivered nor counted as undecodable or mismatched within 30s", data, subject)
		}
		if deliverable != (d > before) || (d > before && !proto.Equal(m, want)) {
			t.Fatalf("%q on %s: decodes=%v deliverable=%v, delivered %v (+%d), decode errors and mismatches +%d", data, subject, decodes, deliverable, m, d-before, e-errsBefore)
		}
	})
}
