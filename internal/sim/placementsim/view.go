package placementsim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/scanplane/scanplane/selection"
)

// HostView builds a coordinator's load view of hosts scan-server hosts
// with perHost servers each ("host<h>:9900/<i>", 4 workers, default group,
// one zone, alive, heartbeat at now) under light random load drawn from
// seed (in flight 0–2, queued 0–1, 0–1 decayed errors), like selection's
// BenchmarkSelect view. decays must be the profiles' Decays().
func HostView(hosts, perHost int, decays []selection.DecayParams, now time.Time, seed uint64) (*selection.LoadView, error) {
	if hosts < 1 || perHost < 1 {
		return nil, fmt.Errorf("%w: hosts %d and perHost %d must be ≥ 1", ErrBadInput, hosts, perHost)
	}
	if len(decays) == 0 {
		return nil, fmt.Errorf("%w: decays is empty (want the profiles' Decays())", ErrBadInput)
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	ss := make([]*selection.ServerLoad, 0, hosts*perHost)
	for h := 0; h < hosts; h++ {
		host := fmt.Sprintf("host%04d", h)
		for i := 0; i < perHost; i++ {
			s := &selection.ServerLoad{ID: selection.ServerID(fmt.Sprintf("%s:9900/%d", host, i)), Host: host,
				Group: selection.DefaultGroup, Alive: true, InFlight: r.IntN(3), QueueLen: r.IntN(2), Workers: 4,
				LastHeartbeat: now,
				Errors:        make([]selection.DecayedCount, len(decays)),
				Slowdowns:     make([]selection.DecayedCount, len(decays)),
				Busy:          make([]selection.DecayedCount, len(decays)),
			}
			for d := range decays {
				s.Errors[d] = selection.DecayedCount{Count: uint32(r.IntN(2)), Origin: now}
				s.Slowdowns[d].Origin, s.Busy[d].Origin = now, now
			}
			ss = append(ss, s)
		}
	}
	v := selection.NewLoadView(ss, decays, now)
	v.StartLatencyP50, v.StartLatencyP95 = 4*time.Millisecond, 12*time.Millisecond
	return v, nil
}
