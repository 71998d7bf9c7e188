package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/time/rate"
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

// Discovery answers per second a coordinator gives at most, and the burst
// above that rate: far more than clients that start or lose their
// coordinators ask, and a bound on what a flood of requests costs.
const (
	discoverRate  = 200
	discoverBurst = 400
)

// replyInbox reports whether reply names a requester's reply inbox: a
// nats.go inbox (_INBOX. or a per-user _INBOX_<token>. prefix,
// InboxPrefix) or a reply that crossed a service import (_R_.). Any other
// subject — a bucket key ($KV.…), a signal, an API subject — is the
// requester asking this connection to publish where it may not itself.
func replyInbox(reply string) bool {
	return strings.HasPrefix(reply, "_INBOX.") || strings.HasPrefix(reply, "_INBOX_") || strings.HasPrefix(reply, "_R_.")
}

// ServeDiscovery answers discovery requests with live(): the live
// coordinators as this coordinator's lease watch sees them. An empty list
// is not answered (another coordinator may know more), nor is a request
// whose reply subject is not an inbox (replyInbox), nor a request beyond
// discoverRate answers per second. The returned function stops answering.
func (c *Conn) ServeDiscovery(live func() []*messages.ClusterInfo) (stop func(), err error) {
	limit := rate.NewLimiter(discoverRate, discoverBurst)
	sub, err := c.nc.Subscribe(DiscoverSubject, func(m *nats.Msg) {
		if !replyInbox(m.Reply) {
			c.refusedDiscoveries.Add(1)
			return
		}
		if !limit.Allow() {
			c.limitedDiscoveries.Add(1)
			return
		}
		members := live()
		if len(members) == 0 {
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

// RefusedDiscoveries counts discovery requests not answered because their
// reply subject is not an inbox; LimitedDiscoveries those not answered
// because the answer rate was spent.
func (c *Conn) RefusedDiscoveries() uint64 { return c.refusedDiscoveries.Load() }

// LimitedDiscoveries: see RefusedDiscoveries.
func (c *Conn) LimitedDiscoveries() uint64 { return c.limitedDiscoveries.Load() }
