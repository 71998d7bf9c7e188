package actors

import (
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/messages"
)

// signalMsg carries a NATS load signal into the registry.
type signalMsg struct {
	kind bus.SignalKind
	sig  *messages.LoadSignal
}

// RegistryActor owns the host actors: servers join by heartbeat (a host
// actor is spawned for a new host), leave after missed heartbeats (swept)
// or at once when their remote endpoint terminates.
type RegistryActor struct {
	board   *LoadBoard
	status  *sync.Map
	hostPID *sync.Map // host -> *actor.PID, read by tablet actors
	misses  int
	now     func() time.Time
	hosts   map[string]*actor.PID
	addrs   map[string]map[string]bool // address -> hosts
}

// Receive implements actor.Actor.
func (r *RegistryActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *messages.Heartbeat:
		if err := validateHeartbeat(m); err != nil {
			return
		}
		pid := r.host(c, m.Host)
		if a := m.GetPid().GetAddress(); a != "" {
			if r.addrs[a] == nil {
				r.addrs[a] = map[string]bool{}
			}
			r.addrs[a][m.Host] = true
		}
		c.Send(pid, m)
	case *remote.EndpointTerminatedEvent:
		for h := range r.addrs[m.Address] {
			if pid := r.hosts[h]; pid != nil {
				c.Send(pid, &serverGone{address: m.Address, reason: "endpoint terminated"})
			}
		}
		delete(r.addrs, m.Address)
	case *signalMsg:
		if pid := r.hosts[m.sig.GetHost()]; pid != nil {
			e := &hostEvent{server: serverIDOf(m.sig.GetServer()), queueLen: int(m.sig.GetQueueLen())}
			e.kind = evBusySignal
			if m.kind == bus.SignalTimeout {
				e.kind = evTimeoutSignal
			}
			c.Send(pid, e)
		}
	case *setDecays:
		for _, pid := range r.hosts {
			c.Send(pid, m)
		}
	case *sweepTick:
		for _, pid := range r.hosts {
			c.Send(pid, m)
		}
	case *actor.Terminated:
		for h, pid := range r.hosts {
			if pid.Equal(m.Who) {
				delete(r.hosts, h)
				r.hostPID.Delete(h)
			}
		}
	}
}

func (r *RegistryActor) host(c actor.Context, host string) *actor.PID {
	if pid := r.hosts[host]; pid != nil {
		return pid
	}
	props := actor.PropsFromProducer(func() actor.Actor { return newHostActor(host, r.board, r.status, r.misses, r.now) })
	pid := c.Spawn(props)
	r.hosts[host] = pid
	r.hostPID.Store(host, pid)
	return pid
}

func validateHeartbeat(m *messages.Heartbeat) error {
	switch {
	case m.GetHost() == "":
		return errBadHeartbeat("host")
	case m.GetServer() == "":
		return errBadHeartbeat("server")
	case !m.GetLeaving() && (m.GetPid().GetAddress() == "" || m.GetPid().GetId() == ""):
		return errBadHeartbeat("pid")
	}
	return nil
}

type errBadHeartbeat string

func (e errBadHeartbeat) Error() string { return "actors: heartbeat without " + string(e) }
