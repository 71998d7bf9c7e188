package tabletstream

import (
	"fmt"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// Verifier checks a stream of rows and block proofs that a server
// forwarded (a coordinator's public API with proofs) against a tablet's
// block roots, as a TabletStream checks a scan server's: one Verifier
// per stream, from its lower bound. Its errors wrap tablets.ErrBadProof.
// It is not safe for concurrent use.
type Verifier struct{ v *verifier }

// NewVerifier checks the rows of rng after lastKey (nil: from rng's
// start) against roots (Roots); limit > 0: the stream may end after
// that many rows without showing the end of rng.
func NewVerifier(roots []tablets.Digest, rng tablets.Range, lastKey []byte, limit uint64) *Verifier {
	return &Verifier{v: newVerifier(roots, rng, lastKey, limit)}
}

// Batch takes the next rows of the stream, packed (tablets.AppendPackedRow,
// row after row) and decoded, and proofs, and returns the rows the
// proofs prove, in order; the others wait for a later proof. A counted
// proof (BlockProof.counted) is refused: a forwarded stream sends every
// row.
func (v *Verifier) Batch(packed []byte, rows []tablets.Entry, proofs []*messages.BlockProof) ([]tablets.Entry, error) {
	for _, p := range proofs {
		if p.GetCounted() {
			return nil, errCountedForwarded
		}
	}
	return v.v.batch(packed, rows, proofs)
}

// Pending returns how many rows wait for a proof.
func (v *Verifier) Pending() int { return len(v.v.pending) }

// Finish checks that the stream ended complete: every row proven, and
// the end of the range (or the limit) reached.
func (v *Verifier) Finish() error { return v.v.finish() }

var errCountedForwarded = fmt.Errorf("%w: a counted block proof in a forwarded stream, which sends every row", tablets.ErrBadProof)
