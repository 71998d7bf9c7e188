package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/remoting"
	"github.com/scanplane/scanplane/messages"
	"google.golang.org/protobuf/proto"
)

// LeaseProvider is the default cluster.ClusterProvider of coordinators:
// membership over NATS JetStream KV leases (bus.LeaseStore), so a cluster
// of coordinators needs no server besides NATS. A member announces a lease
// keyed by its actor system id (ClusterInfo: address, router, HTTP
// address, NATS node, kinds) and renews it; every member watches the
// leases and hands the live ones of its cluster to the MemberList. A
// member that leaves cleanly deletes its lease (seen at once); a killed
// one is gone when its lease has not been renewed for the lease TTL
// (default 3 s). Clients read the same leases to find coordinators.
//
// A member whose own renewals lapsed for longer than the TTL (it was
// paused, or cut off from NATS) may have been dropped by the others, and
// protoactor's MemberList blocks a member id that left for good: Lapsed
// then closes, and the coordinator rejoins under a new actor system id
// (cmd/coordinator restarts the coordinator component).
type LeaseProvider struct {
	store *bus.LeaseStore
	info  *messages.ClusterInfo
	log   *slog.Logger

	mu     sync.Mutex
	c      *cluster.Cluster
	ctx    context.Context // ends at Shutdown
	lease  *bus.Lease
	cancel context.CancelFunc
	live   []*messages.ClusterInfo // the live leases the watch saw last
}

// NewLeaseProvider returns a provider announcing info (its member id,
// address, kinds and cluster name are filled in at StartMember).
func NewLeaseProvider(store *bus.LeaseStore, info *messages.ClusterInfo, log *slog.Logger) *LeaseProvider {
	if log == nil {
		log = remoting.DiscardLogger()
	}
	return &LeaseProvider{store: store, info: proto.Clone(info).(*messages.ClusterInfo), log: log}
}

// StartMember starts following the members. This member is announced by
// Announce, once its actors can take requests: a lease is what clients
// and the other coordinators send requests on.
func (p *LeaseProvider) StartMember(c *cluster.Cluster) error {
	ctx, cancel := context.WithCancel(context.Background())
	if err := p.watch(ctx, c); err != nil {
		cancel()
		return err
	}
	p.mu.Lock()
	p.c, p.ctx, p.cancel = c, ctx, cancel
	p.mu.Unlock()
	return nil
}

// Announce puts this member's lease (after StartMember) and renews it
// until Shutdown.
func (p *LeaseProvider) Announce(ctx context.Context) error {
	p.mu.Lock()
	c, lctx := p.c, p.ctx
	p.mu.Unlock()
	if c == nil {
		return errors.New("coordinator: LeaseProvider.Announce before StartMember")
	}
	ci := proto.Clone(p.info).(*messages.ClusterInfo)
	ci.MemberId = c.ActorSystem.ID
	ci.CoordinatorAddress = c.ActorSystem.Address()
	ci.Kinds = c.GetClusterKinds()
	ci.ClusterName = c.Config.Name
	lease, err := p.announceRetrying(ctx, ci)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if lctx.Err() != nil { // shut down meanwhile
		_ = lease.Close()
		return errors.New("coordinator: cluster provider shut down")
	}
	p.lease = lease
	return nil
}

// announceWait bounds how long Announce retries a lease bucket that is
// unavailable: right after NATS regains its quorum (a node of two lost
// comes back), JetStream elects the bucket's leader for several seconds,
// and a coordinator that gave up at once exited and had to be restarted
// up to 5 times (e2e TestCoordinatorLossUnderLoad).
const announceWait = time.Minute

// announceRetrying is store.Announce, again while the bucket is
// unavailable, for up to announceWait (bus.RetryUnavailable).
func (p *LeaseProvider) announceRetrying(ctx context.Context, ci *messages.ClusterInfo) (lease *bus.Lease, err error) {
	err = bus.RetryUnavailable(ctx, announceWait, func() error {
		lease, err = p.store.Announce(ctx, ci)
		return err
	})
	return lease, err
}

// StartClient follows the members without announcing one.
func (p *LeaseProvider) StartClient(c *cluster.Cluster) error {
	ctx, cancel := context.WithCancel(context.Background())
	if err := p.watch(ctx, c); err != nil {
		cancel()
		return err
	}
	p.mu.Lock()
	p.cancel = cancel
	p.mu.Unlock()
	return nil
}

func (p *LeaseProvider) watch(ctx context.Context, c *cluster.Cluster) error {
	name := c.Config.Name
	return p.store.Watch(ctx, func(live []*messages.ClusterInfo) {
		p.mu.Lock()
		p.live = live
		p.mu.Unlock()
		c.MemberList.UpdateClusterTopology(LeaseMembers(live, name))
	})
}

// LeaseMembers turns the live leases of cluster name into cluster
// members; a lease with an address that is not host:port is skipped.
func LeaseMembers(live []*messages.ClusterInfo, name string) []*cluster.Member {
	var ms []*cluster.Member
	for _, ci := range live {
		if ci.GetClusterName() != name {
			continue
		}
		host, ps, err := net.SplitHostPort(ci.GetCoordinatorAddress())
		if err != nil {
			continue
		}
		port, err := strconv.ParseUint(ps, 10, 16)
		if err != nil || host == "" {
			continue
		}
		ms = append(ms, &cluster.Member{Id: ci.GetMemberId(), Host: host, Port: int32(port), Kinds: ci.GetKinds()})
	}
	return ms
}

// Update replaces the announced content (address, id, kinds and cluster
// name stay); it is sent with the next renewal.
func (p *LeaseProvider) Update(fn func(ci *messages.ClusterInfo)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lease == nil {
		return
	}
	ci := p.lease.Info()
	fn(ci)
	p.lease.Update(ci)
}

// Live returns the live coordinator leases (every cluster), as the watch
// saw them last, each with the time its latest renewal arrived.
func (p *LeaseProvider) Live() []*messages.ClusterInfo {
	p.mu.Lock()
	live := slices.Clone(p.live)
	p.mu.Unlock()
	return p.store.Fresh(live)
}

// Unrenewed is how long this member's lease has not been written (0
// before Announce): long means NATS has lost its quorum or this
// coordinator is cut off from it.
func (p *LeaseProvider) Unrenewed() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lease == nil {
		return 0
	}
	return p.lease.Unrenewed()
}

// Lapsed is closed when this member's lease went unrenewed for longer
// than the TTL (nil before StartMember).
func (p *LeaseProvider) Lapsed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lease == nil {
		return nil
	}
	return p.lease.Lapsed()
}

// Shutdown withdraws this member's lease and stops following the others.
func (p *LeaseProvider) Shutdown(bool) error {
	p.mu.Lock()
	lease, cancel := p.lease, p.cancel
	p.lease, p.cancel = nil, nil
	p.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if lease == nil {
		return nil
	}
	if err := lease.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
