package tablets

import (
	"math/rand/v2"
	"testing"

	"github.com/zeebo/blake3"
)

// TestWholeHasher: wholeHasher is BLAKE3-256 (zeebo/blake3's, an
// independent implementation) for every length around the chunk and
// group sizes and for input written in pieces of any size.
func TestWholeHasher(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 5*wholeGroup+3000)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	var lens []int
	for _, base := range []int{0, 64, 1024, 2048, wholeGroup, 2 * wholeGroup, 3 * wholeGroup, 4 * wholeGroup} {
		for d := -2; d <= 2; d++ {
			if base+d >= 0 {
				lens = append(lens, base+d)
			}
		}
	}
	for range 200 {
		lens = append(lens, rng.IntN(len(buf)+1))
	}
	var h wholeHasher
	for _, n := range lens {
		want := Digest(blake3.Sum256(buf[:n]))
		h.Reset()
		h.Write(buf[:n])
		if got := h.Sum(); got != want {
			t.Fatalf("%d bytes in one write: %x, want %x", n, got, want)
		}
		h.Reset()
		for p := buf[:n]; len(p) > 0; {
			k := min(len(p), 1+rng.IntN(3*wholeGroup/2))
			if rng.IntN(4) == 0 {
				k = min(len(p), 1+rng.IntN(200))
			}
			h.Write(p[:k])
			p = p[k:]
		}
		if got := h.Sum(); got != want {
			t.Fatalf("%d bytes in pieces: %x, want %x", n, got, want)
		}
	}
}
