package selection

import (
	"fmt"
	"testing"
)

// benchView: n servers, 4 per host, 3 zones, light random load.
func benchView(n int) *LoadView {
	r := rng(uint64(n))
	var ss []*ServerLoad
	for i := 0; i < n; i++ {
		h := fmt.Sprintf("host%04d", i/4)
		ss = append(ss, &ServerLoad{ID: ServerID(fmt.Sprintf("%s:9000/%d", h, i%4)), Host: h, Zone: fmt.Sprintf("z%d", (i/4)%3),
			Group: DefaultGroup, Alive: true, InFlight: r.IntN(3), QueueLen: r.IntN(2), Workers: 4, LastHeartbeat: t0,
			Errors: []DecayedCount{{Count: uint32(r.IntN(2)), Origin: t0}}, Slowdowns: []DecayedCount{{Origin: t0}}})
	}
	v := NewLoadView(ss, []DecayParams{DefaultDecay}, t0)
	v.StartLatencyP95 = 12e6
	return v
}

// BenchmarkSelect: one decision (first attempt of a scan) of every policy,
// with the tablet actor's TabletState warm (its caches are keyed by view
// membership, so they survive new views while membership is unchanged).
func BenchmarkSelect(b *testing.B) {
	for _, name := range PolicyNames() {
		b.Run(name, func(b *testing.B) {
			for _, n := range []int{10, 100, 1000} {
				b.Run(fmt.Sprintf("servers=%d", n), func(b *testing.B) {
					p := profileFor(name)
					pol := mustPolicy(b, p)
					in := &Input{Tablet: tablet(1), Profile: p, View: benchView(n), Now: t0, Rand: rng(1), State: &TabletState{}, LocalHost: "host0001"}
					if _, err := pol.Select(in); err != nil {
						b.Fatal(err)
					}
					b.ReportAllocs()
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						if _, err := pol.Select(in); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

// BenchmarkSelectCold: a decision with a fresh TabletState (first scan of
// a tablet, or after a membership change): rendezvous orders are computed.
func BenchmarkSelectCold(b *testing.B) {
	for _, name := range PolicyNames() {
		b.Run(name, func(b *testing.B) {
			for _, n := range []int{100, 1000} {
				b.Run(fmt.Sprintf("servers=%d", n), func(b *testing.B) {
					p := profileFor(name)
					pol := mustPolicy(b, p)
					v := benchView(n)
					r := rng(1)
					b.ReportAllocs()
					for i := 0; i < b.N; i++ {
						in := &Input{Tablet: tablet(i), Profile: p, View: v, Now: t0, Rand: r, State: &TabletState{}, LocalHost: "host0001"}
						if _, err := pol.Select(in); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

// BenchmarkHedge: a hedge decision (one slow attempt) of the hedging
// policies.
func BenchmarkHedge(b *testing.B) {
	for _, name := range []string{"adaptive", "bookkeeper", "clickhouse-random"} {
		b.Run(name, func(b *testing.B) {
			p := profileFor(name)
			p.Options.Hedge = true
			pol := mustPolicy(b, p)
			v := benchView(1000)
			in := &Input{Tablet: tablet(1), Profile: p, View: v, Now: t0, Rand: rng(1), State: &TabletState{}}
			d, err := pol.Select(in)
			if err != nil {
				b.Fatal(err)
			}
			in.Attempts = []Attempt{{Server: d.Server, Host: d.Host, Result: Slow}}
			in.Hedge = true
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := pol.Select(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkNewLoadView(b *testing.B) {
	src := benchView(1000).Servers
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		ss := append([]*ServerLoad(nil), src...)
		NewLoadView(ss, []DecayParams{DefaultDecay}, t0)
	}
}

// BenchmarkViewBuilder: the board's rebuild as ViewBuilder does it, 1000
// servers, one of them replaced by a changed copy per view (as a host
// actor's publish does), the membership unchanged.
func BenchmarkViewBuilder(b *testing.B) {
	src := benchView(1000).Servers
	var vb ViewBuilder
	vb.Build(append([]*ServerLoad(nil), src...), []DecayParams{DefaultDecay}, t0)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		k := i % len(src)
		c := *src[k]
		c.InFlight++
		src[k] = &c
		vb.Build(append([]*ServerLoad(nil), src...), []DecayParams{DefaultDecay}, t0)
	}
}
