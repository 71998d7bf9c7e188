package protosim

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sort"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// truthTable is the ground truth: one table's sorted rows and its
// tablets. Scan servers read from it; every scan's result is compared
// with it.
type truthTable struct {
	name string
	rows []*messages.Row
	refs []*messages.TabletRef
}

// newTruthTable makes rows "row000000".. with random values, split into
// tabletCount tablets at random row boundaries.
func newTruthTable(rng *rand.Rand, rowCount, tabletCount int) *truthTable {
	t := &truthTable{name: "sim"}
	for i := range rowCount {
		v := make([]byte, 1+rng.IntN(12))
		for j := range v {
			v[j] = byte(rng.UintN(256))
		}
		t.rows = append(t.rows, &messages.Row{Key: fmt.Appendf(nil, "row%06d", i), Value: v})
	}
	cuts := map[int]bool{}
	for len(cuts) < tabletCount-1 && len(cuts) < rowCount-1 {
		cuts[1+rng.IntN(rowCount-1)] = true
	}
	var splits [][]byte
	for i := range rowCount {
		if cuts[i] {
			splits = append(splits, t.rows[i].Key)
		}
	}
	var prev []byte
	for i := 0; i <= len(splits); i++ {
		var end []byte
		if i < len(splits) {
			end = splits[i]
		}
		t.refs = append(t.refs, &messages.TabletRef{Table: t.name, Generation: 1, Index: uint32(i), PrevEndRow: prev, EndRow: end})
		prev = end
	}
	return t
}

// tabletRange is tablet i's key range.
func (t *truthTable) tabletRange(i int) tablets.Range {
	return tablets.Range{Start: t.refs[i].GetPrevEndRow(), End: t.refs[i].GetEndRow()}
}

// scan returns the rows of rng after key `after` (nil = from the start),
// in order. The slice is shared: never modify it.
func (t *truthTable) scan(rng tablets.Range, after []byte) []*messages.Row {
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
