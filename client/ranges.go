package client

import (
	"bytes"

	"github.com/scanplane/scanplane/tablets"
)

// Range is a key range [Start, End) of a table: Start inclusive, End
// exclusive; an empty Start is the table's first key, an empty End its
// end. Range{} is the whole table. Build one with KeyRange, Prefix or
// SingleKey.
type Range = tablets.Range

// KeyRange is the range [start, end): from start (inclusive; empty = the
// first key) to end (exclusive; empty = the table's end).
func KeyRange(start, end []byte) Range {
	return Range{Start: bytes.Clone(start), End: bytes.Clone(end)}
}

// Prefix is the range of every key that starts with p (Prefix(nil) is the
// whole table).
func Prefix(p []byte) Range {
	end := bytes.Clone(p)
	for len(end) > 0 && end[len(end)-1] == 0xff {
		end = end[:len(end)-1]
	}
	if len(end) > 0 {
		end[len(end)-1]++
	}
	// A prefix of only 0xff bytes has no successor: the range runs to the
	// table's end.
	return Range{Start: bytes.Clone(p), End: end}
}

// SingleKey is the range holding exactly the key k.
func SingleKey(k []byte) Range {
	return Range{Start: bytes.Clone(k), End: append(bytes.Clone(k), 0)}
}
