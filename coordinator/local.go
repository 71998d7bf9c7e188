package coordinator

import (
	"errors"
	"slices"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
)

// A local coordinator runs its actors on an actor system its caller made,
// without NATS, a remote or a Proto.Actor cluster: the caller hands it
// heartbeats (Heartbeat), the cluster's members (SetMembers) and endpoint
// losses (remote.EndpointTerminatedEvent on the actor system's event
// stream), and routes its messages to other actor systems itself (an
// address resolver on the process registry). A deterministic harness
// (internal/sim) runs several this way, with CoordinatorConfig.Env and
// Clock on its fake clock; the actors are the ones Start runs.

// NewLocalCoordinator checks its inputs; StartLocal starts it.
func NewLocalCoordinator(cfg CoordinatorConfig, meta MetaSource, profiles *selection.Profiles) (*Coordinator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if meta == nil {
		return nil, errors.New("coordinator: local coordinator needs a metadata source")
	}
	return newCoordinator(cfg, nil, meta, profiles), nil
}

// StartLocal starts the registry, the router and the sweep on as.
func (c *Coordinator) StartLocal(as *actor.ActorSystem) error { return c.startActors(as) }

// Heartbeat hands a scan server's heartbeat to the registry (what the
// NATS subscription does for a started coordinator).
func (c *Coordinator) Heartbeat(m *messages.Heartbeat) { c.as.Root.Send(c.registry, m) }

// SetMembers sets the coordinators that own tablets, by actor-system
// address (what the cluster topology does for a started coordinator);
// nil: not clustered, every tablet is ours.
func (c *Coordinator) SetMembers(addrs []string) {
	if addrs == nil {
		c.localPlace.Store(nil)
	} else {
		c.localPlace.Store(&placement{addrs: slices.Clone(addrs)})
	}
	c.as.Root.Send(c.router, &topologyChanged{})
}

// placement is the tablet owners: SetMembers' when set, else the
// cluster topology's.
func (c *Coordinator) placement() *placement {
	if p := c.localPlace.Load(); p != nil {
		return p
	}
	return placementOf(c.sys)
}
