package coordinator

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/scanplane/scanplane/internal/remoting"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
)

// DefaultClusterName is the Proto.Actor cluster name coordinators join.
const DefaultClusterName = "scanplane"

// ClusterConfig makes an actor system a Proto.Actor cluster member.
type ClusterConfig struct {
	// Name: the cluster's name; default DefaultClusterName.
	Name string
	// Provider: the membership provider (NATS KV leases by default, see
	// cmd/coordinator --cluster-provider). Required.
	Provider cluster.ClusterProvider
}

// Validate names the first bad field.
func (c *ClusterConfig) Validate() error {
	if c.Provider == nil {
		return errors.New("coordinator: ClusterConfig.Provider is nil")
	}
	return nil
}

// TabletIdentity is a tablet actor's cluster identity (tablets.Identity).
func TabletIdentity(table string, gen uint64, idx uint32) string {
	return tablets.Identity(table, gen, idx)
}

// tabletPlacement is the cluster.IdentityLookup of coordinators. The owner
// of a tablet is the member cluster.Rendezvous picks for its identity (as
// protoactor's disthash lookup does); the owner's router activates the
// tablet actor, as a placement actor would, but with the router's
// guarantees: a request that reaches a tablet actor as it stops for
// idleness is handed to its successor, not dropped, and a request waits
// for its table's metadata in bounded queues. So Get answers the owner's
// router, which every tablet message may be sent to.
//
// protoactor's disthash lookup is not used because (read in its source at
// the version in go.mod) its Manager swaps its rendezvous pointer from the
// event-stream goroutine while Get reads it from callers' goroutines (a
// data race), its Get blocks the caller for up to 5 s per cache miss, and
// a message sent to an activation as it stops is lost.
type tabletPlacement struct {
	c       *cluster.Cluster
	current atomic.Pointer[placement]
	sub     *eventstream.Subscription
}

func (p *tabletPlacement) Get(ci *cluster.ClusterIdentity) *actor.PID {
	owner := p.current.Load().owner(ci.Identity)
	if owner == "" {
		return nil
	}
	return actor.NewPID(owner, wire.RouterName)
}

func (p *tabletPlacement) RemovePid(*cluster.ClusterIdentity, *actor.PID) {}

// Setup runs before the provider starts, so no topology is missed.
func (p *tabletPlacement) Setup(c *cluster.Cluster, _ []string, _ bool) {
	p.c = c
	p.sub = c.ActorSystem.EventStream.Subscribe(func(evt any) {
		if t, ok := evt.(*cluster.ClusterTopology); ok {
			p.current.Store(newPlacement(t.GetMembers()))
		}
	})
}

func (p *tabletPlacement) Shutdown() {
	if p.sub != nil {
		p.c.ActorSystem.EventStream.Unsubscribe(p.sub)
	}
}

// placement is an immutable view of the tablet owners: the members that
// host tablet actors, by address. The owner of an identity is the member
// with the highest score in tablets.Owner (rendezvous hashing, as
// protoactor's cluster.Rendezvous does, but with a hash that mixes: its
// FNV-1a-32 over identity then address gave one of three members on
// ports 8090/8092/8094 twice the tablets of each other (1488, 759, 753 of
// 3000; TestPlacementSpreadsAndMovesOnlyTheLeaversTablets measures ours).
// A member that leaves moves only its own tablets; one that joins takes
// about 1/n of them from the others.
type placement struct {
	members []*cluster.Member
	addrs   []string
}

func newPlacement(members []*cluster.Member) *placement {
	p := &placement{}
	for _, m := range members {
		if m.HasKind(wire.TabletKind) {
			p.members = append(p.members, m)
			p.addrs = append(p.addrs, m.Address())
		}
	}
	return p
}

// owner is the address of the member that owns identity ("" = no member).
func (p *placement) owner(identity string) string {
	if p == nil {
		return ""
	}
	return tablets.Owner(p.addrs, identity)
}

// Start makes sys a cluster member: protoactor's cluster
// starts the remote (with rc, so with the same options as a plain remote
// system's, mutual TLS included) and the provider announces this member.
func (cc *ClusterConfig) Start(sys *actor.ActorSystem, rc *remote.Config, log *slog.Logger) (c *cluster.Cluster, err error) {
	name := cc.Name
	if name == "" {
		name = DefaultClusterName
	}
	kind := cluster.NewKind(wire.TabletKind, actor.PropsFromFunc(func(actor.Context) {}))
	cfg := cluster.Configure(name, cc.Provider, &tabletPlacement{}, rc, cluster.WithKinds(kind))
	c = cluster.New(sys, cfg)
	defer func() {
		// StartMember panics when the remote cannot listen or the provider
		// fails to start.
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
			cc.Stop(c, log, time.Second)
		}
	}()
	c.StartMember()
	return c, nil
}

// Stop leaves the cluster: the provider withdraws this member (so
// the others see it leave at once) and gossip stops. The remote and the
// actor system are stopped by System.Close.
func (*ClusterConfig) Stop(c *cluster.Cluster, log *slog.Logger, timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Config.ClusterProvider.Shutdown(true); err != nil {
			log.Warn("cluster provider shutdown", "err", err)
		}
		if c.Gossip != nil {
			c.Gossip.Shutdown()
		}
		if c.IdentityLookup != nil {
			c.IdentityLookup.Shutdown()
		}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		log.Warn("cluster shutdown did not finish in time", "timeout", timeout)
	}
}

// memberList is the addresses of the members owning tablets.
func (p *placement) memberList() []string {
	if p == nil {
		return nil
	}
	return p.addrs
}

// placementOf returns the tablet owners as of s's last cluster topology
// (nil when s is not a cluster member or no topology came yet).
func placementOf(s *remoting.System) *placement {
	if s == nil || s.Cluster == nil {
		return nil
	}
	if p, ok := s.Cluster.Config.IdentityLookup.(*tabletPlacement); ok {
		return p.current.Load()
	}
	return nil
}
