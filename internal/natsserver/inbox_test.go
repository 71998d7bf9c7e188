package natsserver_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/messages"
)

// TestNATSInboxIsolation: a holder of the client certificate cannot read
// the replies meant for other users. Subscribing to every inbox
// (_INBOX.>) is refused by the server with a permissions violation, and
// while a scan server reads a block (a direct get answered on its inbox)
// and another client reads the metadata, the would-be snooper receives
// nothing.
func TestNATSInboxIsolation(t *testing.T) {
	ctx := context.Background()
	srv, dir := secureServer(t)
	admin := roleConn(t, srv, dir, "admin")
	ablocks, err := admin.BlockStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("row-values-of-a-block")
	if err := ablocks.Put(ctx, "f1.0", secret); err != nil {
		t.Fatal(err)
	}
	ameta, err := admin.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ameta.Publish(ctx, &messages.TableMeta{Name: "t", Generation: 1,
		Tablets: []*messages.TabletMeta{{Ref: &messages.TabletRef{Table: "t", Generation: 1}}}}, 0); err != nil {
		t.Fatal(err)
	}

	snoop, errs := rawConn(t, srv, dir, "client")
	var got atomic.Int64
	// Every inbox, and the inboxes of the scan server and the
	// coordinator by name.
	subjects := []string{"_INBOX.>",
		bus.InboxPrefix(secrets.RoleSubject("scanserver")) + ".>",
		bus.InboxPrefix(secrets.RoleSubject("coordinator")) + ".>"}
	for _, s := range subjects {
		if _, err := snoop.Subscribe(s, func(m *nats.Msg) { got.Add(int64(len(m.Data))) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := snoop.Flush(); err != nil {
		t.Fatal(err)
	}
	refused := map[string]bool{}
	deadline := time.After(10 * time.Second)
	for len(refused) < len(subjects) {
		select {
		case err := <-errs:
			if !errors.Is(err, nats.ErrPermissionViolation) {
				t.Fatalf("snooper: async error %v, want a permissions violation", err)
			}
			for _, s := range subjects {
				if strings.Contains(err.Error(), `Subscription to "`+s+`"`) {
					refused[s] = true
				}
			}
		case <-deadline:
			t.Fatalf("snooper: subscriptions %q accepted, want each refused (refused: %v)", subjects, refused)
		}
	}

	// Replies the snooper must not see: a block read by a scan server, a
	// metadata read by another client.
	ss := roleConn(t, srv, dir, "scanserver")
	sblocks, err := ss.BlockStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := sblocks.Get(ctx, "f1.0"); err != nil || string(b) != string(secret) {
		t.Fatalf("scanserver block get: %q, %v", b, err)
	}
	cl := roleConn(t, srv, dir, "client")
	cmeta, err := cl.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if gen, err := cmeta.Current(ctx, "t"); err != nil || gen != 1 {
		t.Fatalf("client current generation: %d, %v", gen, err)
	}
	// Whatever the server routed to the snooper before this round trip
	// has been delivered by its end.
	if err := snoop.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := got.Load(); n != 0 {
		t.Fatalf("the snooper read %d bytes of other users' replies, want 0", n)
	}
}

// TestNATSInboxPrefixes: bus.Connect gives each certificate's connection
// the inbox of its subject, and a client's KV watches (the coordinators'
// leases, the tables), whose deliveries come to that inbox, still work.
func TestNATSInboxPrefixes(t *testing.T) {
	ctx := context.Background()
	srv, dir := secureServer(t)
	for _, role := range secrets.Roles {
		c := roleConn(t, srv, dir, role)
		if got, want := c.NATS().Opts.InboxPrefix, bus.InboxPrefix(secrets.RoleSubject(role)); got != want {
			t.Errorf("%s: inbox prefix %q, want %q", role, got, want)
		}
		if in := c.NATS().NewInbox(); !strings.HasPrefix(in, bus.InboxPrefix(secrets.RoleSubject(role))+".") {
			t.Errorf("%s: NewInbox %q", role, in)
		}
	}
	coord := roleConn(t, srv, dir, "coordinator")
	cleases, err := coord.Leases(ctx, bus.DefaultLeaseConfig())
	if err != nil {
		t.Fatal(err)
	}
	l, err := cleases.Announce(ctx, &messages.ClusterInfo{MemberId: "c1", CoordinatorAddress: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	cl := roleConn(t, srv, dir, "client")
	leases, err := cl.Leases(ctx, bus.DefaultLeaseConfig())
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	seen := make(chan string, 16)
	if err := leases.Watch(wctx, func(live []*messages.ClusterInfo) {
		for _, ci := range live {
			seen <- ci.GetMemberId()
		}
	}); err != nil {
		t.Fatalf("client lease watch: %v", err)
	}
	select {
	case id := <-seen:
		if id != "c1" {
			t.Fatalf("client lease watch saw %q, want c1", id)
		}
	case <-wctx.Done():
		t.Fatal("the client's lease watch saw no coordinator")
	}
	if err := cl.NATS().LastError(); err != nil {
		t.Fatalf("client connection: %v", err)
	}
}
