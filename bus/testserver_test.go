package bus

import (
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// testServer is a NATS server with JetStream that package bus's own tests
// run against, started through nats-server's API: the embedded server of
// the coordinator (internal/natsserver) imports bus, so bus's tests cannot
// import it, and the client side needs any NATS server with JetStream, as
// an external cluster (Config.URL) is. bus over the embedded server,
// secured and clustered, is tested in internal/natsserver.
type testServer struct {
	srv       *server.Server
	closeOnce sync.Once
}

// startTestServer starts a standalone server on port (-1: a free one)
// storing JetStream in dir, with the limits the embedded server has by
// default (8 MiB payloads, bus's ping interval), and waits until it accepts
// connections.
func startTestServer(tb testing.TB, port int, dir string) *testServer {
	tb.Helper()
	srv, err := server.NewServer(&server.Options{
		Host:         "127.0.0.1",
		Port:         port,
		JetStream:    true,
		StoreDir:     dir,
		MaxPayload:   8 << 20,
		NoSigs:       true,
		NoLog:        true,
		PingInterval: PingInterval,
		MaxPingsOut:  PingsOut,
	})
	if err != nil {
		tb.Fatalf("nats server: %v", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		tb.Fatalf("nats server on port %d not ready within 10s", port)
	}
	if !srv.JetStreamEnabled() {
		srv.Shutdown()
		tb.Fatalf("nats server: JetStream did not start (store dir %q)", dir)
	}
	return &testServer{srv: srv}
}

// ClientURL is the server's nats:// URL.
func (s *testServer) ClientURL() string {
	return "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.srv.Addr().(*net.TCPAddr).Port))
}

// Close shuts the server down and waits until it has stopped; safe to
// call more than once.
func (s *testServer) Close() {
	s.closeOnce.Do(func() {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
	})
}
