package tablets

import (
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// Identity is a tablet's identity among coordinators:
// "<table>/g<generation>/t<index>". A tablet's actor lives on the
// coordinator Owner picks for it.
func Identity(table string, gen uint64, idx uint32) string {
	return table + "/g" + strconv.FormatUint(gen, 10) + "/t" + strconv.FormatUint(uint64(idx), 10)
}

// Owner is the address among addrs that owns identity by rendezvous
// hashing: the one with the highest xxHash64 of identity, a zero byte and
// the address; ties (a 64-bit hash collision) go to the smaller address.
// "" when addrs is empty. Coordinators place tablet actors with it, and
// clients use it to send a tablet's scans straight to its owner. When an
// address leaves, only the identities it owned move; one that joins takes
// about 1/n of them.
func Owner(addrs []string, identity string) string {
	var best string
	var bestScore uint64
	d := xxhash.New()
	for _, a := range addrs {
		d.Reset()
		_, _ = d.WriteString(identity)
		_, _ = d.Write([]byte{0})
		_, _ = d.WriteString(a)
		score := d.Sum64()
		if best == "" || score > bestScore || (score == bestScore && a < best) {
			best, bestScore = a, score
		}
	}
	return best
}
