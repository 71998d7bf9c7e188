package policysim

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestEventQCompact: after compact drops the dead events, the rest pop
// in (at, seq) order, as from a queue that never held the dead ones,
// also when pushes and pops go on after it.
func TestEventQCompact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var q eventQ
	var want []qkey // the live events, kept sorted when popped
	seq := uint64(0)
	push := func(srv int32) {
		seq++
		e := event{at: rng.Int64N(1000), seq: seq, srv: srv} // srv 0: dead at the compaction
		q.push(e)
		if e.srv != 0 {
			want = append(want, qkey{at: e.at, seq: e.seq})
		}
	}
	for range 5000 {
		push(int32(rng.IntN(3)))
	}
	q.compact(func(e *event) bool { return e.srv == 0 })
	if q.len() != len(want) {
		t.Fatalf("after compact %d events, want %d", q.len(), len(want))
	}
	for range 2000 { // the freed slots are reused
		push(1)
	}
	slices.SortFunc(want, func(a, b qkey) int {
		if a.less(b) {
			return -1
		}
		return 1
	})
	for i, w := range want {
		e := q.pop()
		if e.at != w.at || e.seq != w.seq {
			t.Fatalf("pop %d: (%d, %d), want (%d, %d)", i, e.at, e.seq, w.at, w.seq)
		}
	}
	if q.len() != 0 {
		t.Fatalf("%d events left", q.len())
	}
}
