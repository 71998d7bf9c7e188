package coordinator

import (
	"slices"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/internal/testutil/servertest"
	"github.com/scanplane/scanplane/wire"
)

// TestForwardNotDeliveredIsRoutedAgain: a scan request this coordinator
// forwarded to another coordinator's router comes back as a dead letter
// (the owner is gone or restarting): it is routed again here, naming the
// owner among the coordinators to avoid, and the client gets its rows.
// A dead letter of a request forwarded by someone else is left alone.
func TestForwardNotDeliveredIsRoutedAgain(t *testing.T) {
	r := newRig(t, rigOpts{rows: 100, tablets: 1})
	r.addServer("h1", 0, servertest.Default(), nil)
	const owner = "127.0.0.1:1"
	req := r.request(0)
	req.ForwardedBy = r.as.Address()
	s := &rigScan{req: req, done: make(chan struct{})}
	r.as.Root.Send(r.client, &rigStartScan{scan: s, router: r.co.router, to: actor.NewPID(owner, wire.RouterName)})
	r.checkRows(r.wait(s), 0)
	if n := r.co.counters.reforwarded.Load(); n != 1 {
		t.Fatalf("reforwarded %d, want 1", n)
	}

	other := r.request(0)
	other.ForwardedBy = "127.0.0.1:2" // not us
	if r.co.reforward(actor.NewPID(owner, wire.RouterName), other) {
		t.Fatal("a request another coordinator forwarded was routed again here")
	}
	mine := r.request(0)
	mine.ForwardedBy = r.as.Address()
	if !r.co.reforward(actor.NewPID(owner, wire.RouterName), mine) {
		t.Fatal("our own forward was not taken back")
	}
	if slices.Contains(mine.AvoidCoordinators, owner) {
		t.Fatal("reforward changed the dead letter's message in place")
	}
}
