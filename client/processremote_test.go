package client

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/scanplane/scanplane/internal/clientsys"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/messages"
)

// TestClientsShareTheProcessRemote: two clients of one process that
// start their own actor systems share one remote, started once, while
// the first one's gRPC is at work (asking a coordinator address where
// nobody listens): a second remote start would rewrite gRPC's logger
// under it, which the race detector reports. The remote keeps
// listening while either client runs and stops with the last.
func TestClientsShareTheProcessRemote(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NATSURL = startNATS(t)
	cfg.Coordinators = []string{"127.0.0.1:5"}
	cfg.RequestTimeout = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := func() *Client {
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := start()
	busy, stopBusy := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for busy.Err() == nil {
			_, _ = a.Status(busy)
		}
	}()
	b := start()
	stopBusy()
	<-done
	if a.sys != b.sys {
		t.Fatal("two clients of one process started two actor remotes")
	}
	addr := a.sys.Address()
	dial := func() error {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
		}
		return err
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := dial(); err != nil {
		t.Fatalf("the remote stopped with one of its two clients: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the remote stops with its last client", func() bool { return dial() != nil })
	again := start()
	defer again.Close()
	if again.sys == a.sys {
		t.Fatal("a client started after every other closed reuses a stopped remote")
	}
}

// TestRemoteStartsAfterALateStop: a remote whose stop outlasts the wait
// of its last client's Close goes on stopping; its endpoints read gRPC's
// logger as they close their connections, and a remote started meanwhile
// rewrites it (the race detector reports that). So the next start waits
// for that stop to end first.
func TestRemoteStartsAfterALateStop(t *testing.T) {
	cfg := DefaultConfig()
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pr, err := acquireRemote(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	// An endpoint with a gRPC connection, to an address where nobody
	// listens; released without a wait, the remote stops in the
	// background.
	pr.sys.Root.Send(actor.NewPID("127.0.0.1:5", "nobody"), &messages.Cancel{RequestId: "r"})
	pr.release(cfg, 0, log)
	again, err := acquireRemote(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer again.release(cfg, closeWait, log)
	if again == pr {
		t.Fatal("a stopped remote was handed out again")
	}
}

// TestClientOnTheProcessSystem: a client started with a system of the
// process's own (internal/clientsys) runs its endpoint on that system,
// not on the shared remote, and leaves it running when it closes.
func TestClientOnTheProcessSystem(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NATSURL = startNATS(t)
	cfg.Coordinators = []string{"127.0.0.1:5"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sys := sharedSystem(t)
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(clientsys.WithSystem(ctx, sys)); err != nil {
		t.Fatal(err)
	}
	if c.sys != sys || c.shared != nil || c.self().GetAddress() != sys.Address() {
		t.Fatalf("client on %s (shared %v), want the given system %s", c.self().GetAddress(), c.shared != nil, sys.Address())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", sys.Address(), 5*time.Second)
	if err != nil {
		t.Fatalf("the given system stopped with the client: %v", err)
	}
	conn.Close()
}
