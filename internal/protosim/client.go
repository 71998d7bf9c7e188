package protosim

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// clientProc is one client process: its scans each drive a real
// client.TabletStream. It is never paused; it may be killed, which ends
// its scans (they are then checked only for what they leave behind).
type clientProc struct {
	w     *world
	addr  string
	proc  *process
	self  pid
	byReq map[string]*scanRun
	reqN  int
	lost  map[string]string // coordinators this client knows are lost
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
	stream   *client.TabletStream
	wake     *event
	got      []tablets.Entry
	err      error
	ended    bool
	orphaned bool // its client died
	endAt    time.Time
	requests []string
	avoid    []string
	// limit asks for at most this many rows (0 = all); abandonAfter makes
	// the caller stop reading after this many rows (0 = never).
	limit, abandonAfter int
}

// errAbandoned ends a scan whose caller stopped reading.
var errAbandoned = errors.New("protosim: the caller stopped reading")

func (sr *scanRun) owner() string { return fmt.Sprintf("scan-%d", sr.n) }

func (c *clientProc) start(sr *scanRun) {
	w := c.w
	sc := w.cfg.Stream
	cfg := client.StreamConfig{Client: c.self.wire(), BatchRows: sc.BatchRows, Window: sc.Window, Deadline: sr.deadline,
		MaxRequestTime: sc.MaxRequestTime, StallTimeout: sc.StallTimeout, IdleTimeout: sc.IdleTimeout,
		CoordinatorWait: sc.CoordinatorWait, MaxResumes: sc.MaxResumes, Lost: map[string]string{},
		Limit:     uint64(sr.limit),
		RequestID: func() string { c.reqN++; return fmt.Sprintf("%s-r%d", c.addr, c.reqN) }}
	if sr.hint != "" {
		cfg.Hints = map[string]string{"scan_type": sr.hint}
	}
	for _, co := range w.coords {
		cfg.Coordinators = append(cfg.Coordinators, co.addr)
	}
	for a, why := range c.lost {
		cfg.Lost[a] = why
	}
	sr.begin = w.s.now
	sr.stream = client.NewTabletStream(cfg, w.truth.refs[sr.tablet], sr.rng)
	w.trace.printf("%s scan-%d starts: tablet %d %s hint %q deadline +%v limit %d abandon after %d", c.addr, sr.n, sr.tablet, sr.rng, sr.hint,
		sr.deadline.Sub(w.s.now), sr.limit, sr.abandonAfter)
	c.do(sr, sr.stream.Start(w.s.now))
}

func (c *clientProc) receive(env *envelope) {
	id, _ := requestOf(env.msg)
	sr := c.byReq[id]
	if sr == nil {
		return // a request this client never sent (or forgot)
	}
	c.do(sr, sr.stream.OnMessage(c.w.s.now, env.msg))
}

// coordinatorLost and coordinatorUp are what the client learns from
// endpoint events and the cluster info watch.
func (c *clientProc) coordinatorLost(addr, why string) {
	c.lost[addr] = why
	for _, sr := range c.active() {
		c.do(sr, sr.stream.OnCoordinatorLost(c.w.s.now, addr, why))
	}
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

// do carries out a stream's actions and re-arms its one timer.
func (c *clientProc) do(sr *scanRun, acts []client.StreamAction) {
	w := c.w
	now := w.s.now
	stop := false // the caller stops reading
	for _, a := range acts {
		if w.trace.on {
			w.trace.printf("%s scan-%d: %s", c.addr, sr.n, a.Kind)
		}
		switch a.Kind {
		case client.ActSendRequest:
			req := a.Msg.(*messages.ScanRequest)
			for _, s := range req.GetAvoidServers() {
				if !slices.Contains(sr.avoid, s) {
					w.blamed(blame{by: c.addr, server: serverIDOf(s), requests: slices.Clone(sr.requests), from: sr.begin,
						what: "client resumed avoiding it"})
				}
			}
			sr.avoid = slices.Clone(req.GetAvoidServers())
			sr.requests = append(sr.requests, req.GetRequestId())
			c.byReq[req.GetRequestId()] = sr
			w.net.send(c.self, pid{a.Coordinator, "router"}, req)
		case client.ActSendDone:
			w.net.send(c.self, pid{a.Coordinator, "router"}, a.Msg)
		case client.ActSendCancel, client.ActSendAck:
			w.net.send(c.self, pidOf(a.Server), a.Msg)
		case client.ActYield:
			sr.got = append(sr.got, a.Rows...)
			stop = stop || (sr.abandonAfter > 0 && len(sr.got) >= sr.abandonAfter && !sr.stream.Done())
		case client.ActFinish:
			w.endScan(sr, nil)
		case client.ActFail:
			w.endScan(sr, a.Err)
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
	if t := sr.stream.NextWakeup(); !t.IsZero() {
		sr.wake = c.proc.timer(t.Sub(now), sr.owner(), "client stream timer", func() {
			sr.wake = nil
			c.do(sr, sr.stream.OnTimer(c.w.s.now))
		})
	}
}
