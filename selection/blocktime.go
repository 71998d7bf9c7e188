package selection

import "time"

// Placement says where a decision sent a scan relative to its tablet's
// home host (the first of its rendezvous host order, whose block cache
// holds the tablet).
type Placement uint8

const (
	// PlacementUnknown: the policy does not rank hosts from a home.
	PlacementUnknown Placement = iota
	// PlacementHome: a server of the tablet's home host.
	PlacementHome
	// PlacementAway: a server of another host.
	PlacementAway
)

// blockTimeMinSamples: samples each of home and away scans need before
// BlockTimes.Spill trusts their ratio.
const blockTimeMinSamples = 16

// blockTimeWeight is the weight of the newest sample in each average.
const blockTimeWeight = 1.0 / 32

// BlockTimes averages how long scan servers take per block read (their
// ScanFinished duration over blocks read) for scans on the tablet's home
// host and for scans away from it. Their ratio is what leaving home costs
// in cache misses on this cluster: near 1 where caches hold every
// tablet or nothing, larger where a tablet's blocks are cached only at
// home. A value; not safe for concurrent use (the load board guards its
// copy and puts copies in its views).
type BlockTimes struct {
	home, away   float64 // ns per block, exponentially weighted
	nHome, nAway int
}

// Record adds one finished scan's time per block at placement p; other
// placements and non-positive times are ignored.
func (b *BlockTimes) Record(p Placement, perBlock time.Duration) {
	if perBlock <= 0 {
		return
	}
	d := float64(perBlock)
	switch p {
	case PlacementHome:
		b.home, b.nHome = blend(b.home, b.nHome, d), b.nHome+1
	case PlacementAway:
		b.away, b.nAway = blend(b.away, b.nAway, d), b.nAway+1
	}
}

func blend(avg float64, n int, d float64) float64 {
	if n == 0 {
		return d
	}
	return avg + blockTimeWeight*(d-avg)
}

// Spill returns the learned cost of leaving home, in service times of a
// home scan (away/home − 1, at least 0), and whether both averages have
// enough samples to say.
func (b BlockTimes) Spill() (float64, bool) {
	if b.nHome < blockTimeMinSamples || b.nAway < blockTimeMinSamples || b.home <= 0 {
		return 0, false
	}
	return max(0, b.away/b.home-1), true
}
