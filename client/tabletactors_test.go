package client

import (
	"strings"
	"testing"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/wire"
)

func TestTabletActorDirectory(t *testing.T) {
	var d tabletActorDirectory
	t0 := &messages.TabletRef{Table: "t", Generation: 1, Index: 0}
	t1 := &messages.TabletRef{Table: "t", Generation: 1, Index: 1}
	t0g2 := &messages.TabletRef{Table: "t", Generation: 2, Index: 0}
	routed := func(owner, addr, id string) *messages.ScanRouted {
		m := &messages.ScanRouted{RequestId: "r", Owner: owner}
		if id != "" {
			m.TabletActor = &messages.Pid{Address: addr, Id: id}
		}
		return m
	}
	if d.lookup(t0, "a:1") != nil {
		t.Fatal("empty directory found something")
	}
	if err := d.learn(t0, routed("a:1", "a:1", "scanplane-router/t.g1.t0#1"), wire.RouterName); err != nil {
		t.Fatal(err)
	}
	if pid := d.lookup(t0, "a:1"); pid == nil || pid.Id != "scanplane-router/t.g1.t0#1" || pid.Address != "a:1" {
		t.Fatalf("lookup: %v", pid)
	}
	for _, miss := range []struct {
		ref  *messages.TabletRef
		addr string
	}{{t0, "b:1"}, {t1, "a:1"}, {t0g2, "a:1"}} {
		if d.lookup(miss.ref, miss.addr) != nil {
			t.Fatalf("lookup %v at %s: want none", miss.ref, miss.addr)
		}
	}
	// Bad ones are refused and change nothing.
	for name, m := range map[string]*messages.ScanRouted{
		"no owner":      routed("", "a:1", "scanplane-router/x"),
		"other address": routed("a:1", "evil:1", "scanplane-router/x"),
		"not a child":   routed("a:1", "a:1", "scanplane-registry"),
		"prefix only":   routed("a:1", "a:1", "scanplane-routerX/y"),
		"too long":      routed("a:1", "a:1", "scanplane-router/"+strings.Repeat("x", 600)),
	} {
		if err := d.learn(t0, m, wire.RouterName); err == nil {
			t.Fatalf("%s: accepted %v", name, m)
		}
	}
	if pid := d.lookup(t0, "a:1"); pid == nil || pid.Id != "scanplane-router/t.g1.t0#1" {
		t.Fatalf("a refused ScanRouted changed the entry: %v", pid)
	}
	// A router's ScanRouted naming the same owner keeps the entry (its
	// tablet actor's may have come first); another owner drops it.
	if err := d.learn(t0, routed("a:1", "", ""), wire.RouterName); err != nil || d.lookup(t0, "a:1") == nil {
		t.Fatalf("forwarded to the same owner: %v, entry %v", err, d.lookup(t0, "a:1"))
	}
	if err := d.learn(t0, routed("b:1", "", ""), wire.RouterName); err != nil || d.lookup(t0, "a:1") != nil {
		t.Fatalf("forwarded to another owner: %v, entry %v", err, d.lookup(t0, "a:1"))
	}
	// A lost coordinator's entries go.
	_ = d.learn(t0, routed("a:1", "a:1", "scanplane-router/p"), wire.RouterName)
	_ = d.learn(t1, routed("b:1", "b:1", "scanplane-router/q"), wire.RouterName)
	d.forgetAddr("a:1")
	if d.lookup(t0, "a:1") != nil || d.lookup(t1, "b:1") == nil {
		t.Fatal("forgetAddr dropped the wrong entries")
	}
	// A router with another id (from its lease).
	if err := d.learn(t0, routed("c:1", "c:1", "router-2/p"), "router-2"); err != nil || d.lookup(t0, "c:1") == nil {
		t.Fatalf("custom router id: %v", err)
	}
}

func TestTabletActorDirectoryBounded(t *testing.T) {
	var d tabletActorDirectory
	for i := range maxTabletActors + 10 {
		ref := &messages.TabletRef{Table: "t", Generation: 1, Index: uint32(i)}
		if err := d.learn(ref, &messages.ScanRouted{Owner: "a:1", TabletActor: &messages.Pid{Address: "a:1", Id: "scanplane-router/x"}}, wire.RouterName); err != nil {
			t.Fatal(err)
		}
	}
	if len(d.pids) != maxTabletActors {
		t.Fatalf("%d entries, want the bound %d", len(d.pids), maxTabletActors)
	}
	last := &messages.TabletRef{Table: "t", Generation: 1, Index: maxTabletActors + 9}
	if d.lookup(last, "a:1") == nil {
		t.Fatal("the newest entry was dropped")
	}
}
