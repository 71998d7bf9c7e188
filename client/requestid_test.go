package client

import (
	"encoding/hex"
	"strings"
	"testing"
)

// TestRequestIDsAreRandom: request ids carry 128 bits from
// crypto/rand: 32 hex characters after the client id, never repeated, and
// no bit position stuck (each is set in 35-65% of 4096 ids; a counter or
// a clock would leave most high bits constant).
func TestRequestIDsAreRandom(t *testing.T) {
	c, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	const n = 4096
	seen := map[string]bool{}
	var ones [128]int
	for i := 0; i < n; i++ {
		id := c.nextRequestID()
		prefix, random, ok := strings.Cut(id, "-")
		if !ok || prefix != c.id || len(random) != 32 {
			t.Fatalf("request id %q: want %s-<32 hex characters>", id, c.id)
		}
		b, err := hex.DecodeString(random)
		if err != nil || len(b) != 16 {
			t.Fatalf("request id %q: random part is not 16 bytes of hex: %v", id, err)
		}
		if seen[id] {
			t.Fatalf("request id %q repeated after %d ids", id, i)
		}
		seen[id] = true
		for j, x := range b {
			for k := 0; k < 8; k++ {
				ones[j*8+k] += int(x>>k) & 1
			}
		}
	}
	for bit, k := range ones {
		if k < n*35/100 || k > n*65/100 {
			t.Errorf("bit %d set in %d of %d ids: not random", bit, k, n)
		}
	}
}
