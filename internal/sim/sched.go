package sim

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/scanplane/scanplane/internal/actorenv"
)

// epoch is the fake clock's start: a fixed instant, so that every replay
// of a seed sees the same times.
var epoch = time.Unix(1_700_000_000, 0).UTC()

// event is one thing that happens at a fake instant: a mailbox run, a
// message arriving, a timer firing, a goroutine resuming, a fault. Events
// at the same instant run in the order they were scheduled (seq).
type event struct {
	at   time.Time
	seq  uint64
	fn   func()
	dead bool // cancelled before it ran
	ran  bool
	idx  int // position in the heap; -1 once popped
	what string
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

// scheduler is the run's only source of time and randomness: a fake
// clock that moves only from one event to the next, one PCG stream seeded
// with the run's seed, and the goroutines (coroutines) the actors start,
// of which at most one runs at a time, while the scheduler waits.
type scheduler struct {
	now   time.Time
	rng   *rand.Rand
	queue eventHeap
	seq   uint64
	steps int
	// coros: the goroutines started through Env.Go that have not ended;
	// current: the one running now (nil: the scheduler's own goroutine).
	coros   []*coro
	current *coro
	// crashed: a goroutine's panic, reported as a problem.
	crashed []string
}

func newScheduler(seed uint64) *scheduler {
	return &scheduler{now: epoch, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// at schedules fn at t (not before now).
func (s *scheduler) at(t time.Time, what string, fn func()) *event {
	if t.Before(s.now) {
		t = s.now
	}
	s.seq++
	e := &event{at: t, seq: s.seq, fn: fn, what: what}
	heap.Push(&s.queue, e)
	return e
}

// after schedules fn d from now.
func (s *scheduler) after(d time.Duration, what string, fn func()) *event {
	return s.at(s.now.Add(d), what, fn)
}

// cancel stops an event that has not run; it reports whether it did.
func (s *scheduler) cancel(e *event) bool {
	if e == nil || e.dead || e.ran {
		return false
	}
	e.dead = true
	if e.idx >= 0 {
		heap.Remove(&s.queue, e.idx)
	}
	return true
}

// step runs the next event, then wakes the goroutines whose wait is
// over; false when no event is left or the next one is after limit.
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
		e.ran = true
		e.fn()
		s.poll()
		return true
	}
	return false
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

// coro is one goroutine an actor started (Env.Go): a real goroutine that
// runs only while the scheduler hands it the turn, and hands it back when
// it ends or waits (Env.Wait). So goroutines never run alongside each
// other or the actors, and a run stays one sequence of steps.
type coro struct {
	s      *scheduler
	p      *proc
	inc    int
	what   string
	fn     func()
	resume chan bool // true: run; false: the process died, give up
	yield  chan struct{}
	begun  bool
	done   bool
	// while waiting: what ends the wait, and whether a resume is due.
	waiting  bool
	ready    func() bool
	ctx      context.Context
	timedOut bool
	timeout  *simTimer
	due      bool
}

// spawn starts fn as a goroutine of p's incarnation inc, as a step.
func (s *scheduler) spawn(p *proc, inc int, what string, fn func()) {
	c := &coro{s: s, p: p, inc: inc, what: what, fn: fn, resume: make(chan bool), yield: make(chan struct{})}
	s.coros = append(s.coros, c)
	c.due = true
	p.at(0, inc, "start "+what, func() { s.run(c, true) }, func() { s.run(c, false) })
}

// run gives c the turn until it waits again or ends.
func (s *scheduler) run(c *coro, alive bool) {
	c.due = false
	if c.done {
		return
	}
	if !c.begun {
		if !alive {
			c.done = true
			s.drop(c)
			return
		}
		c.begun = true
		go c.main()
	}
	prev := s.current
	s.current = c
	c.resume <- alive
	<-c.yield
	s.current = prev
	if c.done {
		s.drop(c)
	}
}

func (c *coro) main() {
	defer func() {
		if r := recover(); r != nil {
			c.s.crashed = append(c.s.crashed, fmt.Sprintf("goroutine %s of %s panicked: %v", c.what, c.p.addr, r))
		}
		c.done = true
		c.yield <- struct{}{}
	}()
	if !<-c.resume {
		return
	}
	c.fn()
}

func (s *scheduler) drop(c *coro) {
	for i, o := range s.coros {
		if o == c {
			s.coros = append(s.coros[:i], s.coros[i+1:]...)
			return
		}
	}
}

// wait is Env.Wait for the goroutine running now.
func (s *scheduler) wait(ctx context.Context, ready func() bool, timeout time.Duration) error {
	c := s.current
	if c == nil {
		panic("sim: Env.Wait called outside a goroutine started with Env.Go")
	}
	if ready() {
		return nil
	}
	c.waiting, c.ready, c.ctx, c.timedOut = true, ready, ctx, false
	if timeout > 0 {
		c.timeout = c.p.timer(c.inc, timeout, "wait timeout of "+c.what, func() { c.timedOut = true })
	}
	defer func() {
		c.waiting, c.ready, c.ctx = false, nil, nil
		if c.timeout != nil {
			c.timeout.Stop()
			c.timeout = nil
		}
	}()
	for {
		c.yield <- struct{}{}
		if !<-c.resume {
			return context.Canceled
		}
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case ready():
			return nil
		case c.timedOut:
			return actorenv.ErrWaitTimeout
		}
	}
}

// sleep parks the goroutine running now for d (a slow block read); on
// the scheduler's own goroutine it does nothing.
func (s *scheduler) sleep(ctx context.Context, d time.Duration) error {
	if s.current == nil || d <= 0 {
		return nil
	}
	err := s.wait(ctx, func() bool { return false }, d)
	if err == actorenv.ErrWaitTimeout {
		return nil
	}
	return err
}

// poll schedules a resume for each waiting goroutine whose wait is over,
// in the order they were started.
func (s *scheduler) poll() {
	for _, c := range s.coros {
		if !c.waiting || c.due {
			continue
		}
		if c.timedOut || c.ctx.Err() != nil || c.ready() {
			c.due = true
			c.p.at(0, c.inc, "resume "+c.what, func() { s.run(c, true) }, func() { s.run(c, false) })
		}
	}
}
