package client

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/nats-io/nats.go"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/wire"
)

// coordDirectory is what the client knows about the coordinators; guarded
// by Client.mu.
type coordDirectory struct {
	discover  bool              // the list comes from the coordinators' leases
	list      []string          // in order of preference
	lost      map[string]string // lost coordinators: why
	connected map[string]bool   // the endpoint was connected at least once
	instance  map[string]string // incarnation (and start time) from its lease
	routers   map[string]string // router actor id per address, from its lease
	leased    map[string]bool   // addresses with a live lease
	// clustered: the leased coordinators form a cluster (their leases
	// name the tablet kind): requests go to each tablet's owner.
	clustered bool
	probing   bool
	// rediscovering: a discovery request is under way (rediscover).
	rediscovering bool
	// watched: the lease watch has reported the leases at least once.
	watched bool
}

// discoverWait bounds how long Start waits to learn of a first
// coordinator when the client discovers coordinators.
const discoverWait = 10 * time.Second

// followLeases binds the lease bucket and watches it (onLeases) until ctx
// ends, trying again while JetStream is unavailable.
func (c *Client) followLeases(ctx context.Context, conn *bus.Conn) {
	err := bus.RetryUnavailable(ctx, 0, func() error {
		leases, err := conn.Leases(ctx, bus.DefaultLeaseConfig())
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.leases = leases
		c.mu.Unlock()
		return leases.Watch(ctx, func(live []*messages.ClusterInfo) {
			c.mu.Lock()
			c.coord.watched = true
			c.mu.Unlock()
			c.onLeases(live)
		})
	})
	if err != nil && ctx.Err() == nil {
		c.log.Warn("client: coordinator lease watch failed", "err", err)
	}
}

// discover waits until the client knows a coordinator: from the lease
// watch, or by asking the coordinators over core NATS (bus.Discover),
// which answers while the lease bucket cannot. It gives up after
// discoverWait with ErrNoCoordinator.
func (c *Client) discover(ctx context.Context) error {
	start := time.Now()
	none := func(err error) error {
		msg := fmt.Sprintf("no coordinator lease on NATS %s and none answered within %v (is a coordinator running?)",
			c.cfg.NATSURL, time.Since(start).Round(time.Millisecond))
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrNoCoordinator, msg, err)
		}
		return fmt.Errorf("%w: %s", ErrNoCoordinator, msg)
	}
	for {
		c.mu.Lock()
		n, watched := len(c.coord.list), c.coord.watched
		c.mu.Unlock()
		if n > 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return none(err)
		}
		if time.Since(start) > discoverWait {
			return none(nil)
		}
		live, err := c.conn.Discover(ctx, time.Second)
		c.mu.Lock()
		empty := len(c.coord.list) == 0
		c.mu.Unlock()
		if err == nil && len(live) > 0 && empty {
			c.onLeases(live)
			continue
		}
		if watched && errors.Is(err, bus.ErrNoAnswer) && errors.Is(err, nats.ErrNoResponders) {
			// No lease and nobody listening: no coordinator runs.
			return none(nil)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Coordinator returns the address of the coordinator requests go to
// first: the first in the list that is not known to be lost.
func (c *Client) Coordinator() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.coord.list {
		if _, lost := c.coord.lost[a]; !lost {
			return a
		}
	}
	if len(c.coord.list) > 0 {
		return c.coord.list[0]
	}
	return ""
}

// Coordinators returns the coordinators the client knows, in order of
// preference, with why each lost one was lost ("" = up).
func (c *Client) Coordinators() (addrs, lost []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.coord.list {
		addrs = append(addrs, a)
		lost = append(lost, c.coord.lost[a])
	}
	return addrs, lost
}

// routerPID is the router of the coordinator at addr.
func (c *Client) routerPID(addr string) *actor.PID {
	c.mu.Lock()
	id := c.routerActorIDLocked(addr)
	c.mu.Unlock()
	return actor.NewPID(addr, id)
}

func (c *Client) routerActorIDLocked(addr string) string {
	if id := c.coord.routers[addr]; id != "" {
		return id
	}
	return wire.RouterName
}

// dropEndpoint makes the remote forget its connection to addr, so that
// the next message opens a new one: a connection to a coordinator that
// left or restarted on the same address may not have failed yet, and what
// is sent into it is lost (protoactor reports nothing for it). Publishing
// EndpointTerminatedEvent is how protoactor's own cluster drops a member's
// endpoint (MemberList.TerminateMember).
func (c *Client) dropEndpoint(addr string) {
	c.mu.Lock()
	sys := c.sys
	c.mu.Unlock()
	if sys != nil && c.gate.Enter() {
		defer c.gate.Leave()
		sys.EventStream.Publish(&remote.EndpointTerminatedEvent{Address: addr})
	}
}

// onEndpointEvent watches the actor system's event stream: a coordinator
// whose endpoint terminated is lost; one that connects again is up.
func (c *Client) onEndpointEvent(ev any) {
	switch e := ev.(type) {
	case *remote.EndpointTerminatedEvent:
		c.mu.Lock()
		known := slices.Contains(c.coord.list, e.Address)
		why := "endpoint terminated"
		if !c.coord.connected[e.Address] {
			why = "unreachable: endpoint terminated before it ever connected"
			// A refused TLS handshake looks the same from here (with TLS
			// 1.3 the server refuses a client certificate after the
			// client's side of the handshake is done); the coordinator
			// logs the reason.
			if c.cfg.TLS == nil && c.shared != nil {
				why += "; if the cluster runs with --secrets (mutual TLS), the client needs them too"
			} else if c.shared != nil {
				why += "; if the coordinator refused the TLS handshake, its log says why (\"remote: TLS handshake refused\")"
			}
		}
		c.mu.Unlock()
		if known {
			c.coordLost(e.Address, why)
		}
	case *remote.EndpointConnectedEvent:
		c.mu.Lock()
		known := slices.Contains(c.coord.list, e.Address)
		if known {
			c.coord.connected[e.Address] = true
		}
		c.mu.Unlock()
		if known {
			c.coordUp(e.Address)
		}
	}
}

// onLeases follows the coordinators' leases (bus.LeaseStore.Watch): a
// coordinator whose lease appears is up; one whose lease is gone (it left,
// or renewed it not within the lease TTL) is lost; a new incarnation at a
// known address is a restart: lost, then up. With discovery, the list is
// the leased coordinators in order of preference (preferOrder); one whose
// lease is gone leaves the list once lost. With a configured list, leases
// of other addresses are ignored.
func (c *Client) onLeases(live []*messages.ClusterInfo) {
	node := ""
	if c.conn != nil {
		node = c.conn.NATS().ConnectedServerName()
	}
	byAddr := map[string]*messages.ClusterInfo{}
	for _, ci := range live {
		a := ci.GetCoordinatorAddress()
		// Two leases for one address: a restarted coordinator's and its
		// predecessor's, not yet expired. The later start wins.
		if prev := byAddr[a]; prev == nil || ci.GetStartedUnixMs() > prev.GetStartedUnixMs() {
			byAddr[a] = ci
		}
	}
	var ups, gone, restarted []string
	c.mu.Lock()
	for a := range c.coord.leased {
		if byAddr[a] == nil {
			gone = append(gone, a)
			delete(c.coord.leased, a)
		}
	}
	for a, ci := range byAddr {
		if !c.coord.discover && !slices.Contains(c.coord.list, a) {
			delete(byAddr, a)
			continue
		}
		inst := ci.GetIncarnation() + "@" + strconv.FormatInt(ci.GetStartedUnixMs(), 10)
		prev, seen := c.coord.instance[a]
		c.coord.instance[a] = inst
		if id := ci.GetRouterId(); id != "" {
			c.coord.routers[a] = id
		}
		switch {
		case seen && prev != inst:
			restarted = append(restarted, a)
		case !c.coord.leased[a]:
			ups = append(ups, a)
		}
		c.coord.leased[a] = true
	}
	if c.coord.discover {
		c.coord.list = preferOrder(byAddr, node, c.id)
		c.coord.clustered = false
		for _, ci := range byAddr {
			c.coord.clustered = c.coord.clustered || slices.Contains(ci.GetKinds(), wire.TabletKind)
		}
	}
	c.mu.Unlock()
	slices.Sort(gone)
	for _, a := range gone {
		c.coordLost(a, "its lease is gone (it left, or did not renew it in time)")
		c.dropEndpoint(a)
	}
	slices.Sort(restarted)
	for _, a := range restarted {
		// A new incarnation at the same address: the old one and every
		// request it held are gone; the new one takes requests.
		c.coordLost(a, "restarted (new incarnation)")
		c.dropEndpoint(a)
		c.coordUp(a)
	}
	slices.Sort(ups)
	for _, a := range ups {
		c.coordUp(a)
	}
	if c.coord.discover && len(gone) > 0 {
		// Forget the departed: streams have been told, and no probe
		// should knock on their addresses. A lease brings one back.
		c.mu.Lock()
		for _, a := range gone {
			if !c.coord.leased[a] {
				delete(c.coord.lost, a)
				delete(c.coord.connected, a)
			}
		}
		c.mu.Unlock()
	}
}

// byOwner reports whether requests go to each tablet's owner (see
// tabletstream.StreamConfig.ByOwner): the coordinators were discovered and form a
// cluster.
func (c *Client) byOwner() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.coord.discover && c.coord.clustered
}

// preferOrder orders the leased coordinators by preference: the one whose
// embedded NATS server is node (the server the client is connected to:
// one machine to depend on, not two) first, then by rendezvous hashing of
// the client id and the address, so clients spread over coordinators and
// each keeps its order as others come and go.
func preferOrder(byAddr map[string]*messages.ClusterInfo, node, clientID string) []string {
	addrs := slices.Collect(maps.Keys(byAddr))
	local := func(a string) bool { return node != "" && byAddr[a].GetNatsNode() == node }
	slices.SortFunc(addrs, func(x, y string) int {
		if lx, ly := local(x), local(y); lx != ly {
			if lx {
				return -1
			}
			return 1
		}
		if hx, hy := rendezvous(clientID, x), rendezvous(clientID, y); hx != hy {
			if hx > hy {
				return -1
			}
			return 1
		}
		return strings.Compare(x, y)
	})
	return addrs
}

// rendezvous is the FNV-1a 64 hash of client id and address, finished
// with a 64-bit mix (FNV alone barely moves with the last bytes).
func rendezvous(clientID, addr string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(clientID))
	h.Write([]byte{0})
	h.Write([]byte(addr))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// coordLost marks a coordinator lost and tells the running streams.
func (c *Client) coordLost(addr, why string) {
	c.mu.Lock()
	if _, already := c.coord.lost[addr]; already || c.closed {
		c.mu.Unlock()
		return
	}
	c.coord.lost[addr] = why
	c.tabletActors.forgetAddr(addr)
	c.broadcast(coordEvent{addr: addr, lost: true, why: why})
	probe := !c.coord.probing && len(c.streams) > 0 && c.sys != nil
	c.coord.probing = c.coord.probing || probe
	ask := c.coord.discover && !c.coord.rediscovering && c.conn != nil && !slices.ContainsFunc(c.coord.list, func(a string) bool {
		_, lost := c.coord.lost[a]
		return !lost
	})
	c.coord.rediscovering = c.coord.rediscovering || ask
	c.mu.Unlock()
	if ask {
		go c.rediscover()
	}
	// Info, not Warn: a scan that cannot do without it fails with an error
	// that says so; one that goes on elsewhere has not failed.
	c.log.Info("coordinator lost", "coordinator", addr, "why", why)
	if probe {
		go c.probe()
	}
}

// rediscoverWait bounds a discovery request made when every known
// coordinator is lost.
const rediscoverWait = time.Second

// rediscover asks the coordinators over core NATS (bus.Discover) who is
// live, once every coordinator the client knows is lost: the lease watch
// is a cache that can lag (a watcher whose consumer died with its NATS
// node), and a coordinator that answers is up whatever the cache says.
// Coordinators it names that the client does not know join the list and
// are up; a later lease update orders the list again.
func (c *Client) rediscover() {
	defer func() {
		c.mu.Lock()
		c.coord.rediscovering = false
		c.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*rediscoverWait)
	defer cancel()
	live, err := c.conn.Discover(ctx, rediscoverWait)
	if err != nil {
		c.log.Info("client: no coordinator answered a discovery request", "err", err)
		return
	}
	var found []string
	c.mu.Lock()
	for _, ci := range live {
		a := ci.GetCoordinatorAddress()
		if a == "" || slices.Contains(c.coord.list, a) || c.closed {
			continue
		}
		c.coord.list = append(c.coord.list, a)
		if id := ci.GetRouterId(); id != "" {
			c.coord.routers[a] = id
		}
		found = append(found, a)
	}
	c.mu.Unlock()
	for _, a := range found {
		c.log.Info("coordinator found by discovery", "coordinator", a)
		c.coordUp(a)
	}
}

// coordUp marks a coordinator up and tells the running streams.
func (c *Client) coordUp(addr string) {
	c.mu.Lock()
	_, wasLost := c.coord.lost[addr]
	delete(c.coord.lost, addr)
	if !c.closed {
		c.broadcast(coordEvent{addr: addr})
	}
	c.mu.Unlock()
	if wasLost {
		c.log.Info("coordinator up again", "coordinator", addr)
	}
}

// broadcast puts ev into every running stream's inbox; c.mu held.
func (c *Client) broadcast(ev coordEvent) {
	for in := range c.streams {
		in.put(ev)
	}
}

// probeEvery is how often lost coordinators are asked whether they are back.
const probeEvery = 500 * time.Millisecond

// probe checks every lost coordinator while one is lost and a scan runs
// (until the client closes); one that answers a status request is up
// again. It finds a coordinator restarted on the same address when NATS
// cannot tell (its NATS died with it). The status request is sent only
// once a TCP connection to the address succeeds: an actor message to a
// dead address makes the actor system's endpoint for it retry with a
// back-off, and messages sent meanwhile (a scan request to the restarted
// coordinator) would wait behind it. Close ends it and waits for it.
func (c *Client) probe() {
	c.mu.Lock()
	if c.closed {
		c.coord.probing = false
		c.mu.Unlock()
		return
	}
	// Added while not closed, so before Close waits for c.bg.
	c.bg.Add(1)
	ctx := c.bgCtx
	c.mu.Unlock()
	defer c.bg.Done()
	var dialer net.Dialer
	for {
		c.mu.Lock()
		var lost []string
		for _, a := range c.coord.list {
			if _, l := c.coord.lost[a]; l {
				lost = append(lost, a)
			}
		}
		if len(lost) == 0 || len(c.streams) == 0 || c.closed || ctx.Err() != nil {
			c.coord.probing = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		for _, a := range lost {
			dctx, cancel := context.WithTimeout(ctx, probeEvery)
			conn, err := dialer.DialContext(dctx, "tcp", a)
			cancel()
			if err != nil {
				continue
			}
			conn.Close()
			res, err := c.ask(ctx, c.routerPID(a), &messages.StatusRequest{}, 2*probeEvery)
			if errors.Is(err, ErrClosed) {
				break
			}
			if _, ok := res.(*messages.StatusReply); ok && err == nil {
				c.coordUp(a)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(probeEvery):
		}
	}
}
