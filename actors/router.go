package actors

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// RouterName is the actor id of the coordinator's router: clients send
// ScanRequest, StatusRequest, RouteRequest and ReloadProfiles to it.
const RouterName = "scanplane-router"

type metaLoaded struct {
	key  tableGen
	meta *messages.TableMeta
	code messages.ErrorCode
	err  error
}

type routeResolved struct {
	req    *messages.RouteRequest
	sender *actor.PID
	meta   *messages.TableMeta
	err    error
}

// RouterActor validates requests and forwards them to tablet actors,
// spawning them lazily (one per tablet, named table.gGEN.tIDX).
type RouterActor struct {
	co      *Coordinator
	tablets map[string]*actor.PID
	waiting map[tableGen][]*messages.ScanRequest
}

func newRouterActor(co *Coordinator) *RouterActor {
	return &RouterActor{co: co, tablets: map[string]*actor.PID{}, waiting: map[tableGen][]*messages.ScanRequest{}}
}

// Receive implements actor.Actor.
func (r *RouterActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *messages.ScanRequest:
		r.onScan(c, m)
	case *metaLoaded:
		reqs := r.waiting[m.key]
		delete(r.waiting, m.key)
		for _, req := range reqs {
			if m.err != nil {
				r.reject(c, req, m.code, m.err.Error())
				continue
			}
			r.forward(c, req, m.meta)
		}
	case *messages.ScanDone:
		t := m.GetTablet()
		if pid := r.tablets[tabletActorName(t.GetTable(), t.GetGeneration(), t.GetIndex())]; pid != nil {
			c.Send(pid, m)
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
		sender, self, co := c.Sender(), c.Self(), r.co
		root := c.ActorSystem().Root
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			res := &routeResolved{req: m, sender: sender}
			gen, err := co.meta.src.Current(ctx, m.GetTable())
			if err == nil && gen == 0 {
				err = fmt.Errorf("no table %q", m.GetTable())
			}
			if err == nil {
				res.meta, _, err = co.meta.get(ctx, m.GetTable(), gen)
			}
			res.err = err
			root.Send(self, res)
		}()
	case *routeResolved:
		if m.err != nil {
			c.Send(m.sender, &messages.RouteReply{Error: m.err.Error()})
			return
		}
		idx := tablets.TabletFor(m.meta.GetSplitPoints(), m.req.GetRow())
		pid := r.tablet(c, m.meta, idx)
		c.RequestWithCustomSender(pid, m.req, m.sender)
	case *actor.Terminated:
		for name, pid := range r.tablets {
			if pid.Equal(m.Who) {
				delete(r.tablets, name)
			}
		}
	}
}

func (r *RouterActor) reject(c actor.Context, m *messages.ScanRequest, code messages.ErrorCode, msg string) {
	r.co.counters.failed.Add(1)
	if client := ToPID(m.GetClient()); client != nil {
		c.Send(client, &messages.ScanError{RequestId: m.GetRequestId(), Code: code, Message: msg})
	}
}

func (r *RouterActor) onScan(c actor.Context, m *messages.ScanRequest) {
	if err := ValidateScanRequest(m); err != nil {
		r.reject(c, m, messages.ErrorCode_ERROR_CODE_BAD_REQUEST, "bad ScanRequest: "+err.Error())
		return
	}
	key := tableGen{m.Tablet.Table, m.Tablet.Generation}
	if meta := r.co.meta.cached(key.table, key.gen); meta != nil {
		r.forward(c, m, meta)
		return
	}
	first := len(r.waiting[key]) == 0
	r.waiting[key] = append(r.waiting[key], m)
	if !first {
		return
	}
	self, root, co := c.Self(), c.ActorSystem().Root, r.co
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		meta, code, err := co.meta.get(ctx, key.table, key.gen)
		root.Send(self, &metaLoaded{key: key, meta: meta, code: code, err: err})
	}()
}

func (r *RouterActor) forward(c actor.Context, m *messages.ScanRequest, meta *messages.TableMeta) {
	idx := int(m.Tablet.Index)
	if idx >= len(meta.GetTablets()) {
		r.reject(c, m, messages.ErrorCode_ERROR_CODE_NO_SUCH_TABLET, fmt.Sprintf("table %s/g%d has %d tablets, no tablet %d", meta.Name, meta.Generation, len(meta.Tablets), idx))
		return
	}
	ref := meta.Tablets[idx].GetRef()
	if !bytes.Equal(ref.GetPrevEndRow(), m.Tablet.GetPrevEndRow()) || !bytes.Equal(ref.GetEndRow(), m.Tablet.GetEndRow()) {
		r.reject(c, m, messages.ErrorCode_ERROR_CODE_NO_SUCH_TABLET, fmt.Sprintf("tablet %d of %s/g%d has other bounds than requested", idx, meta.Name, meta.Generation))
		return
	}
	c.Send(r.tablet(c, meta, idx), m)
}

func (r *RouterActor) tablet(c actor.Context, meta *messages.TableMeta, idx int) *actor.PID {
	name := tabletActorName(meta.GetName(), meta.GetGeneration(), uint32(idx))
	if pid := r.tablets[name]; pid != nil {
		return pid
	}
	tm := meta.GetTablets()[idx]
	co := r.co
	pid, err := c.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return newTabletActor(co, meta, tm) }), name)
	if err != nil {
		// Already exists (a race with a stopping actor): use its PID.
		pid = actor.NewPID(c.Self().Address, c.Self().Id+"/"+name)
	}
	r.tablets[name] = pid
	return pid
}

func tabletActorName(table string, gen uint64, idx uint32) string {
	return fmt.Sprintf("%s.g%d.t%d", table, gen, idx)
}
