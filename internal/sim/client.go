package sim

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/internal/tabletstream"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
	"google.golang.org/protobuf/proto"
)

// clientProc is one client process: its scans each drive the client's
// real per-tablet protocol (tabletstream.TabletStream), with the client's
// routing: to the tablet's owner (byOwner) or the first coordinator up,
// and, when direct, straight to a tablet actor whose PID a ScanRouted
// named (as client.Client does), which meets the stopped-actor gate when
// that actor has stopped.
type clientProc struct {
	w       *world
	proc    *proc
	self    *messages.Pid
	byReq   map[string]*scanRun
	reqN    int
	lost    map[string]string // coordinators this client knows are lost
	byOwner bool
	direct  bool
	actors  map[tabletAt]*actor.PID
}

// tabletAt names a tablet actor: its tablet at one coordinator.
type tabletAt struct {
	tablet uint32
	coord  string
}

// scanRun is one scan of one tablet's piece of the table, and what the
// harness saw of it.
type scanRun struct {
	n        int
	cl       *clientProc
	tablet   int
	rng      tablets.Range
	hint     string
	begin    time.Time
	deadline time.Time
	stream   *tabletstream.TabletStream
	wake     *event
	got      []tablets.Entry
	err      error
	ended    bool
	endAt    time.Time
	requests []string
	// sentTo: the coordinator each request was sent to.
	sentTo map[string]string
	avoid  []string
	// heardAt: when the request in flight was sent or last heard of.
	heardAt time.Time
	// limit asks for at most this many rows (0 = all); abandonAfter makes
	// the caller stop reading after this many rows (0 = never).
	limit, abandonAfter int
}

// errAbandoned ends a scan whose caller stopped reading.
var errAbandoned = errors.New("sim: the caller stopped reading")

func (c *clientProc) start(sr *scanRun) {
	w := c.w
	sc := w.cfg.Stream
	cfg := tabletstream.StreamConfig{Client: c.self, BatchRows: sc.BatchRows, Window: sc.Window, Deadline: sr.deadline,
		MaxRequestTime: sc.MaxRequestTime, StallTimeout: sc.StallTimeout, IdleTimeout: sc.IdleTimeout,
		CoordinatorWait: sc.CoordinatorWait, MaxResumes: sc.MaxResumes, Lost: map[string]string{}, ByOwner: c.byOwner,
		Limit:     uint64(sr.limit),
		RequestID: func() string { c.reqN++; return fmt.Sprintf("%s-r%d", c.proc.addr, c.reqN) }}
	if sr.hint != "" {
		cfg.Hints = map[string]string{"scan_type": sr.hint}
	}
	if !w.mut.noVerify {
		// As client.Client does for a table ingested with digests.
		cfg.Verify, cfg.Roots = true, w.truth.roots[sr.tablet]
	}
	for _, co := range w.coords {
		cfg.Coordinators = append(cfg.Coordinators, co.proc.addr)
	}
	for a, why := range c.lost {
		cfg.Lost[a] = why
	}
	sr.begin = w.s.now
	sr.stream = tabletstream.NewTabletStream(cfg, w.truth.refs[sr.tablet], sr.rng)
	w.trace.printf("%s scan-%d starts: tablet %d %s hint %q deadline +%v limit %d abandon after %d", c.proc.addr, sr.n, sr.tablet, sr.rng, sr.hint,
		sr.deadline.Sub(w.s.now), sr.limit, sr.abandonAfter)
	c.do(sr, sr.stream.Start(w.s.now))
	w.watchSilence(sr)
}

func (c *clientProc) receive(msg proto.Message) {
	if w := c.w; w.trace.on {
		w.trace.printf("%s <- %s", c.proc.addr, describe(msg))
	}
	if m, ok := msg.(*messages.ScanRouted); ok && m.GetTabletActor() != nil {
		if sr := c.byReq[m.GetRequestId()]; sr != nil {
			c.actors[tabletAt{uint32(sr.tablet), m.GetOwner()}] = wire.ToPID(m.GetTabletActor())
		}
	}
	id, _ := requestOf(msg)
	sr := c.byReq[id]
	if sr == nil || sr.ended {
		// A request whose scan ended, or one this client never sent: as
		// client.Client does, a straggler's stream is told to stop.
		if b, ok := msg.(*messages.RowBatch); ok && b.GetServerPid() != nil {
			p := b.GetServerPid()
			c.send(actor.NewPID(p.GetAddress(), p.GetId()), &messages.Cancel{RequestId: b.GetRequestId(), Attempt: b.GetAttempt(),
				Reason: "request already done"})
		}
		return
	}
	if id == sr.stream.RequestID() {
		sr.heardAt = c.w.s.now
	}
	c.do(sr, sr.stream.OnMessage(c.w.s.now, msg))
}

// coordinatorLost and coordinatorUp are what the client learns from
// endpoint events and the cluster info watch.
func (c *clientProc) coordinatorLost(addr, why string) {
	c.lost[addr] = why
	for k := range c.actors {
		if k.coord == addr {
			delete(c.actors, k)
		}
	}
	for _, sr := range c.active() {
		c.do(sr, sr.stream.OnCoordinatorLost(c.w.s.now, addr, why))
	}
}

// silent marks addr lost for the whole client after one of its streams
// heard nothing from it for IdleTimeout, and probes it until it answers.
func (c *clientProc) silent(addr, why string) {
	if _, already := c.lost[addr]; already {
		return
	}
	c.w.stats.Kinds["coordinator silent to a client"]++
	c.coordinatorLost(addr, why)
	c.probe(addr)
}

// probeEvery is client.Client's probe period: a lost coordinator that
// runs again is up for the client at its next probe.
const probeEvery = 500 * time.Millisecond

// probe is client.Client's probe of a coordinator it lost: every
// probeEvery, a coordinator that runs (its process up) is up again.
func (c *clientProc) probe(addr string) {
	c.w.s.after(probeEvery, "client probe", func() {
		if _, lost := c.lost[addr]; !lost {
			return
		}
		for _, co := range c.w.coords {
			if co.proc.addr == addr && co.proc.state == procUp {
				c.coordinatorUp(addr)
				return
			}
		}
		c.probe(addr)
	})
}

func (c *clientProc) coordinatorUp(addr string) {
	delete(c.lost, addr)
	for _, sr := range c.active() {
		c.do(sr, sr.stream.OnCoordinatorUp(c.w.s.now, addr))
	}
}

func (c *clientProc) active() []*scanRun {
	var out []*scanRun
	for _, sr := range c.w.scans {
		if sr.cl == c && sr.stream != nil && !sr.ended {
			out = append(out, sr)
		}
	}
	return out
}

// send puts a client message on the network.
func (c *clientProc) send(to *actor.PID, msg proto.Message) {
	c.w.net.send(c.proc, c.proc.inc, nil, to, msg)
}

// do carries out a stream's actions and re-arms its one timer.
func (c *clientProc) do(sr *scanRun, acts []tabletstream.StreamAction) {
	w := c.w
	now := w.s.now
	stop := false // the caller stops reading
	for _, a := range acts {
		if w.trace.on && a.Kind != tabletstream.ActSendRequest && a.Kind != tabletstream.ActSendAck {
			w.trace.printf("%s scan-%d: %s", c.proc.addr, sr.n, a.Kind)
		}
		switch a.Kind {
		case tabletstream.ActSendRequest:
			req := a.Msg.(*messages.ScanRequest)
			for _, s := range req.GetAvoidServers() {
				if !slices.Contains(sr.avoid, s) {
					w.blamed(c.proc.addr, s, slices.Clone(sr.requests), sr.begin, "client resumed avoiding it")
				}
			}
			sr.avoid = slices.Clone(req.GetAvoidServers())
			sr.requests = append(sr.requests, req.GetRequestId())
			sr.sentTo[req.GetRequestId()] = a.Coordinator
			sr.heardAt = now
			c.byReq[req.GetRequestId()] = sr
			to := actor.NewPID(a.Coordinator, wire.RouterName)
			if c.direct && len(req.GetAvoidCoordinators()) == 0 {
				if pid := c.actors[tabletAt{uint32(sr.tablet), a.Coordinator}]; pid != nil {
					to = pid
				} else {
					req.WantTabletActor = true
				}
			}
			c.send(to, req)
		case tabletstream.ActSendDone:
			to := actor.NewPID(a.Coordinator, wire.RouterName)
			if pid := c.actors[tabletAt{uint32(sr.tablet), a.Coordinator}]; pid != nil && c.direct {
				to = pid
			}
			c.send(to, a.Msg)
		case tabletstream.ActSendCancel, tabletstream.ActSendAck:
			c.send(actor.NewPID(a.Server.GetAddress(), a.Server.GetId()), a.Msg)
		case tabletstream.ActYield:
			for _, r := range a.Rows { // the rows alias the batch: keep copies
				sr.got = append(sr.got, tablets.Entry{Key: slices.Clone(r.Key), Value: slices.Clone(r.Value)})
			}
			stop = stop || (sr.abandonAfter > 0 && len(sr.got) >= sr.abandonAfter && !sr.stream.Done())
		case tabletstream.ActFinish:
			w.endScan(sr, nil)
		case tabletstream.ActFail:
			w.endScan(sr, a.Err)
		case tabletstream.ActCoordinatorSilent:
			// As client.Client does, after this stream's actions:
			// the coordinator is lost for every scan of the client.
			addr, why := a.Coordinator, a.Err.Error()
			w.s.after(0, "coordinator silent", func() { c.silent(addr, why) })
		}
	}
	if stop && !sr.stream.Done() {
		acts := sr.stream.Abandon(now)
		defer w.endScan(sr, errAbandoned)
		c.do(sr, acts)
		return
	}
	w.s.cancel(sr.wake)
	sr.wake = nil
	if t := sr.stream.NextWakeup(); !t.IsZero() && !sr.ended {
		sr.wake = w.s.after(t.Sub(now), "client stream timer", func() {
			sr.wake = nil
			c.do(sr, sr.stream.OnTimer(c.w.s.now))
		})
	}
}
