package tablets

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// RowDigest is the running checksum of a row stream: xxHash64 over each
// row's key length, value length, key and value (lengths as uvarints:
// the packed encoding), in stream order. A scan server folds in every row it sends and puts the
// running count and Sum in each RowBatch and in ScanFinished; the client
// folds in every row it receives and compares before it hands the batch
// over, so a lost, repeated or altered row inside a stream is detected
// (it detects transport faults, not a tampering server). The zero value
// is ready to use; do not copy one after the first Add (copies share
// state); not safe for concurrent use.
type RowDigest struct {
	d     *xxhash.Digest
	rows  uint64
	lenbf [2 * binary.MaxVarintLen64]byte
}

// Add folds one row into the digest.
func (r *RowDigest) Add(key, value []byte) {
	if r.d == nil {
		r.d = xxhash.New()
	}
	n := binary.PutUvarint(r.lenbf[:], uint64(len(key)))
	n += binary.PutUvarint(r.lenbf[n:], uint64(len(value)))
	_, _ = r.d.Write(r.lenbf[:n])
	_, _ = r.d.Write(key)
	_, _ = r.d.Write(value)
	r.rows++
}

// AddPacked folds in the n rows of packed, rows in the packed encoding
// (AppendPackedRow; UnpackRows accepts nothing else): that encoding is the
// byte stream Add hashes for each row, so one Write covers the batch and
// the sum equals n calls of Add.
func (r *RowDigest) AddPacked(packed []byte, n int) {
	if len(packed) == 0 {
		return // no rows (the sum of none stays 0)
	}
	if r.d == nil {
		r.d = xxhash.New()
	}
	_, _ = r.d.Write(packed)
	r.rows += uint64(n)
}

// Count adds n rows to the count without hashing them, for a stream
// whose rows are checked another way (block proofs): Sum then covers
// only the rows folded in by Add and AddPacked.
func (r *RowDigest) Count(n int) { r.rows += uint64(n) }

// Rows is the number of rows folded in.
func (r *RowDigest) Rows() uint64 { return r.rows }

// Sum is the checksum of the rows so far (0 for none).
func (r *RowDigest) Sum() uint64 {
	if r.d == nil {
		return 0
	}
	return r.d.Sum64()
}
