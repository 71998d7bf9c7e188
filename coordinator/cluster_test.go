package coordinator

import (
	"fmt"
	"testing"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/scanplane/scanplane/wire"
)

func members(n int) []*cluster.Member {
	var ms []*cluster.Member
	for i := range n {
		ms = append(ms, &cluster.Member{Id: fmt.Sprintf("m%d", i), Host: "127.0.0.1", Port: int32(8090 + 2*i), Kinds: []string{wire.TabletKind}})
	}
	return ms
}

func TestPlacementSpreadsAndMovesOnlyTheLeaversTablets(t *testing.T) {
	ms := members(3)
	// A member without the tablet kind (a client) owns nothing.
	all := append(ms, &cluster.Member{Id: "client", Host: "127.0.0.1", Port: 9999})
	p := newPlacement(all)
	if len(p.members) != 3 {
		t.Fatalf("members of kind %s: %d, want 3", wire.TabletKind, len(p.members))
	}
	owners := map[string]int{}
	before := map[string]string{}
	for i := range 3000 {
		id := TabletIdentity("t", 1, uint32(i))
		o := p.owner(id)
		owners[o]++
		before[id] = o
	}
	if len(owners) != 3 {
		t.Fatalf("3000 tablets over 3 members: %v", owners)
	}
	for o, n := range owners {
		if n < 700 || n > 1300 {
			t.Fatalf("owner %s has %d of 3000 tablets: %v", o, n, owners)
		}
	}
	gone := ms[0].Address()
	q := newPlacement(ms[1:])
	for id, o := range before {
		now := q.owner(id)
		if now == gone || (o != gone && now != o) {
			t.Fatalf("%s: owner %s -> %s after %s left", id, o, now, gone)
		}
	}
	// placement is a function of the member set, not of its order or of
	// who computes it.
	rev := []*cluster.Member{ms[2], ms[1], ms[0]}
	r := newPlacement(rev)
	for id, o := range before {
		if r.owner(id) != o {
			t.Fatalf("%s: owner depends on member order", id)
		}
	}
	var none *placement
	if none.owner("x") != "" || newPlacement(nil).owner("x") != "" {
		t.Fatal("no members must mean no owner")
	}
}
