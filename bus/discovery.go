package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/messages"
)

// DiscoverSubject is where coordinators answer who the live coordinators
// are (a messages.CoordinatorList), over core NATS: the answer needs no
// JetStream, so a client finds the coordinators while a JetStream leader
// election (seconds, after a NATS node was lost) holds up the lease
// bucket.
const DiscoverSubject = SubjectPrefix + ".coordinators"

// maxDiscoverMembers bounds the members a discovery answer may list.
const maxDiscoverMembers = 1024

// ErrNoAnswer: no coordinator answered a discovery request in time.
var ErrNoAnswer = errors.New("bus: no coordinator answered")

// ServeDiscovery answers discovery requests with live(): the live
// coordinators as this coordinator's lease watch sees them. An empty list
// is not answered (another coordinator may know more). The returned
// function stops answering.
func (c *Conn) ServeDiscovery(live func() []*messages.ClusterInfo) (stop func(), err error) {
	sub, err := c.nc.Subscribe(DiscoverSubject, func(m *nats.Msg) {
		members := live()
		if len(members) == 0 || m.Reply == "" {
			return
		}
		data, err := proto.Marshal(&messages.CoordinatorList{Members: members})
		if err != nil {
			return
		}
		_ = m.Respond(data)
	})
	if err != nil {
		return nil, fmt.Errorf("bus: serve discovery: %w", err)
	}
	// Answer from the moment this returns: the server knows the
	// subscription once the flush comes back.
	if err := c.nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("bus: serve discovery: %w", err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// Discover asks the coordinators who the live coordinators are and
// returns the first answer's valid leases (ErrNoAnswer when none came
// within timeout; a lease that fails CheckLease is skipped).
func (c *Conn) Discover(ctx context.Context, timeout time.Duration) ([]*messages.ClusterInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	msg, err := c.nc.RequestWithContext(ctx, DiscoverSubject, nil)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w within %v: %w", ErrNoAnswer, timeout, err)
		}
		return nil, fmt.Errorf("bus: discover coordinators: %w", err)
	}
	var list messages.CoordinatorList
	if err := proto.Unmarshal(msg.Data, &list); err != nil {
		return nil, fmt.Errorf("bus: discover coordinators: bad answer: %w", err)
	}
	var out []*messages.ClusterInfo
	for _, ci := range list.GetMembers() {
		if len(out) == maxDiscoverMembers {
			break
		}
		if CheckLease(ci.GetMemberId(), ci) == nil {
			out = append(out, ci)
		}
	}
	return out, nil
}
