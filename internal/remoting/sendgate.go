package remoting

import (
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// Gate orders uses of an actor remote's send path before the remote
// stops. protoactor's endpoint manager reads its state unsynchronised on
// every send to a remote PID and on every EndpointTerminatedEvent
// published, and its stop writes that state; so whoever stops the remote
// first shuts the gate, which waits for the uses under way and refuses
// later ones.
//
// A use is one call that returns at once (a Send, a RequestFuture, a
// Publish), never a wait for an answer. Uses may nest; the zero value is
// an open gate. Safe for concurrent use.
type Gate struct {
	n        atomic.Int64  // uses under way, plus gateShut once shut
	idle     chan struct{} // made by Shut; closed once shut with no use under way
	idleOnce sync.Once
	shutOnce sync.Once
}

const gateShut = 1 << 40

// Enter starts a use: true while the gate is open, and the caller then
// calls Leave when the use returns; false once shut, and the caller sends
// nothing.
func (g *Gate) Enter() bool {
	if g.n.Add(1) >= gateShut {
		g.Leave()
		return false
	}
	return true
}

// Leave ends a use that Enter let in.
func (g *Gate) Leave() {
	if g.n.Add(-1) == gateShut {
		g.idleOnce.Do(func() { close(g.idle) })
	}
}

// Shut refuses every later use and returns once no use is under way.
// Later calls return once the first has.
func (g *Gate) Shut() {
	g.shutOnce.Do(func() {
		g.idle = make(chan struct{})
		if g.n.Add(gateShut) == gateShut {
			g.idleOnce.Do(func() { close(g.idle) })
		}
		<-g.idle
	})
}

// gateSends routes every message sys sends to a remote PID — user and
// system messages, Watch and Unwatch included, from actors, futures and
// plain goroutines alike — through g: once g is shut, such a message is
// dropped, as the stopped remote would drop it. It must be called before
// sys's remote starts: it puts a resolver ahead of the remote's in the
// process registry, and answers with the remote's own process wrapped.
// protoactor caches the process on the PID, so each PID is resolved once.
func gateSends(sys *actor.ActorSystem, g *Gate) {
	reg := sys.ProcessRegistry
	after := len(reg.RemoteHandlers) + 1 // the resolvers registered after this one (the remote's)
	reg.RegisterAddressResolver(func(pid *actor.PID) (actor.Process, bool) {
		for _, h := range reg.RemoteHandlers[after:] {
			if p, ok := h(pid); ok {
				return gatedProcess{inner: p, gate: g}, true
			}
		}
		return nil, false
	})
}

// gatedProcess is a remote PID's process behind a Gate.
type gatedProcess struct {
	inner actor.Process
	gate  *Gate
}

func (p gatedProcess) SendUserMessage(pid *actor.PID, message any) {
	if !p.gate.Enter() {
		return
	}
	defer p.gate.Leave()
	p.inner.SendUserMessage(pid, message)
}

func (p gatedProcess) SendSystemMessage(pid *actor.PID, message any) {
	if !p.gate.Enter() {
		return
	}
	defer p.gate.Leave()
	p.inner.SendSystemMessage(pid, message)
}

func (p gatedProcess) Stop(pid *actor.PID) {
	if !p.gate.Enter() {
		return
	}
	defer p.gate.Leave()
	p.inner.Stop(pid)
}
