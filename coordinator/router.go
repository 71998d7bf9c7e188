package coordinator

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/internal/actorenv"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
	"google.golang.org/protobuf/proto"
)

type metaLoaded struct {
	epoch uint64 // the router incarnation that started the load
	key   tableGen
	meta  *messages.TableMeta
	code  messages.ErrorCode
	err   error
}

type routeResolved struct {
	epoch  uint64
	req    *messages.RouteRequest
	sender *actor.PID
	meta   *messages.TableMeta
	err    error
}

// RouterActor validates requests and forwards them to tablet actors,
// spawning them lazily (one per tablet, named table.gGEN.tIDX#N: each
// spawn gets a new N, so that a message for an actor that stopped — a late
// timer, a late answer from a scan server — never reaches its successor,
// nor an actor still being spawned). Its queues
// are bounded (CoordinatorConfig.MaxWaiting, MaxWaitingPerTable,
// MaxMetaLoads): a request beyond a bound is answered OVERLOADED at once.
type RouterActor struct {
	co      *Coordinator
	tablets map[string]*actor.PID
	names   map[string]string // tablet actor id -> name
	// retiring: tablet actors that asked to stop for idleness; requests
	// for them wait here until they stopped (then a new actor gets them)
	// or stay (then they get them).
	retiring map[string]*retiringTablet
	// waiting: requests waiting for their table generation's metadata;
	// loadQueue: generations waiting for a load slot; loading: loads
	// running; nwaiting: requests waiting here or for a retiring actor.
	waiting   map[tableGen][]*routedScan
	loadQueue []tableGen
	loading   int
	routing   int // RouteRequest metadata lookups running
	nwaiting  int
	spawns    uint64
	// place: the tablet owners as of the last cluster topology (nil: not
	// clustered, every tablet is ours); self: our actor address.
	place *placement
	self  string
	// idents: tablet actor name -> cluster identity, for the running ones.
	idents map[string]string
	// epoch: this incarnation (Coordinator.routerEpoch when it started).
	epoch uint64
	// deps: what the tablet actors we spawn need of the coordinator.
	deps *tabletDeps
}

// retiringTablet is a tablet actor between its idle-stop request and its
// end, with the messages that arrived for its tablet meanwhile.
type retiringTablet struct {
	pid    *actor.PID
	meta   *messages.TableMeta
	idx    int
	queued []routed
}

// routed is a message for a tablet actor; sender is set for a request
// whose reply goes to someone else (RouteRequest).
type routed struct {
	msg    any
	sender *actor.PID
}

func newRouterActor(co *Coordinator) *RouterActor {
	return &RouterActor{co: co, tablets: map[string]*actor.PID{}, names: map[string]string{}, retiring: map[string]*retiringTablet{},
		waiting: map[tableGen][]*routedScan{}, idents: map[string]string{}, epoch: co.routerEpoch.Load(), deps: co.tabletDeps()}
}

// Receive implements actor.Actor.
func (r *RouterActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		r.self = c.Self().Address
		r.onTopology(c)
	case *topologyChanged:
		r.onTopology(c)
	case *messages.ScanRequest:
		if err := wire.ValidateScanRequest(m); err != nil {
			r.co.countBad("ScanRequest", err)
			rejectScan(&r.co.counters, c, m, messages.ErrorCode_ERROR_CODE_BAD_REQUEST, "bad ScanRequest: "+err.Error())
			return
		}
		if !r.co.permitted(c, m) {
			return
		}
		r.onScan(c, received(r.co.now(), m, r.co.cfg.Flow.MaxFlowAge))
	case *routedScan:
		r.onScan(c, m)
	case *actor.Restarting:
		r.handOver(c)
	case *metaLoaded:
		if m.epoch != r.epoch {
			return // started by an incarnation before a restart
		}
		r.loading--
		reqs := r.waiting[m.key]
		delete(r.waiting, m.key)
		r.nwaiting -= len(reqs)
		for _, rs := range reqs {
			if m.err != nil {
				rejectScan(&r.co.counters, c, rs.req, m.code, m.err.Error())
				continue
			}
			r.forward(c, rs, m.meta)
		}
		r.startLoads(c)
	case *messages.ScanDone:
		if err := wire.ValidateScanDone(m); err != nil {
			r.co.countBad("ScanDone", err)
			return
		}
		t := m.GetTablet()
		if owner := r.owner(t.GetTable(), t.GetGeneration(), t.GetIndex()); owner != "" && m.GetForwardedBy() == "" {
			fwd := proto.Clone(m).(*messages.ScanDone)
			fwd.ForwardedBy = r.self
			c.Send(actor.NewPID(owner, wire.RouterName), fwd)
			return
		}
		name := tabletActorName(t.GetTable(), t.GetGeneration(), t.GetIndex())
		if pid := r.tablets[name]; pid != nil {
			c.Send(pid, m)
		} else if rt := r.retiring[name]; rt != nil {
			r.queue(c, rt, routed{msg: m}, nil)
		}
	case *messages.StatusRequest:
		c.Respond(r.co.Status())
	case *messages.ReloadProfiles:
		msg, err := r.co.Reload()
		if err != nil {
			c.Respond(&messages.ReloadReply{Ok: false, Message: err.Error()})
		} else {
			c.Respond(&messages.ReloadReply{Ok: true, Message: msg})
		}
	case *messages.RouteRequest:
		r.onRoute(c, m)
	case *routeResolved:
		if m.epoch == r.epoch {
			r.routing--
		}
		if m.err != nil {
			c.Send(m.sender, &messages.RouteReply{Error: m.err.Error()})
			return
		}
		idx := tablets.TabletFor(m.meta.GetSplitPoints(), m.req.GetRow())
		r.deliver(c, m.meta, idx, routed{msg: m.req, sender: m.sender}, func() {
			c.Send(m.sender, &messages.RouteReply{Error: "coordinator overloaded: too many requests waiting; retry later"})
		})
	case *tabletIdle:
		switch pid := r.tablets[m.name]; {
		case pid != nil && pid.Equal(m.pid):
			delete(r.tablets, m.name)
			r.retiring[m.name] = &retiringTablet{pid: m.pid}
			c.Send(m.pid, &idleStopOK{})
		case pid == nil && r.retiring[m.name] == nil:
			// Unknown to us: nothing is routed to it; let it stop.
			c.Send(m.pid, &idleStopOK{})
		}
	case *tabletStays:
		if rt := r.retiring[m.name]; rt != nil && rt.pid.Equal(m.pid) {
			delete(r.retiring, m.name)
			r.tablets[m.name] = m.pid
			r.flush(c, rt, m.pid)
		}
	case *actor.Terminated:
		name, ok := r.names[m.Who.Id]
		if !ok {
			return
		}
		delete(r.names, m.Who.Id)
		delete(r.idents, name)
		if pid := r.tablets[name]; pid != nil && pid.Equal(m.Who) {
			delete(r.tablets, name)
		}
		rt := r.retiring[name]
		if rt == nil || !rt.pid.Equal(m.Who) {
			return
		}
		delete(r.retiring, name)
		for _, q := range rt.queued {
			if _, done := q.msg.(*messages.ScanDone); !done {
				// Requests waited for the old actor: a new one takes them.
				r.flush(c, rt, r.tablet(c, rt.meta, rt.idx))
				return
			}
		}
		r.nwaiting -= len(rt.queued) // only ScanDones, for flows that are gone
	}
}

// handOver gives what this incarnation holds to the next one, as it
// restarts after a panic (supervision.go): the requests waiting for
// metadata or for a stopping tablet actor go back to our own mailbox
// (once; the second time they are answered INTERNAL), and the epoch moves
// on, so our tablet actors, which stop with us, hand over theirs too.
func (r *RouterActor) handOver(c actor.Context) {
	r.co.routerEpoch.Add(1)
	requeue := func(rs *routedScan) {
		if rs.restarts == 0 {
			c.Send(c.Self(), &routedScan{req: rs.req, deadline: rs.deadline, restarts: 1, attempts: rs.attempts})
			return
		}
		rejectScan(&r.co.counters, c, rs.req, messages.ErrorCode_ERROR_CODE_INTERNAL, "coordinator: router failed twice while holding this request; giving up on it")
	}
	for _, reqs := range r.waiting {
		for _, rs := range reqs {
			requeue(rs)
		}
	}
	for _, rt := range r.retiring {
		for _, q := range rt.queued {
			if rs, ok := q.msg.(*routedScan); ok {
				requeue(rs)
			}
		}
	}
}

// deliver sends msg to tablet idx's actor, spawning it if needed, or queues
// it while that actor retires; overloaded runs when the queue is full.
func (r *RouterActor) deliver(c actor.Context, meta *messages.TableMeta, idx int, msg routed, overloaded func()) {
	name := tabletActorName(meta.GetName(), meta.GetGeneration(), uint32(idx))
	if rt := r.retiring[name]; rt != nil {
		if rt.meta == nil {
			rt.meta, rt.idx = meta, idx
		}
		r.queue(c, rt, msg, overloaded)
		return
	}
	send(c, r.tablet(c, meta, idx), msg)
}

func send(c actor.Context, pid *actor.PID, m routed) {
	if m.sender != nil {
		c.RequestWithCustomSender(pid, m.msg, m.sender)
		return
	}
	c.Send(pid, m.msg)
}

// queue holds msg for a retiring tablet actor, within the bounds.
func (r *RouterActor) queue(c actor.Context, rt *retiringTablet, msg routed, overloaded func()) {
	if len(rt.queued) >= r.co.cfg.MaxWaitingPerTable || r.nwaiting >= r.co.cfg.MaxWaiting {
		r.co.countOverloaded("tablet actor restarting")
		if overloaded != nil {
			overloaded()
		}
		return
	}
	rt.queued = append(rt.queued, msg)
	r.nwaiting++
}

func (r *RouterActor) flush(c actor.Context, rt *retiringTablet, pid *actor.PID) {
	r.nwaiting -= len(rt.queued)
	for _, q := range rt.queued {
		send(c, pid, q)
	}
	rt.queued = nil
}

// onRoute resolves a RouteRequest's table off the actor (a metadata read),
// at most MaxMetaLoads at a time.
func (r *RouterActor) onRoute(c actor.Context, m *messages.RouteRequest) {
	if r.routing >= r.co.cfg.MaxMetaLoads {
		r.co.countOverloaded("route requests")
		c.Respond(&messages.RouteReply{Error: fmt.Sprintf("coordinator overloaded: %d route requests running; retry later", r.routing)})
		return
	}
	r.routing++
	sender, self, co := c.Sender(), c.Self(), r.co
	root := c.ActorSystem().Root
	co.cfg.Env.Start(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res := &routeResolved{epoch: r.epoch, req: m, sender: sender}
		gen, err := co.meta.src.Current(ctx, m.GetTable())
		if err == nil && gen == 0 {
			err = fmt.Errorf("no table %q", m.GetTable())
		}
		if err == nil {
			res.meta, _, err = co.meta.get(ctx, m.GetTable(), gen)
		}
		res.err = err
		root.Send(self, res)
	})
}

// onScan routes a request that arrived (validated, its deadline set).
func (r *RouterActor) onScan(c actor.Context, rs *routedScan) {
	m := rs.req
	if err := r.co.quorumErr(); err != nil {
		rejectScan(&r.co.counters, c, m, messages.ErrorCode_ERROR_CODE_NO_COORDINATOR, err.Error())
		return
	}
	if m.GetForwardedBy() == "" {
		if owner := r.ownerAvoiding(m.Tablet.Table, m.Tablet.Generation, m.Tablet.Index, m.GetAvoidCoordinators()); owner != "" {
			r.forwardToOwner(c, owner, rs)
			return
		}
	}
	key := tableGen{m.Tablet.Table, m.Tablet.Generation}
	if meta := r.co.meta.cached(key.table, key.gen); meta != nil {
		r.forward(c, rs, meta)
		return
	}
	if len(r.waiting[key]) >= r.co.cfg.MaxWaitingPerTable || r.nwaiting >= r.co.cfg.MaxWaiting {
		r.co.countOverloaded("metadata wait")
		rejectScan(&r.co.counters, c, m, messages.ErrorCode_ERROR_CODE_OVERLOADED, fmt.Sprintf("coordinator overloaded: %d requests wait for table metadata (%d for %s/g%d); retry later",
			r.nwaiting, len(r.waiting[key]), key.table, key.gen))
		return
	}
	first := len(r.waiting[key]) == 0
	r.waiting[key] = append(r.waiting[key], rs)
	r.nwaiting++
	if first {
		r.loadQueue = append(r.loadQueue, key)
		r.startLoads(c)
	}
}

// metaLoadTimeout bounds one metadata load, tries again while the bucket
// is unavailable included: longer than JetStream takes to elect a stream
// leader after a machine is lost, so that the requests waiting for the
// load get their rows instead of INTERNAL.
const metaLoadTimeout = 30 * time.Second

// startLoads starts queued metadata loads, at most MaxMetaLoads at a time.
func (r *RouterActor) startLoads(c actor.Context) {
	for r.loading < r.co.cfg.MaxMetaLoads && len(r.loadQueue) > 0 {
		key := r.loadQueue[0]
		r.loadQueue[0] = tableGen{}
		r.loadQueue = r.loadQueue[1:]
		r.loading++
		self, root, co, epoch := c.Self(), c.ActorSystem().Root, r.co, r.epoch
		co.cfg.Env.Start(func() {
			ctx, cancel := context.WithTimeout(context.Background(), metaLoadTimeout)
			defer cancel()
			meta, code, err := co.meta.get(ctx, key.table, key.gen)
			if code == messages.ErrorCode_ERROR_CODE_INTERNAL {
				co.metrics.NATSError(NATSOpMetaRead)
			}
			root.Send(self, &metaLoaded{epoch: epoch, key: key, meta: meta, code: code, err: err})
		})
	}
}

func (r *RouterActor) forward(c actor.Context, rs *routedScan, meta *messages.TableMeta) {
	m := rs.req
	idx := int(m.Tablet.Index)
	if idx >= len(meta.GetTablets()) {
		rejectScan(&r.co.counters, c, m, messages.ErrorCode_ERROR_CODE_NO_SUCH_TABLET, fmt.Sprintf("table %s/g%d has %d tablets, no tablet %d", meta.Name, meta.Generation, len(meta.Tablets), idx))
		return
	}
	ref := meta.Tablets[idx].GetRef()
	if !bytes.Equal(ref.GetPrevEndRow(), m.Tablet.GetPrevEndRow()) || !bytes.Equal(ref.GetEndRow(), m.Tablet.GetEndRow()) {
		rejectScan(&r.co.counters, c, m, messages.ErrorCode_ERROR_CODE_NO_SUCH_TABLET, fmt.Sprintf("tablet %d of %s/g%d has other bounds than requested", idx, meta.Name, meta.Generation))
		return
	}
	r.deliver(c, meta, idx, routed{msg: rs}, func() {
		rejectScan(&r.co.counters, c, m, messages.ErrorCode_ERROR_CODE_OVERLOADED, "coordinator overloaded: too many requests wait for a restarting tablet actor; retry later")
	})
}

func (r *RouterActor) tablet(c actor.Context, meta *messages.TableMeta, idx int) *actor.PID {
	name := tabletActorName(meta.GetName(), meta.GetGeneration(), uint32(idx))
	if pid := r.tablets[name]; pid != nil {
		return pid
	}
	tm := meta.GetTablets()[idx]
	co := r.co
	r.spawns++
	id := name + "#" + strconv.FormatUint(r.spawns, 10)
	deps := r.deps
	gate := &stopGate{reroute: deps.reroute}
	epoch := r.epoch
	// A tablet actor runs on the goroutine that delivers its messages
	// (the remote reader of the peer's connection, a timer, the router):
	// it never blocks in Receive (it reads memory and sends), and a
	// message for it while it runs is queued for the goroutine running
	// it, so no deliverer waits for another. A harness's Env.Dispatcher,
	// when set, replaces that.
	props := actor.PropsFromProducer(func() actor.Actor {
		t := newTabletActor(deps, meta, tm)
		t.gate, t.routerEpoch = gate, epoch
		return t
	}, co.cfg.Env.Props(actor.WithMailbox(gatedMailboxProducer(gate)), actor.WithDispatcher(actorenv.InlineDispatcher()))...)
	pid, err := c.SpawnNamed(props, id)
	if err != nil {
		// Cannot happen: every spawn has a new id.
		r.co.log.Error("tablet actor spawn", "id", id, "err", err)
		pid = actor.NewPID(c.Self().Address, c.Self().Id+"/"+id)
	}
	r.tablets[name] = pid
	r.names[pid.Id] = name
	r.idents[name] = TabletIdentity(meta.GetName(), meta.GetGeneration(), uint32(idx))
	return pid
}

// owner is the address of the coordinator that owns the tablet when that
// is another coordinator; "" when it is us, when we are not clustered, or
// when no owner is known yet (then we serve it: tablet-actor state is
// soft, a second activation costs cache affinity, never rows).
func (r *RouterActor) owner(table string, gen uint64, idx uint32) string {
	if r.place == nil {
		return ""
	}
	o := r.place.owner(TabletIdentity(table, gen, idx))
	if o == r.self {
		return ""
	}
	return o
}

// ownerAvoiding is owner among the members the client did not lose.
func (r *RouterActor) ownerAvoiding(table string, gen uint64, idx uint32, avoid []string) string {
	if len(avoid) == 0 || r.place == nil {
		return r.owner(table, gen, idx)
	}
	addrs := make([]string, 0, len(r.place.addrs))
	for _, a := range r.place.addrs {
		if a == r.self || !slices.Contains(avoid, a) {
			addrs = append(addrs, a)
		}
	}
	if o := tablets.Owner(addrs, TabletIdentity(table, gen, idx)); o != r.self {
		return o
	}
	return ""
}

// forwardToOwner sends a scan request to the router of the tablet's
// owner and tells the client who serves it, so that the client re-sends
// it if that coordinator is lost before data flows.
func (r *RouterActor) forwardToOwner(c actor.Context, owner string, rs *routedScan) {
	m := rs.req
	fwd := proto.Clone(m).(*messages.ScanRequest)
	fwd.ForwardedBy = r.self
	fwd.TimeoutMs = wire.TimeoutMs(rs.deadline.Sub(r.co.now()))
	c.Send(actor.NewPID(owner, wire.RouterName), fwd)
	r.co.counters.forwarded.Add(1)
	if client := wire.ToPID(m.GetClient()); client != nil {
		c.Send(client, &messages.ScanRouted{RequestId: m.GetRequestId(), Owner: owner})
	}
}

// topologyChanged: the cluster topology changed (local message; the
// router reads the latest placement, so a late nudge is harmless).
type topologyChanged struct{}

// onTopology takes the latest cluster topology: tablet actors whose tablet
// is now owned by another coordinator stop as soon as their flows end.
func (r *RouterActor) onTopology(c actor.Context) {
	p := r.co.placement()
	if p == nil || p == r.place {
		return
	}
	r.place = p
	for name, pid := range r.tablets {
		if id, ok := r.idents[name]; ok && r.place.owner(id) != r.self && r.place.owner(id) != "" {
			c.Send(pid, &movedAway{})
		}
	}
}

func tabletActorName(table string, gen uint64, idx uint32) string {
	return fmt.Sprintf("%s.g%d.t%d", table, gen, idx)
}
