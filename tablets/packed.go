package tablets

import (
	"encoding/binary"
	"fmt"

	"github.com/scanplane/scanplane/messages"
)

// Packed rows: the encoding of RowBatch.packed_rows. Each row is
// uvarint(len key) key uvarint(len value) value, back to back. One bytes
// field per batch instead of one Row message per row: a receiver makes
// two allocations per batch (UnpackRows), not three per row, and the
// sender marshals one field, which bounds a whole-tablet scan's rate.

// AppendPackedRow appends one row to dst in the packed encoding.
func AppendPackedRow(dst, key, value []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	dst = binary.AppendUvarint(dst, uint64(len(value)))
	return append(dst, value...)
}

// PackedKeyAt is where the key of a row that AppendPackedRow appended at
// offset rowStart begins (after its length).
func PackedKeyAt(rowStart, keyLen int) int { return rowStart + uvarintLen(uint64(keyLen)) }

// PackedRowSize is how many bytes AppendPackedRow adds for a row.
func PackedRowSize(keyLen, valueLen int) int {
	return uvarintLen(uint64(keyLen)) + keyLen + uvarintLen(uint64(valueLen)) + valueLen
}

// UnpackRows decodes packed rows into one slab of Entries (one
// allocation per batch when hint, the number of rows expected, is right;
// any hint is safe). The rows' keys and values alias b (full slice
// expressions: appending to one never overwrites the next). A truncated
// or oversized field, or a length not in its shortest uvarint form, is an
// error wrapping ErrCorrupt that names the row and byte offset; keys and
// values beyond MaxKeyLen / MaxValueLen are refused.
func UnpackRows(b []byte, hint int) ([]Entry, error) {
	// Every row takes at least 2 bytes: a hint from the network cannot
	// make a slab larger than the batch warrants.
	rows := make([]Entry, 0, max(0, min(hint, len(b)/2)))
	for off := 0; off < len(b); {
		k, next, err := packedField(b, off, len(rows), "key", MaxKeyLen)
		if err != nil {
			return nil, err
		}
		v, next, err := packedField(b, next, len(rows), "value", MaxValueLen)
		if err != nil {
			return nil, err
		}
		rows = append(rows, Entry{Key: k, Value: v})
		off = next
	}
	return rows, nil
}

// packedField reads the length-prefixed field at b[off:] (row is its row's
// index, for the error) and returns it and the offset after it.
func packedField(b []byte, off, row int, what string, limit int) ([]byte, int, error) {
	var l uint64
	var w int
	if off < len(b) && b[off] < 0x80 { // most lengths: inlined
		l, w = uint64(b[off]), 1
	} else {
		l, w = binary.Uvarint(b[off:])
		if w <= 0 || w != uvarintLen(l) {
			// Only the shortest form: the bytes are then exactly what
			// RowDigest.Add hashes for the row (RowDigest.AddPacked).
			return nil, 0, fmt.Errorf("%w: packed row %d: bad %s length at byte %d", ErrCorrupt, row, what, off)
		}
	}
	if l > uint64(limit) || l > uint64(len(b)-off-w) {
		return nil, 0, fmt.Errorf("%w: packed row %d: %s of %d bytes at byte %d (%d left, at most %d)", ErrCorrupt, row, what, l, off, len(b)-off-w, limit)
	}
	start := off + w
	end := start + int(l)
	return b[start:end:end], end, nil
}

// BatchRows returns a RowBatch's rows from either encoding: packed_rows
// (UnpackRows, hint as there) or rows, whose keys and values it aliases. A
// batch with both, or with packed rows that do not decode, is an error
// wrapping ErrCorrupt that names the batch's seq.
func BatchRows(b *messages.RowBatch, hint int) ([]Entry, error) {
	p := b.GetPackedRows()
	if len(p) == 0 {
		rows := make([]Entry, len(b.GetRows()))
		for i, r := range b.GetRows() {
			rows[i] = Entry{Key: r.GetKey(), Value: r.GetValue()}
		}
		return rows, nil
	}
	if len(b.GetRows()) > 0 {
		return nil, fmt.Errorf("%w: batch %d has both rows (%d) and packed_rows", ErrCorrupt, b.GetSeq(), len(b.GetRows()))
	}
	rows, err := UnpackRows(p, hint)
	if err != nil {
		return nil, fmt.Errorf("batch %d: %w", b.GetSeq(), err)
	}
	return rows, nil
}
