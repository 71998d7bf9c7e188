package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/coordinator"
	"github.com/scanplane/scanplane/messages"
)

// announcement is this coordinator's lease (docs/coordinators.md,
// "Membership: leases"): clients and other coordinators find it there, and see
// it leave (Close) or die (no renewal for the lease TTL).
type announcement struct {
	store *bus.LeaseStore
	lease *bus.Lease
	live  atomic.Pointer[[]*messages.ClusterInfo] // the live leases, as the watch last saw them
	stop  context.CancelFunc
	done  chan struct{}
}

// announce puts ci as this coordinator's lease, keeps its tablet-actor
// count current (refreshed with every renewal), and watches every
// coordinator's lease for /status.
func announce(ctx context.Context, conn *bus.Conn, co *coordinator.Coordinator, ci *messages.ClusterInfo) (*announcement, error) {
	store, err := conn.Leases(ctx, bus.DefaultLeaseConfig())
	if err != nil {
		return nil, fmt.Errorf("coordinator leases: %w", err)
	}
	ci = proto.Clone(ci).(*messages.ClusterInfo)
	ci.TabletActors = co.Status().GetTabletActors()
	lease, err := store.Announce(ctx, ci)
	if err != nil {
		return nil, fmt.Errorf("announce coordinator lease: %w", err)
	}
	wctx, stop := context.WithCancel(context.Background())
	a := &announcement{store: store, lease: lease, stop: stop, done: make(chan struct{})}
	if err := store.Watch(wctx, func(live []*messages.ClusterInfo) { a.live.Store(&live) }); err != nil {
		stop()
		_ = lease.Close()
		return nil, fmt.Errorf("watch coordinator leases: %w", err)
	}
	go func() {
		defer close(a.done)
		t := time.NewTicker(store.Config().Renew)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
				if n := co.Status().GetTabletActors(); n != ci.TabletActors {
					ci.TabletActors = n
					lease.Update(ci)
				}
			}
		}
	}()
	return a, nil
}

// status adds this member's id and the live leases to a status reply.
func (a *announcement) status(st *messages.StatusReply) *messages.StatusReply {
	st.MemberId = a.lease.MemberID()
	if live := a.live.Load(); live != nil {
		st.Coordinators = a.store.Fresh(*live)
	}
	return st
}

// Close withdraws the lease (clients move on at once) and stops the
// watch; call it before the actor system stops.
func (a *announcement) Close() error {
	a.stop()
	<-a.done
	return a.lease.Close()
}
