package natsserver_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/messages"
)

// TestNATSHeartbeatHostBound: the certificate of host h1 may publish
// only on h1's subjects (the server's permissions), and a heartbeat or
// busy signal it publishes there whose payload names h2 is dropped by
// the subscriber (and counted): the coordinator sees only h1's own.
func TestNATSHeartbeatHostBound(t *testing.T) {
	srv, dir := secureServer(t, "h1", "h2")
	coord := roleConn(t, srv, dir, "coordinator")
	hbs := heartbeats(t, coord)
	sigs := make(chan *messages.LoadSignal, 16)
	ssub, err := coord.SubscribeSignals(func(_ bus.SignalKind, s *messages.LoadSignal) { sigs <- s })
	if err != nil {
		t.Fatal(err)
	}
	defer ssub.Close()
	if err := coord.NATS().Flush(); err != nil {
		t.Fatal(err)
	}

	h1 := roleConn(t, srv, dir, secrets.ServerRole("h1"))
	forge := func(subject string, m proto.Message) {
		t.Helper()
		data, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := h1.NATS().Publish(subject, data); err != nil {
			t.Fatal(err)
		}
	}
	// On h1's own subjects (the server lets them through), payloads of h2.
	forge(bus.HeartbeatSubject("h1", "s"), &messages.Heartbeat{Host: "h2", Server: "s"})
	forge(bus.BusySubject("h1", "s"), &messages.LoadSignal{Host: "h2", Server: "s"})
	// Then h1's own.
	if err := h1.PublishHeartbeat(&messages.Heartbeat{Host: "h1", Server: "s"}); err != nil {
		t.Fatal(err)
	}
	if err := h1.PublishSignal(bus.SignalBusy, &messages.LoadSignal{Host: "h1", Server: "s"}); err != nil {
		t.Fatal(err)
	}
	if err := h1.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := h1.NATS().LastError(); err != nil {
		t.Fatalf("h1 publishing on its own subjects: %v", err)
	}
	select {
	case h := <-hbs:
		if h.GetHost() != "h1" {
			t.Fatalf("coordinator got a heartbeat of %q from h1's certificate first, want h1's own", h.GetHost())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("h1's heartbeat did not arrive")
	}
	select {
	case s := <-sigs:
		if s.GetHost() != "h1" {
			t.Fatalf("coordinator got a busy signal of %q from h1's certificate first, want h1's own", s.GetHost())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("h1's busy signal did not arrive")
	}
	if n := coord.MismatchedSignals(); n != 2 {
		t.Fatalf("MismatchedSignals = %d, want the 2 forged", n)
	}
}
