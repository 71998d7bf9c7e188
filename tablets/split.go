package tablets

import (
	"bytes"
	"fmt"
	"sort"
)

// ValidateSplits checks split points: every key non-empty, at most
// MaxKeyLen bytes, strictly increasing. Errors wrap ErrBadSplits and name
// the offending index.
func ValidateSplits(splits [][]byte) error {
	for i, s := range splits {
		if len(s) == 0 {
			return fmt.Errorf("%w: split point %d is empty", ErrBadSplits, i)
		}
		if len(s) > MaxKeyLen {
			return fmt.Errorf("%w: split point %d is %d bytes, at most %d allowed", ErrBadSplits, i, len(s), MaxKeyLen)
		}
		if i > 0 && bytes.Compare(splits[i-1], s) >= 0 {
			return fmt.Errorf("%w: split point %d (%s) is not greater than split point %d (%s)",
				ErrBadSplits, i, FormatKey(s), i-1, FormatKey(splits[i-1]))
		}
	}
	return nil
}

// TabletCount is the number of tablets for these split points: len+1.
func TabletCount(splits [][]byte) int { return len(splits) + 1 }

// TabletRange is the range of tablet i: [splits[i-1], splits[i]), the
// first tablet open at the start and the last open at the end. An i out of
// [0, TabletCount) yields an empty range (it contains no key).
func TabletRange(splits [][]byte, i int) Range {
	if i < 0 || i > len(splits) {
		return Range{Start: []byte{0}, End: []byte{0}}
	}
	var r Range
	if i > 0 {
		r.Start = splits[i-1]
	}
	if i < len(splits) {
		r.End = splits[i]
	}
	return r
}

// TabletFor is the index of the tablet holding key: the number of split
// points <= key (a key equal to a split point belongs to the tablet that
// starts at it). splits must be valid (ValidateSplits).
func TabletFor(splits [][]byte, key []byte) int {
	return sort.Search(len(splits), func(i int) bool { return bytes.Compare(splits[i], key) > 0 })
}

// Piece is the part of a range that falls in one tablet.
type Piece struct {
	Tablet int
	Range  Range // already intersected with the tablet's range
}

// SplitRange splits r over the tablets of splits, in key order, returning
// only non-empty pieces. An empty (or invalid) range yields nil.
func SplitRange(splits [][]byte, r Range) []Piece {
	if r.Empty() {
		return nil
	}
	first := 0
	if len(r.Start) > 0 {
		first = TabletFor(splits, r.Start)
	}
	last := len(splits)
	if len(r.End) > 0 {
		// The last tablet whose start is < End: number of splits < End.
		last = sort.Search(len(splits), func(i int) bool { return bytes.Compare(splits[i], r.End) >= 0 })
	}
	var out []Piece
	for i := first; i <= last; i++ {
		p := TabletRange(splits, i).Intersect(r)
		if p.Empty() {
			continue
		}
		out = append(out, Piece{Tablet: i, Range: p})
	}
	return out
}
