package sim

import (
	"context"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/internal/actorenv"
	"github.com/scanplane/scanplane/internal/remoting"
)

type procState uint8

const (
	procUp procState = iota
	procPaused
	procDead
)

func (s procState) String() string { return [...]string{"up", "paused", "dead"}[s] }

// proc is one simulated OS process: an address, an incarnation that
// changes when it restarts, its own clock (the run's plus a skew), and,
// for coordinators and hosts, the actor system of its incarnation. While
// paused (SIGSTOP) its mailbox runs, timers, goroutines and arriving
// messages wait and run, in order, when it resumes; when it dies they are
// lost with its state.
type proc struct {
	w     *world
	addr  string
	inc   int
	state procState
	held  []func()
	skew  time.Duration
	sys   *actor.ActorSystem
}

// now is the process's clock.
func (p *proc) now() time.Time { return p.w.s.now.Add(p.skew) }

// at runs fn d from now if incarnation inc is then up (later, when it
// resumes, if it is paused); onDead (may be nil) runs instead if it died.
func (p *proc) at(d time.Duration, inc int, what string, fn, onDead func()) *event {
	return p.w.s.after(d, what, func() { p.run(inc, fn, onDead) })
}

func (p *proc) run(inc int, fn, onDead func()) {
	switch {
	case p.inc != inc || p.state == procDead:
		if onDead != nil {
			onDead()
		}
	case p.state == procPaused:
		p.held = append(p.held, func() { p.run(inc, fn, onDead) })
	default:
		fn()
	}
}

func (p *proc) resume() {
	p.state = procUp
	held := p.held
	p.held = nil
	for _, fn := range held {
		fn()
	}
}

// simTimer is an Env timer: an event of one incarnation.
type simTimer struct {
	s       *scheduler
	e       *event
	stopped bool
	fired   bool
}

// Stop implements actorenv.Timer.
func (t *simTimer) Stop() bool {
	if t.stopped || t.fired {
		return false
	}
	t.stopped = true
	t.s.cancel(t.e)
	return true
}

// timer starts an Env timer of incarnation inc.
func (p *proc) timer(inc int, d time.Duration, what string, fn func()) *simTimer {
	t := &simTimer{s: p.w.s}
	t.e = p.at(d, inc, what, func() {
		if t.stopped {
			return
		}
		t.fired = true
		fn()
	}, nil)
	return t
}

// dispatcher runs the mailboxes of one incarnation's actors as steps.
type dispatcher struct {
	p   *proc
	inc int
}

// Schedule implements actor.Dispatcher: the mailbox runs as a step a
// moment later (a random few microseconds, drawn from the seed), so that
// actors of one process interleave differently from seed to seed.
func (d dispatcher) Schedule(fn func()) {
	d.p.at(d.p.w.s.uniform(0, 20*time.Microsecond), d.inc, "mailbox", fn, nil)
}

// Throughput implements actor.Dispatcher.
func (dispatcher) Throughput() int { return 300 }

// env is the actorenv.Env of incarnation inc.
func (p *proc) env(inc int) actorenv.Env {
	s := p.w.s
	return actorenv.Env{
		AfterFunc: func(d time.Duration, f func()) actorenv.Timer { return p.timer(inc, d, "timer", f) },
		Go:        func(f func()) { s.spawn(p, inc, "goroutine", f) },
		Wait: func(ctx context.Context, _ <-chan struct{}, ready func() bool, timeout time.Duration) error {
			return s.wait(ctx, ready, timeout)
		},
		Dispatcher: dispatcher{p: p, inc: inc},
		// Work takes no time on the fake clock.
		Elapsed: func(time.Time) time.Duration { return 0 },
	}
}

// newSystem makes the actor system of p's current incarnation: its
// address is p's, and every other address resolves to the simulated
// network.
func (p *proc) newSystem() *actor.ActorSystem {
	as := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return remoting.DiscardLogger() }),
		actor.WithDeadLetterThrottleInterval(time.Millisecond))
	as.ProcessRegistry.Address = p.addr
	inc := p.inc
	as.ProcessRegistry.RegisterAddressResolver(func(to *actor.PID) (actor.Process, bool) {
		return &netProcess{w: p.w, from: p, inc: inc}, true
	})
	return as
}

// kill ends p's incarnation: its goroutines give up, its state is lost.
func (p *proc) kill() {
	p.state = procDead
	p.held = nil
	for _, c := range append([]*coro(nil), p.w.s.coros...) {
		if c.p == p && c.begun && !c.done && !c.due {
			p.w.s.run(c, false)
		}
	}
}
