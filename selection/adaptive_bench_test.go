package selection

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkAdaptiveSlowHosts: one adaptive decision (warm TabletState) on
// 1000 servers with start-latency estimates, a fifth of the hosts slow,
// so that every score asks whether its host is slow (hostSlow), by
// servers per host.
func BenchmarkAdaptiveSlowHosts(b *testing.B) {
	for _, per := range []int{2, 4, 8} {
		b.Run(fmt.Sprintf("perHost=%d", per), func(b *testing.B) {
			r := rng(uint64(per))
			var ss []*ServerLoad
			for i := 0; i < 1000; i++ {
				h := fmt.Sprintf("host%04d", i/per)
				lat := time.Duration(1000+r.IntN(500)) * time.Microsecond
				if (i/per)%5 == 0 {
					lat *= 4
				}
				ss = append(ss, &ServerLoad{ID: ServerID(fmt.Sprintf("%s:9000/%d", h, i%per)), Host: h, Zone: fmt.Sprintf("z%d", (i/per)%3),
					Group: DefaultGroup, Alive: true, InFlight: r.IntN(3), Workers: 4, LastHeartbeat: t0,
					StartLatency: lat, StartLatencyAt: t0.Add(-time.Duration(r.IntN(3000)) * time.Millisecond)})
			}
			v := NewLoadView(ss, []DecayParams{DefaultDecay}, t0)
			v.StartLatencyP50, v.StartLatencyP95 = 1200*time.Microsecond, 6*time.Millisecond
			p := profileFor(PolicyAdaptive)
			pol := mustPolicy(b, p)
			in := &Input{Tablet: tablet(5), Profile: p, View: v, Now: t0, Rand: rng(1), State: &TabletState{}}
			if _, err := pol.Select(in); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := pol.Select(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
