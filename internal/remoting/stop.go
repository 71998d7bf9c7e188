// Stop ends a Proto.Actor remote without a data race.
//
// protoactor-go's graceful Remote.Shutdown first flips an unsynchronised
// "suspended" flag that every inbound gRPC stream goroutine reads, so
// calling it while peers are connected is a data race (the race detector
// finds it whenever a peer stream is open). Suspending only makes the
// reader drop what arrives, which stopping the gRPC server does too. So
// Stop ends inbound streams first (a hard gRPC stop), waits until every
// stream handler has returned, and only then runs the graceful shutdown,
// which now only stops the outbound endpoints: nobody reads the flag any
// more when it is written.
//
// The endpoint manager's state that the graceful shutdown writes is also
// read, unsynchronised, on every send to a remote PID. So a Tracker also
// gates the sends of the actor system (GateSends), and Stop shuts that
// gate before anything else: the sends under way end first, and later
// ones are dropped.

package remoting

import (
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
)

// Tracker counts running gRPC stream handlers of one remote, and gates
// the sends of its actor system to remote PIDs.
type Tracker struct {
	mu      sync.Mutex
	running int
	idle    chan struct{} // closed while running == 0
	sends   Gate
}

// NewTracker returns a Tracker with no running handler.
func NewTracker() *Tracker {
	t := &Tracker{idle: make(chan struct{})}
	close(t.idle)
	return t
}

// ServerOption is the gRPC server option that makes the remote's stream
// handlers known to t; pass it with remote.WithServerOptions.
func (t *Tracker) ServerOption() grpc.ServerOption {
	return grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		t.enter()
		defer t.leave()
		return h(srv, ss)
	})
}

// GateSends routes every message sys sends to a remote PID through t,
// so that Stop orders them before the remote stops; sends after Stop
// began are dropped. Call it once, before sys's remote starts.
func (t *Tracker) GateSends(sys *actor.ActorSystem) { gateSends(sys, &t.sends) }

func (t *Tracker) enter() {
	t.mu.Lock()
	if t.running == 0 {
		t.idle = make(chan struct{})
	}
	t.running++
	t.mu.Unlock()
}

func (t *Tracker) leave() {
	t.mu.Lock()
	t.running--
	if t.running == 0 {
		close(t.idle)
	}
	t.mu.Unlock()
}

// Running is the number of stream handlers running now.
func (t *Tracker) Running() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.running
}

// wait returns true once no handler runs, false after timeout. The close
// of idle happens after every handler's last read of reader state, so what
// the caller does next is ordered after those reads.
func (t *Tracker) wait(timeout time.Duration) bool {
	t.mu.Lock()
	idle := t.idle
	t.mu.Unlock()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-idle:
		return true
	case <-timer.C:
		return false
	}
}

// Stop shuts r down: the sends to remote PIDs under way end and later
// ones are dropped (GateSends), inbound streams are stopped at once, and
// after every handler has returned (at most handlerWait) the outbound
// endpoints are stopped gracefully. It returns false when handlers were
// still running after handlerWait; the graceful step is then skipped,
// because running it would race, and the outbound connections end with
// the process.
func (t *Tracker) Stop(r *remote.Remote, handlerWait time.Duration) bool {
	t.sends.Shut()
	r.Shutdown(false)
	if !t.wait(handlerWait) {
		return false
	}
	stopOutbound(r)
	return true
}

// stopOutbound runs the graceful shutdown once no stream handler runs. Its
// last step signals each reader's disconnect channel, which a reader closes
// as it returns and removes from the map a moment later; should the
// signal meet a channel in that window it panics with a send on a closed
// channel. By then the endpoint actors are already stopped and the readers
// gone, so the panic is recovered: there is nothing left to signal.
func stopOutbound(r *remote.Remote) {
	defer func() { _ = recover() }()
	r.Shutdown(true)
}
