package protosim

import (
	"container/heap"
	"math/rand/v2"
	"time"
)

// epoch is the fake clock's start: a fixed instant, so deadlines on the
// wire (unix milliseconds) are the same in every replay of a seed.
var epoch = time.Unix(1_700_000_000, 0).UTC()

// event is one thing that happens at a fake instant: a message arriving,
// a timer firing, a fault. Events at the same instant run in the order
// they were scheduled (seq), so a seed always replays the same way.
type event struct {
	at   time.Time
	seq  uint64
	fn   func()
	dead bool // cancelled before it ran
	idx  int  // position in the heap; -1 once popped
	// owner is the request a timer belongs to ("" = none): the leak check
	// looks for live timers of finished scans.
	owner string
	what  string
	// proc and inc: the process incarnation a timer belongs to (nil for
	// the world's own events); a timer of a dead incarnation is inert.
	proc *process
	inc  int
}

// live reports whether the event can still do something.
func (e *event) live() bool {
	return !e.dead && (e.proc == nil || (e.proc.inc == e.inc && e.proc.state != procDead))
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].idx = i; h[j].idx = j }
func (h *eventHeap) Push(x any)   { e := x.(*event); e.idx = len(*h); *h = append(*h, e) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.idx = -1
	return e
}

// scheduler is the simulation's only source of time and randomness: a
// fake clock that moves only from one event to the next, and one PCG
// stream seeded with the run's seed.
type scheduler struct {
	now   time.Time
	rng   *rand.Rand
	queue eventHeap
	seq   uint64
	steps int
}

func newScheduler(seed uint64) *scheduler {
	return &scheduler{now: epoch, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// at schedules fn at t (not before now).
func (s *scheduler) at(t time.Time, owner, what string, fn func()) *event {
	if t.Before(s.now) {
		t = s.now
	}
	s.seq++
	e := &event{at: t, seq: s.seq, fn: fn, owner: owner, what: what}
	heap.Push(&s.queue, e)
	return e
}

// after schedules fn d from now.
func (s *scheduler) after(d time.Duration, owner, what string, fn func()) *event {
	return s.at(s.now.Add(d), owner, what, fn)
}

// cancel stops an event that has not run, including a timer that fired
// while its process was paused and waits for it to resume (nil and ran
// events are fine).
func (s *scheduler) cancel(e *event) {
	if e == nil || e.dead {
		return
	}
	e.dead = true
	if e.idx >= 0 {
		heap.Remove(&s.queue, e.idx)
	}
}

// step runs the next event; false when none is left or the next one is
// after limit.
func (s *scheduler) step(limit time.Time) bool {
	for len(s.queue) > 0 {
		if s.queue[0].at.After(limit) {
			return false
		}
		e := heap.Pop(&s.queue).(*event)
		if e.dead {
			continue
		}
		s.now = e.at
		s.steps++
		e.fn()
		return true
	}
	return false
}

// pending returns the live events owned by request id.
func (s *scheduler) pending(owner string) []*event {
	var out []*event
	for _, e := range s.queue {
		if e.owner == owner && e.live() {
			out = append(out, e)
		}
	}
	return out
}

// uniform returns a duration in [lo, hi].
func (s *scheduler) uniform(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)+1))
}

// chance reports true with probability p.
func (s *scheduler) chance(p float64) bool { return p > 0 && s.rng.Float64() < p }
