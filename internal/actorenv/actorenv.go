// Package actorenv is what the coordinator's and the scan server's actors
// ask of their surroundings besides messages: timers, the goroutines they
// start (metadata loads, block-reading workers), a wait on such a
// goroutine, the dispatcher that runs their mailboxes, and the middleware
// that wraps their message handling. The zero Env is the real ones —
// time.AfterFunc, a go statement, a select on channels, protoactor's
// default dispatcher and no middleware — so production code passes
// nothing. A deterministic harness (internal/sim) sets every field: its
// timers are events on a fake clock, its goroutines and mailbox runs are
// steps it runs one at a time in seed order, and its middleware injects
// actor failures. Test hooks live here, not in the actors.
//
// Concurrency: an Env is a value set before the actors start and not
// changed after; its functions are called from any goroutine.
//
// The time itself is not here: CoordinatorConfig.Clock and
// ScanServerConfig.Clock read it, and a harness gives them its clock.
package actorenv

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Timer is a timer started by Env.AfterFunc.
type Timer interface {
	// Stop prevents the timer from firing; it reports whether it did
	// (false: it fired or was stopped already).
	Stop() bool
}

// Env is an actor's surroundings; every nil field is the real one.
type Env struct {
	// AfterFunc runs f after d; nil = time.AfterFunc. f must only send
	// messages (it runs outside the actor).
	AfterFunc func(d time.Duration, f func()) Timer
	// Go runs f on its own goroutine; nil = a go statement.
	Go func(f func())
	// Wait blocks a goroutine started with Go until ready reports true
	// (checked before each wait and whenever woken), ctx is done, or
	// timeout passed (> 0); it returns ctx.Err(), ErrWaitTimeout or nil.
	// wake is signalled (non-blocking send) when ready may have changed.
	// nil = a select on ctx.Done(), wake and a timer.
	Wait func(ctx context.Context, wake <-chan struct{}, ready func() bool, timeout time.Duration) error
	// Dispatcher runs the actors' mailboxes; nil = protoactor's default.
	Dispatcher actor.Dispatcher
	// Elapsed is how long work took since start (a time.Now reading), for
	// the costs an actor adapts to (the load board's rebuild cost bounds
	// how stale a view may be); nil = time.Since. A harness makes it
	// depend on nothing but the seed.
	Elapsed func(start time.Time) time.Duration
	// Middleware wraps every actor's handling of each message it
	// receives (protoactor receiver middleware, outermost first),
	// Started, Stopping, Stopped and Restarting included; nil = none. A
	// harness or a test observes the actors here (Context.Actor, Self)
	// or injects failures (Panicking): a panic in it is the actor's own,
	// handled by the actor's supervisor.
	Middleware []actor.ReceiverMiddleware
}

// Panic makes the actor that receives it panic with Why when its Env's
// Middleware has Panicking: how a harness or a test injects an actor
// failure. The actors themselves do not know the message.
type Panic struct{ Why string }

// Panicking is middleware that panics on a *Panic, in the actor that
// receives it, instead of handing it to the actor.
func Panicking(next actor.ReceiverFunc) actor.ReceiverFunc {
	return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
		if p, ok := env.Message.(*Panic); ok {
			panic(p.Why)
		}
		next(c, env)
	}
}

// Since is Env.Elapsed.
func (e Env) Since(start time.Time) time.Duration {
	if e.Elapsed != nil {
		return e.Elapsed(start)
	}
	return time.Since(start)
}

// ErrWaitTimeout is Wait's answer when its timeout passed first.
var ErrWaitTimeout = waitTimeout{}

type waitTimeout struct{}

func (waitTimeout) Error() string { return "actorenv: wait timed out" }

// After runs f after d on e's timers.
func (e Env) After(d time.Duration, f func()) Timer {
	if e.AfterFunc != nil {
		return e.AfterFunc(d, f)
	}
	return time.AfterFunc(d, f)
}

// Start runs f on its own goroutine through e.
func (e Env) Start(f func()) {
	if e.Go != nil {
		e.Go(f)
		return
	}
	go f()
}

// Block waits as Env.Wait says.
func (e Env) Block(ctx context.Context, wake <-chan struct{}, ready func() bool, timeout time.Duration) error {
	if e.Wait != nil {
		return e.Wait(ctx, wake, ready, timeout)
	}
	if ready() {
		return nil
	}
	var expired <-chan time.Time
	if timeout > 0 {
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		expired = timer.C
	}
	for !ready() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		case <-expired:
			return ErrWaitTimeout
		}
	}
	return nil
}

// InlineDispatcher runs an actor's messages on the goroutine that
// delivers them (protoactor's synchronized dispatcher), handling up to
// inlineThroughput in a row before it yields the processor: a message
// reaches the actor without a goroutine hand-off, and no fresh goroutine
// grows its stack per burst. Only for actors that never block in
// Receive: a blocked actor would stop its deliverer.
func InlineDispatcher() actor.Dispatcher { return actor.NewSynchronizedDispatcher(inlineThroughput) }

// inlineThroughput is protoactor's default throughput.
const inlineThroughput = 300

// Props returns opts with e's dispatcher and middleware added when it has
// them.
func (e Env) Props(opts ...actor.PropsOption) []actor.PropsOption {
	if e.Dispatcher != nil {
		opts = append(opts, actor.WithDispatcher(e.Dispatcher))
	}
	if len(e.Middleware) > 0 {
		opts = append(opts, actor.WithReceiverMiddleware(e.Middleware...))
	}
	return opts
}
