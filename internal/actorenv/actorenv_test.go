package actorenv

import (
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// wait bounds a wait for something the actor system does at once; it is
// no timing assertion, only a bound on a hung test.
const wait = 30 * time.Second

// spawnRecorder spawns, with env's props, an actor that hands every user
// message it handles to got; failures receives the reason of each panic
// (the actor is then restarted).
func spawnRecorder(t *testing.T, env Env) (sys *actor.ActorSystem, pid *actor.PID, got, failures chan any) {
	t.Helper()
	sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }),
		actor.WithDeadLetterThrottleInterval(time.Millisecond))
	t.Cleanup(sys.Shutdown)
	got, failures = make(chan any, 8), make(chan any, 8)
	strategy := actor.NewOneForOneStrategy(10, time.Minute, func(reason any) actor.Directive {
		failures <- reason
		return actor.RestartDirective
	})
	pid = sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case actor.SystemMessage, actor.AutoReceiveMessage:
		default:
			got <- m
		}
	}, env.Props(actor.WithGuardian(strategy))...))
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
	return sys, pid, got, failures
}

func receive(t *testing.T, ch chan any, what string) any {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(wait):
		t.Fatalf("no %s within %v", what, wait)
		return nil
	}
}

// TestPanickingFailsTheActor: with Panicking in its Env's Middleware, an
// actor that receives a *Panic fails with its Why (its supervisor sees
// it), and the restarted actor handles the next message.
func TestPanickingFailsTheActor(t *testing.T) {
	sys, pid, got, failures := spawnRecorder(t, Env{Middleware: []actor.ReceiverMiddleware{Panicking}})
	sys.Root.Send(pid, &Panic{Why: "injected"})
	if r := receive(t, failures, "failure"); r != "injected" {
		t.Fatalf("actor failed with %v, want %q", r, "injected")
	}
	sys.Root.Send(pid, "after")
	if m := receive(t, got, "message after the restart"); m != "after" {
		t.Fatalf("restarted actor got %v, want %q", m, "after")
	}
	select {
	case m := <-got:
		t.Fatalf("the actor itself got %v; a *Panic must not reach it", m)
	default:
	}
}

// TestNoMiddlewareNoPanic: the zero Env adds no middleware, so a *Panic is
// a message like any other.
func TestNoMiddlewareNoPanic(t *testing.T) {
	sys, pid, got, failures := spawnRecorder(t, Env{})
	sys.Root.Send(pid, &Panic{Why: "injected"})
	if m, ok := receive(t, got, "message").(*Panic); !ok || m.Why != "injected" {
		t.Fatalf("actor got %v, want the *Panic", m)
	}
	select {
	case r := <-failures:
		t.Fatalf("actor failed with %v without Panicking", r)
	default:
	}
}
