package policysim

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// refQ is the order eventQ must pop in: every event, sorted by (at,
// seq); slot 0 marks the dead ones.
type refQ []qkey

func (r *refQ) pop() qkey {
	i := 0
	for j := range *r {
		if (*r)[j].less((*r)[i]) {
			i = j
		}
	}
	k := (*r)[i]
	*r = slices.Delete(*r, i, i+1)
	return k
}

// TestEventQOrder: events pop in (at, seq) order whether they wait in the
// heap or in a lane, while pushes (at the time of the latest pop) and
// pops interleave, and after compact drops the dead ones, as from a queue
// that never held them.
func TestEventQOrder(t *testing.T) {
	for _, lanes := range [][]int64{nil, {5, 0, 40}} {
		rng := rand.New(rand.NewPCG(1, 2))
		var q eventQ
		q.setLanes(lanes)
		var want refQ
		seq, now := uint64(0), int64(0)
		push := func(dead bool) {
			seq++
			d := rng.Int64N(100)
			if len(lanes) > 0 && rng.IntN(3) > 0 {
				d = lanes[rng.IntN(len(lanes))]
			}
			e := event{at: now + d, seq: seq, srv: 1}
			if dead {
				e.srv = 0
			}
			q.push(e, now)
			want = append(want, qkey{at: e.at, seq: e.seq, slot: e.srv})
		}
		pop := func(step int) {
			w := want.pop()
			e := q.pop()
			if e.at != w.at || e.seq != w.seq {
				t.Fatalf("lanes %v, pop %d: (%d, %d), want (%d, %d)", lanes, step, e.at, e.seq, w.at, w.seq)
			}
			now = e.at
		}
		for i := range 6000 {
			push(rng.IntN(3) == 0)
			if i%3 == 2 {
				pop(i)
			}
			if i == 3000 {
				q.compact(func(e *event) bool { return e.srv == 0 })
				want = slices.DeleteFunc(want, func(k qkey) bool { return k.slot == 0 })
				if q.len() != len(want) {
					t.Fatalf("lanes %v: after compact %d events, want %d", lanes, q.len(), len(want))
				}
			}
		}
		q.compact(func(e *event) bool { return e.srv == 0 })
		want = slices.DeleteFunc(want, func(k qkey) bool { return k.slot == 0 })
		for i := 0; len(want) > 0; i++ {
			pop(i)
		}
		if q.len() != 0 {
			t.Fatalf("lanes %v: %d events left", lanes, q.len())
		}
	}
}
