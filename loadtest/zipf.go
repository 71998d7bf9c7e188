package loadtest

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Zipf draws ranks 0..n-1 with P(rank i) ∝ 1/(i+1)^theta, by the method
// of Gray et al., "Quickly Generating Billion-Record Synthetic Databases"
// (SIGMOD '94), as YCSB's ZipfianGenerator does: ranks 0 and 1 are exact,
// the others follow a continuous approximation of the distribution.
// theta = 0.99 is YCSB's constant. A Zipf is immutable and safe for
// concurrent use; randomness comes from the caller.
type Zipf struct {
	n                        int
	theta, alpha, zetan, eta float64
	half                     float64 // 1 + 0.5^theta
}

// NewZipf returns a generator over n ranks; theta must be in (0, 1).
func NewZipf(n int, theta float64) (*Zipf, error) {
	if n < 1 {
		return nil, fmt.Errorf("loadtest: zipf over %d items, want >= 1", n)
	}
	if !(theta > 0 && theta < 1) {
		return nil, fmt.Errorf("loadtest: zipf theta %v must be in (0, 1)", theta)
	}
	z := &Zipf{n: n, theta: theta, alpha: 1 / (1 - theta), zetan: zeta(n, theta)}
	zeta2 := zeta(2, theta)
	z.eta = (1 - math.Pow(2/float64(n), 1-theta)) / (1 - zeta2/z.zetan)
	z.half = 1 + math.Pow(0.5, theta)
	return z, nil
}

// zeta is the generalised harmonic number Σ_{i=1..n} 1/i^theta.
func zeta(n int, theta float64) float64 {
	s := 0.0
	for i := 1; i <= n; i++ {
		s += 1 / math.Pow(float64(i), theta)
	}
	return s
}

// N is the number of ranks.
func (z *Zipf) N() int { return z.n }

// Prob is the exact probability of rank i under the Zipf law.
func (z *Zipf) Prob(i int) float64 {
	if i < 0 || i >= z.n {
		return 0
	}
	return 1 / math.Pow(float64(i+1), z.theta) / z.zetan
}

// Next draws a rank; rank 0 is the most popular.
func (z *Zipf) Next(r *rand.Rand) int {
	u := r.Float64()
	uz := u * z.zetan
	if uz < 1 {
		return 0
	}
	if uz < z.half {
		return min(1, z.n-1)
	}
	i := int(float64(z.n) * math.Pow(z.eta*u-z.eta+1, z.alpha))
	return min(max(i, 0), z.n-1)
}
