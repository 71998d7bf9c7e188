package coordinator

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/actorenv"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/wire"
)

// signalMsg carries a NATS load signal into the registry.
type signalMsg struct {
	kind bus.SignalKind
	sig  *messages.LoadSignal
}

// The reaping handshake between a host actor and the registry (local
// messages). A host actor whose servers were all forgotten (HostForget
// after they left) says so (hostIdle); the registry removes it from its
// maps, so that heartbeats for the host wait in the registry, and answers
// hostStop. The host actor stops if it still has no server (clearing its
// part of the view first), else answers hostStays and gets the heartbeats
// that waited. A new host actor for the host is spawned only after the old
// one terminated, so two never write the host's part of the view.
type hostIdle struct {
	host string
	pid  *actor.PID
}

type hostStop struct{}

type hostStays struct {
	host string
	pid  *actor.PID
}

// retiringHost is a host actor between hostIdle and its end, with the
// heartbeats that arrived for its host meanwhile (at most
// maxRetiringHeartbeats; the newest are kept).
type retiringHost struct {
	pid    *actor.PID
	queued []*messages.Heartbeat
}

const maxRetiringHeartbeats = 64

// RegistryActor owns the host actors: servers join by heartbeat (a host
// actor is spawned for a new host, at most CoordinatorConfig.MaxHosts),
// leave after missed heartbeats (swept) or at once when their remote
// endpoint terminates; a host actor whose servers are all gone is reaped.
// Invalid heartbeats and signals are counted and dropped.
type RegistryActor struct {
	d        *registryDeps
	hosts    map[string]*actor.PID
	byID     map[string]string // host actor id -> host
	retiring map[string]*retiringHost
	addrs    map[string]map[string]bool // address -> hosts
	hostAddr map[string]map[string]bool // host -> addresses
}

func newRegistryActor(d *registryDeps) *RegistryActor {
	return &RegistryActor{d: d,
		hosts: map[string]*actor.PID{}, byID: map[string]string{}, retiring: map[string]*retiringHost{},
		addrs: map[string]map[string]bool{}, hostAddr: map[string]map[string]bool{}}
}

// Receive implements actor.Actor.
func (r *RegistryActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *messages.Heartbeat:
		if err := wire.ValidateHeartbeat(m); err != nil {
			r.d.countBad("heartbeat", err)
			return
		}
		r.onHeartbeat(c, m)
	case *remote.EndpointTerminatedEvent:
		if hs := r.addrs[m.Address]; len(hs) > 0 {
			// Until their next heartbeat: worth a line when a route or a
			// scan avoids servers that look alive elsewhere.
			r.d.log.Info("servers marked dead: endpoint terminated", "address", m.Address, "hosts", len(hs))
		}
		for h := range r.addrs[m.Address] {
			if pid := r.hosts[h]; pid != nil {
				c.Send(pid, &serverGone{address: m.Address, reason: "endpoint terminated"})
			}
			delete(r.hostAddr[h], m.Address)
		}
		delete(r.addrs, m.Address)
	case *signalMsg:
		if err := wire.ValidateSignal(m.sig); err != nil {
			r.d.countBad("load signal", err)
			return
		}
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
	case *hostIdle:
		if pid := r.hosts[m.host]; pid != nil && pid.Equal(m.pid) {
			r.forgetHost(m.host)
			r.retiring[m.host] = &retiringHost{pid: m.pid}
			c.Send(m.pid, &hostStop{})
		}
	case *hostStays:
		if rh := r.retiring[m.host]; rh != nil && rh.pid.Equal(m.pid) {
			delete(r.retiring, m.host)
			r.hosts[m.host] = m.pid
			r.d.hostPIDs.Store(m.host, m.pid)
			for _, hb := range rh.queued {
				r.onHeartbeat(c, hb)
			}
		}
	case *actor.Terminated:
		host, ok := r.byID[m.Who.Id]
		if !ok {
			return
		}
		delete(r.byID, m.Who.Id)
		if pid := r.hosts[host]; pid != nil && pid.Equal(m.Who) {
			r.forgetHost(host)
		}
		if rh := r.retiring[host]; rh != nil && rh.pid.Equal(m.Who) {
			delete(r.retiring, host)
			for _, hb := range rh.queued {
				r.onHeartbeat(c, hb) // a new host actor takes them
			}
		}
	}
}

func (r *RegistryActor) onHeartbeat(c actor.Context, m *messages.Heartbeat) {
	if rh := r.retiring[m.Host]; rh != nil {
		if len(rh.queued) == maxRetiringHeartbeats {
			rh.queued = append(rh.queued[:0], rh.queued[1:]...)
		}
		rh.queued = append(rh.queued, m)
		return
	}
	pid := r.hosts[m.Host]
	if pid == nil {
		if m.GetLeaving() {
			return // a host we do not know says goodbye
		}
		if len(r.hosts)+len(r.retiring) >= r.d.maxHosts {
			r.d.countBad("heartbeat", fmt.Errorf("host %q refused: MaxHosts %d host actors exist", m.Host, r.d.maxHosts))
			return
		}
		pid = r.spawnHost(c, m.Host)
	}
	if a := m.GetPid().GetAddress(); a != "" {
		if r.addrs[a] == nil {
			r.addrs[a] = map[string]bool{}
		}
		r.addrs[a][m.Host] = true
		if r.hostAddr[m.Host] == nil {
			r.hostAddr[m.Host] = map[string]bool{}
		}
		r.hostAddr[m.Host][a] = true
	}
	c.Send(pid, m)
}

func (r *RegistryActor) spawnHost(c actor.Context, host string) *actor.PID {
	pid := c.Spawn(hostProps(r.d, host))
	r.hosts[host] = pid
	r.byID[pid.Id] = host
	r.d.hostPIDs.Store(host, pid)
	return pid
}

// hostProps are the props of host's actor. It runs on the goroutine that
// delivers its messages (a tablet actor's, the registry's, a timer's):
// it never blocks in Receive (it updates its servers and publishes them
// to the board), and a tablet actor's event is then applied before the
// tablet actor goes on, without a goroutine started per burst of events.
// A harness's Env.Dispatcher, when set, replaces that.
func hostProps(d *registryDeps, host string) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		h := newHostActor(host, d.board, d.status, d.misses, d.forget, d.now, d.counters)
		h.live.SweepInterval = d.sweepEvery
		return h
	}, d.env.Props(actor.WithDispatcher(actorenv.InlineDispatcher()))...)
}

// forgetHost drops a host from the registry's maps (its actor is stopping).
func (r *RegistryActor) forgetHost(host string) {
	delete(r.hosts, host)
	r.d.hostPIDs.Delete(host)
	for a := range r.hostAddr[host] {
		delete(r.addrs[a], host)
		if len(r.addrs[a]) == 0 {
			delete(r.addrs, a)
		}
	}
	delete(r.hostAddr, host)
}
