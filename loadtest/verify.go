package loadtest

import (
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"

	"github.com/scanplane/scanplane/tablets"
)

// ErrWrong: a scan returned rows that differ from the ground truth.
var ErrWrong = errors.New("loadtest: wrong scan result")

// Tally accumulates what a scan returned: the row count and an
// order-independent checksum (the sum of a 64-bit hash of every key and
// value). The client library already rejects out-of-order keys, so count +
// checksum catch a missing, extra, duplicated or altered row. The zero value
// is empty.
type Tally struct {
	Count int
	Sum   uint64
}

// Add adds one row.
func (t *Tally) Add(key, value []byte) {
	t.Count++
	t.Sum += rowHash(key, value)
}

func rowHash(key, value []byte) uint64 {
	h := xxhash.Sum64(key)
	v := xxhash.Sum64(value)
	// Mix so that swapping a key's value with another row's is detected.
	return h ^ (v*0x9e3779b97f4a7c15 + h<<7 + h>>3)
}

// Verifier knows the ground truth of a generated table (rows
// tablets.RowKey(i) → tablets.RowValue(i), i < Rows) and answers the
// expected Tally of any row range in O(1) from prefix sums. Immutable and
// safe for concurrent use.
type Verifier struct {
	prefix []uint64 // prefix[i] = Σ rowHash of rows < i
}

// NewVerifier computes the prefix sums for rows rows.
func NewVerifier(rows int) *Verifier {
	v := &Verifier{prefix: make([]uint64, rows+1)}
	for i := 0; i < rows; i++ {
		v.prefix[i+1] = v.prefix[i] + rowHash(tablets.RowKey(i), tablets.RowValue(i))
	}
	return v
}

// Rows is the number of rows of the truth.
func (v *Verifier) Rows() int { return len(v.prefix) - 1 }

// Expect is the Tally of rows [lo, hi).
func (v *Verifier) Expect(lo, hi int) Tally {
	return Tally{Count: hi - lo, Sum: v.prefix[hi] - v.prefix[lo]}
}

// Check compares what a scan of rows [lo, hi) returned with the truth; the
// error wraps ErrWrong and says what differs.
func (v *Verifier) Check(lo, hi int, got Tally) error {
	if lo < 0 || hi > v.Rows() || lo > hi {
		return fmt.Errorf("%w: range [%d, %d) outside the %d rows of the truth", ErrWrong, lo, hi, v.Rows())
	}
	want := v.Expect(lo, hi)
	switch {
	case got.Count != want.Count:
		return fmt.Errorf("%w: rows [%s, %s): %d rows, want %d", ErrWrong, tablets.RowKey(lo), tablets.RowKey(hi), got.Count, want.Count)
	case got.Sum != want.Sum:
		return fmt.Errorf("%w: rows [%s, %s): %d rows as expected but checksum %016x, want %016x (a key or value differs)",
			ErrWrong, tablets.RowKey(lo), tablets.RowKey(hi), got.Count, got.Sum, want.Sum)
	}
	return nil
}
