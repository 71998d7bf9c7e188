package natsserver_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/messages"
)

// TestNATSWatchRefusesReplayedGeneration: a process holding the client
// certificate shares the victim's NATS user and so sees its reply inbox.
// It learns the deliver subject of the victim's table watch from the
// watch's idle heartbeats, makes the watch start over (a consumer of its
// own delivering to that subject, out of sequence), learns the new
// deliver subject, and points a second consumer at it that replays the
// table's pointer from the bucket's first revision — generation 1, while
// generation 2 is current. The watch refuses the older revision: the
// victim's view of the table only moves forward.
func TestNATSWatchRefusesReplayedGeneration(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, dir := secureServer(t)
	coord := roleConn(t, srv, dir, "coordinator")
	if _, err := coord.MetaStore(ctx); err != nil {
		t.Fatal(err)
	}
	admin := roleConn(t, srv, dir, "admin")
	ameta, err := admin.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for gen := uint64(1); gen <= 2; gen++ {
		if err := ameta.Publish(ctx, &messages.TableMeta{Name: "t", Generation: gen,
			Tablets: []*messages.TabletMeta{{Ref: &messages.TabletRef{Table: "t", Generation: gen}}}}, gen-1); err != nil {
			t.Fatal(err)
		}
	}

	// The attacker listens on the client user's inbox before the victim
	// watches, so it sees every heartbeat of the victim's watches.
	inbox := bus.InboxPrefix(secrets.RoleSubject("client"))
	attacker, err := nats.Connect(srv.ClientURL(), nats.Secure(roleTLS(t, dir, "client")), nats.NoReconnect(), nats.CustomInboxPrefix(inbox),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer attacker.Close()
	var mu sync.Mutex
	var delivers []string // deliver subjects the heartbeats named, in order
	if _, err := attacker.Subscribe(inbox+".>", func(m *nats.Msg) {
		if m.Header.Get("Status") != "100" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if len(delivers) == 0 || delivers[len(delivers)-1] != m.Subject {
			delivers = append(delivers, m.Subject)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := attacker.Flush(); err != nil {
		t.Fatal(err)
	}

	victim := roleConn(t, srv, dir, "client")
	vmeta, err := victim.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var gens []uint64
	if err := vmeta.Watch(ctx, func(table string, gen uint64) {
		mu.Lock()
		gens = append(gens, gen)
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	deliverSubject := func(n int) string {
		var s string
		testutil.Eventually(t, 30*time.Second, "a heartbeat of the victim's watch", func() bool {
			mu.Lock()
			defer mu.Unlock()
			if len(delivers) >= n {
				s = delivers[n-1]
				return true
			}
			return false
		})
		return s
	}
	stream := "KV_" + bus.DefaultConfig().MetaBucket
	key := "$KV." + bus.DefaultConfig().MetaBucket + ".tables.t.current"
	replay := func(name, deliver string) {
		t.Helper()
		req, _ := json.Marshal(map[string]any{
			"stream_name": stream,
			"action":      "create",
			"config": map[string]any{
				"name": name, "deliver_subject": deliver, "deliver_policy": "by_start_sequence", "opt_start_seq": 1,
				"filter_subject": key, "ack_policy": "none", "mem_storage": true, "num_replicas": 1,
				"inactive_threshold": int64(30 * time.Second),
			},
		})
		resp, err := attacker.Request("$JS.API.CONSUMER.CREATE."+stream+"."+name+"."+key, req, 5*time.Second)
		if err != nil {
			t.Fatalf("replay consumer %s: %v", name, err)
		}
		t.Logf("replay consumer %s to %s: %.120s", name, deliver, resp.Data)
	}
	replay("replay1", deliverSubject(1)) // out of sequence: the watch starts over
	replay("replay2", deliverSubject(2)) // the new watch's first delivery: generation 1

	testutil.Eventually(t, 30*time.Second, "the replayed entry reaching the victim's watch", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return victim.ReplayedEntries() > 0 || slices.Contains(gens, 1)
	})
	mu.Lock()
	defer mu.Unlock()
	for i, g := range gens {
		if g != 2 {
			t.Fatalf("the victim's watch applied generations %v (#%d is %d): a replay rolled it back", gens, i, g)
		}
	}
	t.Logf("victim applied %v, refused %d replayed entries", gens, victim.ReplayedEntries())
}
