package placementsim

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/asynkron/protoactor-go/cluster"
)

var full = flag.Bool("placementsim.full", false,
	"TestPlacementReport: the full sizes (10 × 10 000 tablets, 1 000 hosts) and timings; prints the report")

// reportSizes: the full sizes with -placementsim.full, else small ones
// (the properties are the same; the spread is noisier).
func reportSizes() (tables, perTable int) {
	if *full {
		return 10, 10000
	}
	return 4, 500
}

var memberCounts = []int{3, 10, 50}

func TestIdentity(t *testing.T) {
	for _, c := range []struct {
		table string
		gen   uint64
		idx   uint32
		want  string
	}{
		{"demo", 3, 17, "demo/g3/t17"},
		{"t_1-x", 0, 0, "t_1-x/g0/t0"},
		{"a", 1<<64 - 1, 1<<32 - 1, "a/g18446744073709551615/t4294967295"},
	} {
		if got := grainIdentity(c.table, c.gen, c.idx); got != c.want {
			t.Errorf("grainIdentity(%q, %d, %d) = %q, want %q", c.table, c.gen, c.idx, got, c.want)
		}
	}
	// protoactor's GetByIdentity splits kind/identity at the first '/'
	// (the placement actor's path on a topology change): it must find the
	// same owner as GetByClusterIdentity (Manager.Get's path).
	ms, err := Members(10, HostsOnePort, 1)
	if err != nil {
		t.Fatal(err)
	}
	rdv := cluster.NewRendezvous()
	rdv.UpdateMembers(ms)
	ids, err := Tablets(3, 200)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		a, b := rdv.GetByClusterIdentity(id), rdv.GetByIdentity(id.AsKey())
		if a == "" || a != b {
			t.Fatalf("%s: GetByClusterIdentity %q, GetByIdentity(%q) %q", id.Identity, a, id.AsKey(), b)
		}
	}
}

func TestBadInput(t *testing.T) {
	for name, err := range map[string]error{
		"members 0":       func() error { _, err := Members(0, HostsOnePort, 1); return err }(),
		"addressing":      func() error { _, err := Members(3, "dns", 1); return err }(),
		"tablets 0":       func() error { _, err := Tablets(0, 5); return err }(),
		"hosts 0":         func() error { _, err := HostView(0, 3, nil, t0, 1); return err }(),
		"no decays":       func() error { _, err := HostView(2, 3, nil, t0, 1); return err }(),
		"compare sizes":   func() error { _, err := Compare(Placement{Owner: make([]int, 2)}, Placement{}); return err }(),
		"compare members": compareSame(t),
	} {
		if !errors.Is(err, ErrBadInput) {
			t.Errorf("%s: err %v, want ErrBadInput", name, err)
		}
	}
}

// compareSame: two placements over the same members are not a join or a
// leave.
func compareSame(t *testing.T) error {
	ms, err := Members(3, PortsOnOneHost, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Compare(Placement{Members: ms}, Placement{Members: ms})
	return err
}

// TestMembersExtend: Members draws distinct addresses, and a larger
// list extends a smaller one (so n → n+1 is one join).
func TestMembersExtend(t *testing.T) {
	for _, a := range Addressings() {
		small, err := Members(50, a, 7)
		if err != nil {
			t.Fatal(err)
		}
		big, err := Members(51, a, 7)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for i, m := range big {
			if seen[m.Address()] {
				t.Fatalf("%s: address %s twice", a, m.Address())
			}
			seen[m.Address()] = true
			if i < len(small) && small[i].Address() != m.Address() {
				t.Fatalf("%s: member %d is %s in 50, %s in 51", a, i, small[i].Address(), m.Address())
			}
		}
	}
}

// TestCompareCountsStrays: Compare sees a tablet that moved between two
// members that both stayed.
func TestCompareCountsStrays(t *testing.T) {
	ms, err := Members(4, HostsOnePort, 1)
	if err != nil {
		t.Fatal(err)
	}
	before := Placement{Members: ms[:3], Owner: []int{0, 1, 2, 0}}
	after := Placement{Members: ms, Owner: []int{3, 1, 2, 1}} // tablet 3: 0 → 1
	mv, err := Compare(before, after)
	if err != nil {
		t.Fatal(err)
	}
	if mv.Moved != 2 || mv.Stray != 1 || mv.Owned != 1 || mv.Changed != ms[3].Address() {
		t.Fatalf("got %+v, want 2 moved, 1 stray, 1 owned by %s", mv, ms[3].Address())
	}
}

// scenario is one addressing scheme at one member count: the placement,
// a join (n → n+1) and a leave of the first member (n → n−1).
type scenario struct {
	a               Addressing
	n               int
	base            Spread
	ideal           Spread
	join, leave     Movement
	idealJ, idealLv Movement
}

func runScenario(t *testing.T, a Addressing, n int, ids []*cluster.ClusterIdentity) scenario {
	t.Helper()
	ms, err := Members(n+1, a, 1)
	if err != nil {
		t.Fatal(err)
	}
	base, joined, left := ms[:n], ms, ms[1:n]
	place := func(ms cluster.Members) Placement {
		p, err := Place(ms, ids)
		if err != nil {
			t.Fatalf("%s n=%d: %v", a, len(ms), err)
		}
		return p
	}
	pb, pj, pl := place(base), place(joined), place(left)
	sc := scenario{a: a, n: n, base: SpreadOf(pb), ideal: SpreadOf(PlaceOwner(base, ids))}
	if sc.join, err = Compare(pb, pj); err != nil {
		t.Fatal(err)
	}
	if sc.leave, err = Compare(pb, pl); err != nil {
		t.Fatal(err)
	}
	if sc.idealJ, err = Compare(PlaceOwner(base, ids), PlaceOwner(joined, ids)); err != nil {
		t.Fatal(err)
	}
	if sc.idealLv, err = Compare(PlaceOwner(base, ids), PlaceOwner(left, ids)); err != nil {
		t.Fatal(err)
	}

	// Every tablet has exactly one owner, the same whatever order the
	// topology lists the members in (every member builds its own
	// Rendezvous from its own view; a disagreement would activate a
	// tablet twice).
	shuffled := slices.Clone(base)
	rand.New(rand.NewPCG(uint64(n), 3)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	ps := place(shuffled)
	for i := range ids {
		if got, want := ps.Members[ps.Owner[i]].Address(), base[pb.Owner[i]].Address(); got != want {
			t.Fatalf("%s n=%d: %s owned by %s, by %s with the members shuffled", a, n, ids[i].Identity, want, got)
		}
	}
	if sum := sc.base.Mean * float64(n); int(sum+0.5) != len(ids) || sc.base.Max > len(ids) {
		t.Fatalf("%s n=%d: spread %+v does not account for %d tablets", a, n, sc.base, len(ids))
	}
	// Only tablets of the leaving member move on a leave, and only tablets
	// moving to the new member on a join; so the moved fraction is the
	// changed member's share.
	for _, c := range []struct {
		what string
		mv   Movement
	}{{"join", sc.join}, {"leave", sc.leave}, {"owner join", sc.idealJ}, {"owner leave", sc.idealLv}} {
		if c.mv.Stray != 0 || c.mv.Moved != c.mv.Owned {
			t.Errorf("%s n=%d %s of %s: %d moved, %d of them between members that stayed; %d owned by it",
				a, n, c.what, c.mv.Changed, c.mv.Moved, c.mv.Stray, c.mv.Owned)
		}
	}
	if sc.join.Moved == 0 || sc.leave.Moved == 0 {
		t.Errorf("%s n=%d: join moved %d, leave moved %d: the changed member owns nothing", a, n, sc.join.Moved, sc.leave.Moved)
	}
	return sc
}

// TestPlacementReport places tables × perTable tablets over 3, 10 and 50
// coordinators in every addressing scheme with protoactor's Rendezvous,
// checks the properties that must hold, and logs spread and movement
// (with -placementsim.full: the sizes plus timings; see doc.go).
func TestPlacementReport(t *testing.T) {
	tables, perTable := reportSizes()
	ids, err := Tablets(tables, perTable)
	if err != nil {
		t.Fatal(err)
	}
	var rows []scenario
	for _, a := range Addressings() {
		for _, n := range memberCounts {
			rows = append(rows, runScenario(t, a, n, ids))
		}
	}
	for _, sc := range rows {
		// One coordinator per machine: a generous bound on the skew
		// (MEASUREMENTS.md, "Scale simulation", has the figures);
		// consecutive ports on one machine are far more skewed and are
		// only reported.
		if sc.a == HostsOnePort && sc.n == 10 && sc.base.MaxOverMean > 1.5 {
			t.Errorf("hosts n=10: max/mean %.2f > 1.5", sc.base.MaxOverMean)
		}
		if sc.n == 10 && sc.ideal.MaxOverMean > 1.5 {
			t.Errorf("tablets.Owner n=10: max/mean %.2f > 1.5", sc.ideal.MaxOverMean)
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "placement of %d tablets (%d tables × %d) by protoactor cluster.Rendezvous; owner = tablets.Owner (xxHash64 rendezvous), what coordinators use\n",
		len(ids), tables, perTable)
	fmt.Fprintf(&b, "%-9s %3s | %6s %6s %7s %8s %6s | %8s %6s | %8s %7s %8s %7s\n", "addresses", "n",
		"min", "max", "mean", "max/mean", "CV", "owner", "owner", "join", "1/(n+1)", "leave", "1/n")
	fmt.Fprintf(&b, "%-9s %3s | %6s %6s %7s %8s %6s | %8s %6s | %8s %7s %8s %7s\n", "", "",
		"", "", "", "", "", "max/mean", "CV", "moved", "", "moved", "")
	for _, sc := range rows {
		s := sc.base
		fmt.Fprintf(&b, "%-9s %3d | %6d %6d %7.0f %7.2fx %6.3f | %7.2fx %6.3f | %7.2f%% %6.2f%% %7.2f%% %6.2f%%\n",
			sc.a, sc.n, s.Min, s.Max, s.Mean, s.MaxOverMean, s.CV, sc.ideal.MaxOverMean, sc.ideal.CV,
			100*sc.join.Fraction, 100/float64(sc.n+1), 100*sc.leave.Fraction, 100/float64(sc.n))
	}
	b.WriteString("moved tablets between members that stayed: 0 in every join and leave above (checked)\n")
	b.WriteString(oneMachineReport(t, ids))
	t.Log("\n" + b.String())
	if *full {
		t.Log("\n" + timingReport(t, ids))
	}
}

// oneMachineReport: the spread of three coordinators on one machine under
// address choices a launcher could make (protoactor hashes "host:port").
func oneMachineReport(t *testing.T, ids []*cluster.ClusterIdentity) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("3 coordinators on one machine, by address choice:\n")
	for _, c := range []struct {
		name  string
		hosts []string
		ports []int32
	}{
		{"127.0.0.1:8090, :8091, :8092", []string{"127.0.0.1", "127.0.0.1", "127.0.0.1"}, []int32{8090, 8091, 8092}},
		{"127.0.0.1:8090, :8190, :8290", []string{"127.0.0.1", "127.0.0.1", "127.0.0.1"}, []int32{8090, 8190, 8290}},
		{"127.0.0.1:18090, :28090, :38090", []string{"127.0.0.1", "127.0.0.1", "127.0.0.1"}, []int32{18090, 28090, 38090}},
		{"127.0.0.1, .2, .3 port 8090", []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}, []int32{8090, 8090, 8090}},
	} {
		var ms cluster.Members
		for i := range c.hosts {
			ms = append(ms, &cluster.Member{Id: fmt.Sprintf("coord-%d", i), Host: c.hosts[i], Port: c.ports[i], Kinds: []string{Kind}})
		}
		p, err := Place(ms, ids)
		if err != nil {
			t.Fatal(err)
		}
		s := SpreadOf(p)
		fmt.Fprintf(&b, "  %-33s min %6d max %6d max/mean %.2fx\n", c.name, s.Min, s.Max, s.MaxOverMean)
	}
	return b.String()
}
