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
// sender marshals one field (issue 11, the whole-tablet scan rate).

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

// UnpackRows decodes packed rows. The rows' keys and values alias b (full
// slice expressions: appending to one never overwrites the next). A
// truncated or oversized field, or a length not in its shortest uvarint
// form, is an error wrapping ErrCorrupt that names the row and byte
// offset; keys and values beyond MaxKeyLen / MaxValueLen are refused.
func UnpackRows(b []byte) ([]*messages.Row, error) {
	n, err := walkPacked(b, nil)
	if err != nil {
		return nil, err
	}
	slab := make([]messages.Row, n)
	rows := make([]*messages.Row, n)
	i := 0
	_, _ = walkPacked(b, func(k, v []byte) {
		slab[i].Key, slab[i].Value = k, v
		rows[i] = &slab[i]
		i++
	})
	return rows, nil
}

// BatchRows returns a RowBatch's rows from either encoding: packed_rows
// (UnpackRows) or rows. A batch with both, or with packed rows that do not
// decode, is an error wrapping ErrCorrupt that names the batch's seq.
func BatchRows(b *messages.RowBatch) ([]*messages.Row, error) {
	p := b.GetPackedRows()
	if len(p) == 0 {
		return b.GetRows(), nil
	}
	if len(b.GetRows()) > 0 {
		return nil, fmt.Errorf("%w: batch %d has both rows (%d) and packed_rows", ErrCorrupt, b.GetSeq(), len(b.GetRows()))
	}
	rows, err := UnpackRows(p)
	if err != nil {
		return nil, fmt.Errorf("batch %d: %w", b.GetSeq(), err)
	}
	return rows, nil
}

// walkPacked checks b and counts its rows, calling each (if set) per row.
func walkPacked(b []byte, each func(k, v []byte)) (int, error) {
	n, off := 0, 0
	field := func(what string, limit int) ([]byte, error) {
		l, w := binary.Uvarint(b[off:])
		if w <= 0 || w != uvarintLen(l) {
			// Only the shortest form: the bytes are then exactly what
			// RowDigest.Add hashes for the row (RowDigest.AddPacked).
			return nil, fmt.Errorf("%w: packed row %d: bad %s length at byte %d", ErrCorrupt, n, what, off)
		}
		if l > uint64(limit) || l > uint64(len(b)-off-w) {
			return nil, fmt.Errorf("%w: packed row %d: %s of %d bytes at byte %d (%d left, at most %d)", ErrCorrupt, n, what, l, off, len(b)-off-w, limit)
		}
		start := off + w
		off = start + int(l)
		return b[start:off:off], nil
	}
	for off < len(b) {
		k, err := field("key", MaxKeyLen)
		if err != nil {
			return 0, err
		}
		v, err := field("value", MaxValueLen)
		if err != nil {
			return 0, err
		}
		if each != nil {
			each(k, v)
		}
		n++
	}
	return n, nil
}
