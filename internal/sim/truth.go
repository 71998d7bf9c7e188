package sim

import (
	"bytes"
	"sort"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// truthTable is the ground truth: one table's sorted rows and its
// tablets. Scan servers read from it; every scan's result is compared
// with it.
type truthTable struct {
	name string
	rows []tablets.Entry
	refs []*messages.TabletRef
	// roots: each tablet's block roots in block order, what a client
	// verifies rows against.
	roots [][]tablets.Digest
}

// tabletRange is tablet i's key range.
func (t *truthTable) tabletRange(i int) tablets.Range {
	return tablets.Range{Start: t.refs[i].GetPrevEndRow(), End: t.refs[i].GetEndRow()}
}

// scan returns the rows of rng after key `after` (nil = from the start),
// in order. The slice is shared: never modify it.
func (t *truthTable) scan(rng tablets.Range, after []byte) []tablets.Entry {
	lo := sort.Search(len(t.rows), func(i int) bool {
		k := t.rows[i].Key
		if len(after) > 0 && bytes.Compare(k, after) <= 0 {
			return false
		}
		return len(rng.Start) == 0 || bytes.Compare(k, rng.Start) >= 0
	})
	hi := len(t.rows)
	if len(rng.End) > 0 {
		hi = sort.Search(len(t.rows), func(i int) bool { return bytes.Compare(t.rows[i].Key, rng.End) >= 0 })
	}
	if hi < lo {
		hi = lo
	}
	return t.rows[lo:hi]
}
