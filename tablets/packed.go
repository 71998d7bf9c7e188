package tablets

import (
	"encoding/binary"
	"fmt"

	"github.com/scanplane/scanplane/messages"
)

// Packed rows: the encoding of RowBatch.packed_rows and of a block's
// entries. Each row is uvarint(len key) uvarint(len value) key value,
// back to back. One bytes field per batch instead of one Row message per
// row: a receiver makes two allocations per batch (UnpackRows), not three
// per row, and the sender marshals one field. Being a block's own
// encoding, a run of a block's rows is one slice of it, and the leaves of
// the row digest tree (merkle.go) hash those bytes as a batch carries
// them.

// AppendPackedRow appends one row to dst in the packed encoding.
func AppendPackedRow(dst, key, value []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = binary.AppendUvarint(dst, uint64(len(value)))
	dst = append(dst, key...)
	return append(dst, value...)
}

// PackedKeyAt is where the key of a row that AppendPackedRow appended at
// offset rowStart begins (after its two lengths).
func PackedKeyAt(rowStart, keyLen, valueLen int) int {
	return rowStart + uvarintLen(uint64(keyLen)) + uvarintLen(uint64(valueLen))
}

// PackedRowSize is how many bytes AppendPackedRow adds for a row.
func PackedRowSize(keyLen, valueLen int) int {
	return uvarintLen(uint64(keyLen)) + uvarintLen(uint64(valueLen)) + keyLen + valueLen
}

// PackedKey is the key of the row at the start of b, rows in the packed
// encoding that UnpackRows accepts (or AppendPackedRow wrote).
func PackedKey(b []byte) []byte {
	kl, n := uvarint(b)
	_, m := uvarint(b[n:])
	k := n + m + int(kl)
	return b[n+m : k : k]
}

// UnpackRows decodes packed rows into one slab of Entries (one
// allocation per batch when hint, the number of rows expected, is right;
// any hint is safe). The rows' keys and values alias b (full slice
// expressions: appending to one never overwrites the next). A truncated
// or oversized field, or a length not in its shortest uvarint form, is an
// error wrapping ErrCorrupt that names the row and byte offset; keys and
// values beyond MaxKeyLen / MaxValueLen are refused.
func UnpackRows(b []byte, hint int) ([]Entry, error) {
	return AppendUnpacked(make([]Entry, 0, unpackCap(b, hint)), b)
}

// unpackCap is the slab UnpackRows makes for b: hint rows, bounded by
// b's size. Every row takes at least 2 bytes: a hint from the network
// cannot make a slab larger than the batch warrants.
func unpackCap(b []byte, hint int) int { return max(0, min(hint, len(b)/2)) }

// AppendUnpacked is UnpackRows appending to dst: a caller that recycles
// its slabs passes one emptied (dst[:0]) and makes no allocation while
// it is large enough. On error it returns nil; dst's contents past its
// length are then undefined. Row numbers in errors count from b's
// first row.
func AppendUnpacked(dst []Entry, b []byte) ([]Entry, error) {
	rows, base := dst, len(dst)
	for off := 0; off < len(b); {
		kl, next, err := packedLen(b, off, len(rows)-base, "key", MaxKeyLen)
		if err != nil {
			return nil, err
		}
		vl, next, err := packedLen(b, next, len(rows)-base, "value", MaxValueLen)
		if err != nil {
			return nil, err
		}
		if kl+vl > len(b)-next {
			return nil, fmt.Errorf("%w: packed row %d: key and value of %d+%d bytes at byte %d (%d left)", ErrCorrupt, len(rows)-base, kl, vl, off, len(b)-next)
		}
		k, v := next+kl, next+kl+vl
		rows = append(rows, Entry{Key: b[next:k:k], Value: b[k:v:v]})
		off = v
	}
	return rows, nil
}

// packedLen reads the length at b[off:] (row is its row's index, for the
// error) and returns it and the offset after it.
func packedLen(b []byte, off, row int, what string, limit int) (int, int, error) {
	var l uint64
	var w int
	if off < len(b) && b[off] < 0x80 { // most lengths: inlined
		l, w = uint64(b[off]), 1
	} else {
		l, w = binary.Uvarint(b[off:])
		if w <= 0 || w != uvarintLen(l) {
			// Only the shortest form: a run of rows then has one
			// encoding, the bytes the row digest tree's leaves hash.
			return 0, 0, fmt.Errorf("%w: packed row %d: bad %s length at byte %d", ErrCorrupt, row, what, off)
		}
	}
	if l > uint64(limit) {
		return 0, 0, fmt.Errorf("%w: packed row %d: %s of %d bytes at byte %d (at most %d)", ErrCorrupt, row, what, l, off, limit)
	}
	return int(l), off + w, nil
}

// BatchRows returns a RowBatch's rows from either encoding: packed_rows
// (UnpackRows, hint as there) or rows, whose keys and values it aliases. A
// batch with both, or with packed rows that do not decode, is an error
// wrapping ErrCorrupt that names the batch's seq.
func BatchRows(b *messages.RowBatch, hint int) ([]Entry, error) {
	return AppendBatchRows(make([]Entry, 0, BatchRowsCap(b, hint)), b)
}

// BatchRowsCap is the slab BatchRows makes for b given hint: room for
// every row of rows, or for packed_rows as UnpackRows bounds it. A caller
// of AppendBatchRows with recycled slabs sizes a slab by it.
func BatchRowsCap(b *messages.RowBatch, hint int) int {
	if p := b.GetPackedRows(); len(p) > 0 {
		return unpackCap(p, hint)
	}
	return len(b.GetRows())
}

// AppendBatchRows is BatchRows appending to dst (see AppendUnpacked).
func AppendBatchRows(dst []Entry, b *messages.RowBatch) ([]Entry, error) {
	p := b.GetPackedRows()
	if len(p) == 0 {
		for _, r := range b.GetRows() {
			dst = append(dst, Entry{Key: r.GetKey(), Value: r.GetValue()})
		}
		return dst, nil
	}
	if len(b.GetRows()) > 0 {
		return nil, fmt.Errorf("%w: batch %d has both rows (%d) and packed_rows", ErrCorrupt, b.GetSeq(), len(b.GetRows()))
	}
	rows, err := AppendUnpacked(dst, p)
	if err != nil {
		return nil, fmt.Errorf("batch %d: %w", b.GetSeq(), err)
	}
	return rows, nil
}
