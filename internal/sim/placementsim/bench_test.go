package placementsim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/scanplane/scanplane/selection"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// Sizes of the simulation at scale: 1 000 hosts with 3 scan
// servers each; 10 × 10 000 tablets; a coordinator's warm tablet actors at
// 50 coordinators (100 000 / 50).
const (
	benchHosts, benchPerHost = 1000, 3
	benchTables, benchPer    = 10, 10000
	warmTablets              = 2000
)

// benchLookup: one GetByClusterIdentity (disthash Manager.Get's path, on a
// PidCache miss) over n members, cycling over the tablets.
func benchLookup(b *testing.B, n int, ids []*cluster.ClusterIdentity) {
	ms, err := Members(n, HostsOnePort, 1)
	if err != nil {
		b.Fatal(err)
	}
	rdv := cluster.NewRendezvous()
	rdv.UpdateMembers(ms)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if rdv.GetByClusterIdentity(ids[i%len(ids)]) == "" {
			b.Fatal("no owner")
		}
	}
}

// benchRecompute: one op = the owner of every tablet recomputed after a
// topology change as the disthash placement actor does it (a new
// Rendezvous, then GetByIdentity of every "kind/identity" key), here for
// all tablets of the cluster; each member only re-checks the grains it
// holds, about 1/n of them.
func benchRecompute(b *testing.B, n int, keys []string) {
	ms, err := Members(n, HostsOnePort, 1)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rdv := cluster.NewRendezvous()
		rdv.UpdateMembers(ms)
		for _, k := range keys {
			if rdv.GetByIdentity(k) == "" {
				b.Fatal("no owner")
			}
		}
	}
}

// decisionProfiles: the coordinator's default (DefaultProfiles, policy
// accumulo-host) and adaptive with its defaults.
type namedProfiles struct {
	name string
	ps   *selection.Profiles
}

func decisionProfiles(tb testing.TB) []namedProfiles {
	ad, err := selection.ParseProfiles([]byte(`[{"isDefault": true, "policy": "adaptive"}]`))
	if err != nil {
		tb.Fatal(err)
	}
	return []namedProfiles{{"default (accumulo-host)", selection.DefaultProfiles()}, {"adaptive", ad}}
}

// benchDecision: one selection decision (first attempt of a scan) on a
// 1 000-host × 3-server view, cycling over warmTablets tablets each with
// its own TabletState (a tablet actor's), or with a fresh TabletState per
// decision (cold: a grain just activated, e.g. after it moved).
func benchDecision(b *testing.B, ps *selection.Profiles, cold bool) {
	p := ps.Default()
	pol := ps.Policy(p)
	v, err := HostView(benchHosts, benchPerHost, ps.Decays(), t0, 1)
	if err != nil {
		b.Fatal(err)
	}
	tabs := make([]selection.Tablet, warmTablets)
	states := make([]*selection.TabletState, warmTablets)
	for i := range tabs {
		tabs[i] = selection.Tablet{Table: "table0", PrevEndRow: fmt.Appendf(nil, "row%06d", i), EndRow: fmt.Appendf(nil, "row%06d", i+1)}
		states[i] = &selection.TabletState{}
	}
	in := &selection.Input{Profile: p, View: v, Now: t0, Rand: rand.New(rand.NewPCG(1, 2))}
	if !cold {
		for i := range tabs {
			in.Tablet, in.State = tabs[i], states[i]
			if _, err := pol.Select(in); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i % warmTablets
		in.Tablet, in.State = tabs[k], states[k]
		if cold {
			in.State = &selection.TabletState{}
		}
		if _, err := pol.Select(in); err != nil {
			b.Fatal(err)
		}
	}
}

func benchIDs(tb testing.TB) []*cluster.ClusterIdentity {
	ids, err := Tablets(benchTables, benchPer)
	if err != nil {
		tb.Fatal(err)
	}
	return ids
}

func keysOf(ids []*cluster.ClusterIdentity) []string {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = id.AsKey()
	}
	return keys
}

func BenchmarkLookup(b *testing.B) {
	ids := benchIDs(b)
	for _, n := range memberCounts {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) { benchLookup(b, n, ids) })
	}
}

func BenchmarkRecompute(b *testing.B) {
	keys := keysOf(benchIDs(b))
	for _, n := range memberCounts {
		b.Run(fmt.Sprintf("members=%d/tablets=%d", n, len(keys)), func(b *testing.B) { benchRecompute(b, n, keys) })
	}
}

func BenchmarkDecision(b *testing.B) {
	for _, np := range decisionProfiles(b) {
		for _, cold := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/cold=%v/servers=%d", strings.Fields(np.name)[0], cold, benchHosts*benchPerHost),
				func(b *testing.B) { benchDecision(b, np.ps, cold) })
		}
	}
}

// timingReport runs the benchmarks above once each (one goroutine: one
// core) and formats them; -placementsim.full only.
func timingReport(t *testing.T, ids []*cluster.ClusterIdentity) string {
	var b strings.Builder
	fmt.Fprintf(&b, "timings, one goroutine (one core)\n")
	fmt.Fprintf(&b, "placement lookup GetByClusterIdentity (PidCache miss), hosts addressing:\n")
	for _, n := range memberCounts {
		r := testing.Benchmark(func(b *testing.B) { benchLookup(b, n, ids) })
		fmt.Fprintf(&b, "  %2d members: %7.0f ns/lookup (%.1f ns per member), %d allocs, %d B\n",
			n, nsPerOp(r), nsPerOp(r)/float64(n), r.AllocsPerOp(), r.AllocedBytesPerOp())
	}
	keys := keysOf(ids)
	fmt.Fprintf(&b, "recompute after a topology change (placement actor: GetByIdentity per grain), %d tablets:\n", len(keys))
	for _, n := range memberCounts {
		r := testing.Benchmark(func(b *testing.B) { benchRecompute(b, n, keys) })
		ms := nsPerOp(r) / 1e6
		fmt.Fprintf(&b, "  %2d members: all tablets %6.1f ms; one member's share (1/%d) %6.1f ms\n", n, ms, n, ms/float64(n))
	}
	fmt.Fprintf(&b, "selection decisions, %d hosts × %d servers, first attempt:\n", benchHosts, benchPerHost)
	for _, np := range decisionProfiles(t) {
		for _, cold := range []bool{false, true} {
			r := testing.Benchmark(func(b *testing.B) { benchDecision(b, np.ps, cold) })
			state := fmt.Sprintf("warm (%d tablets)", warmTablets)
			if cold {
				state = "cold TabletState"
			}
			fmt.Fprintf(&b, "  %-23s %-19s %8.0f ns/decision = %9.0f decisions/s/core, %d allocs\n",
				np.name, state, nsPerOp(r), 1e9/nsPerOp(r), r.AllocsPerOp())
		}
	}
	return b.String()
}

func nsPerOp(r testing.BenchmarkResult) float64 {
	if r.N == 0 {
		return 0
	}
	return float64(r.T.Nanoseconds()) / float64(r.N)
}
