package policysim

import (
	"math/rand/v2"
	"testing"
	"time"
)

// bruteEstimate is the estimator's definition computed over every
// sample: the median latency of the 8 samples that ended within estMaxAge
// with the RIF nearest rif, the newer first on equal distance.
func bruteEstimate(rifs []int, lats, ends []int64, seqs []int, now int64, rif int) int64 {
	type smp struct {
		d, seq int
		lat    int64
	}
	var near []smp
	for i, r := range rifs {
		if now-ends[i] > estMaxAge {
			continue
		}
		near = append(near, smp{d: max(r-rif, rif-r), seq: seqs[i], lat: lats[i]})
	}
	for i := 1; i < len(near); i++ { // by distance, then newer first
		for j := i; j > 0 && (near[j].d < near[j-1].d || (near[j].d == near[j-1].d && near[j].seq > near[j-1].seq)); j-- {
			near[j], near[j-1] = near[j-1], near[j]
		}
	}
	near = near[:min(len(near), estNearest)]
	if len(near) == 0 {
		return 0
	}
	ls := make([]int64, len(near))
	for i, s := range near {
		ls[i] = s.lat
	}
	for i := 1; i < len(ls); i++ {
		for j := i; j > 0 && ls[j] < ls[j-1]; j-- {
			ls[j], ls[j-1] = ls[j-1], ls[j]
		}
	}
	if len(ls)%2 == 1 {
		return ls[len(ls)/2]
	}
	return (ls[len(ls)/2-1] + ls[len(ls)/2]) / 2
}

// TestEstimatorIsItsDefinition: the estimate equals the definition
// computed over the last 128 samples, as samples are added (the ring
// wraps many times), age out and are asked about at RIFs near and far.
func TestEstimatorIsItsDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var e estimator
	var rifs []int
	var lats, ends []int64
	var seqs []int
	now := int64(0)
	for n := 1; n <= 5000; n++ {
		now += rng.Int64N(int64(40 * time.Millisecond))
		rif := rng.IntN(12)
		if rng.IntN(20) == 0 {
			rif = rng.IntN(200)
		}
		lat := rng.Int64N(int64(50 * time.Millisecond))
		e.add(now, rif, lat)
		rifs, lats, ends, seqs = append(rifs, rif), append(lats, lat), append(ends, now), append(seqs, n)
		if len(rifs) > estSamples {
			rifs, lats, ends, seqs = rifs[1:], lats[1:], ends[1:], seqs[1:]
		}
		for range 3 {
			at := now + rng.Int64N(int64(3*time.Second))
			q := rng.IntN(15)
			if rng.IntN(10) == 0 {
				q = rng.IntN(300)
			}
			if got, want := e.estimate(at, q), bruteEstimate(rifs, lats, ends, seqs, at, q); got != want {
				t.Fatalf("sample %d, estimate(%d, %d) = %d, want %d", n, at, q, got, want)
			}
		}
	}
}
