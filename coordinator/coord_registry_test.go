package coordinator

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/scanplane/scanplane/internal/testutil/servertest"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
	"github.com/scanplane/scanplane/wire"
)

func hb(host, server string, pid *actor.PID, interval time.Duration) *messages.Heartbeat {
	return &messages.Heartbeat{Host: host, Server: server, Zone: "z", Group: "default", Pid: wire.FromPID(pid), Incarnation: "i",
		Workers: 4, IntervalMs: interval.Milliseconds()}
}

func liveServers(v *selection.LoadView) int {
	n := 0
	for _, s := range v.Servers {
		if s.Alive {
			n++
		}
	}
	return n
}

// Host actors whose servers are all gone are reaped, and their part of
// the view and status goes with them.
func TestHostActorsReapedWhenServersGone(t *testing.T) {
	r := newRig(t, rigOpts{rows: 10, tablets: 1, coord: func(c *CoordinatorConfig) {
		c.HeartbeatMisses, c.HostForget = 1, 50*time.Millisecond
	}})
	fake := actor.NewPID(r.as.Address(), "nobody")
	for i := range 200 {
		r.as.Root.Send(r.co.registry, hb(fmt.Sprintf("gone%03d", i), fmt.Sprintf("gone%03d/0", i), fake, 10*time.Millisecond))
	}
	// Counted as they start: with 10ms heartbeats and HostForget 50ms the
	// first may be reaped before the last starts on a slow machine, so
	// "200 alive at once" is not what this test is about.
	r.waitFor("200 host actors started", func() bool { return r.co.counters.hostStarts.Load() == 200 })
	r.waitFor("every host actor to be reaped", func() bool { return r.co.counters.hostActors.Load() == 0 })
	if st := r.co.Status(); len(st.GetServers()) != 0 || st.GetHostActors() != 0 {
		t.Fatalf("after reaping: %d servers in the status, %d host actors", len(st.GetServers()), st.GetHostActors())
	}
	r.waitFor("an empty view", func() bool { return len(r.co.board.View().Servers) == 0 })
	// A host that comes back gets a new host actor.
	r.as.Root.Send(r.co.registry, hb("gone007", "gone007/0", fake, time.Hour))
	r.waitFor("the host to come back", func() bool { return liveServers(r.co.board.View()) == 1 })
}

// Heartbeats that reach the registry while a host actor is being reaped
// are not lost: a server that leaves and comes back around the reap
// boundary is in the view after every heartbeat.
func TestHostReapLosesNoHeartbeat(t *testing.T) {
	r := newRig(t, rigOpts{rows: 10, tablets: 1, coord: func(c *CoordinatorConfig) {
		c.HostForget, c.SweepInterval = time.Millisecond, 2*time.Millisecond
	}})
	fake := actor.NewPID(r.as.Address(), "nobody")
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 150 {
		m := hb("flappy", "flappy/0", fake, time.Hour)
		m.QueueLen = uint32(i + 1)
		r.as.Root.Send(r.co.registry, m)
		r.waitFor(fmt.Sprintf("heartbeat %d to put the server in the view", i), func() bool {
			s := r.co.board.View().Server("flappy/0")
			return s != nil && s.Alive && s.QueueLen == i+1
		})
		r.as.Root.Send(r.co.registry, &messages.Heartbeat{Host: "flappy", Server: "flappy/0", Leaving: true})
		time.Sleep(time.Duration(rng.IntN(8000)) * time.Microsecond)
	}
	t.Logf("150 comebacks, %d host actor starts", r.co.counters.hostStarts.Load())
}

// MaxHosts caps the host actors; the excess heartbeats are bad messages.
func TestMaxHostsCapsHostActors(t *testing.T) {
	r := newRig(t, rigOpts{rows: 10, tablets: 1, coord: func(c *CoordinatorConfig) { c.MaxHosts = 5 }})
	fake := actor.NewPID(r.as.Address(), "nobody")
	for i := range 12 {
		r.as.Root.Send(r.co.registry, hb(fmt.Sprintf("h%d", i), fmt.Sprintf("h%d/0", i), fake, time.Hour))
	}
	r.waitFor("7 refused heartbeats", func() bool { return r.co.Status().GetBadMessages() == 7 })
	// Host actors count themselves when they start (asynchronously).
	r.waitFor("5 host actors (MaxHosts)", func() bool { return r.co.Status().GetHostActors() == 5 })
	if n := r.co.Status().GetHostActors(); n != 5 {
		t.Fatalf("%d host actors, want MaxHosts 5", n)
	}
	// Known hosts keep heartbeating.
	r.as.Root.Send(r.co.registry, hb("h0", "h0/1", fake, time.Hour))
	r.waitFor("a second server on a known host", func() bool { return liveServers(r.co.board.View()) == 6 })
}

// Bad heartbeats and signals are counted, dead letters too; all show in
// StatusReply.
func TestFailuresAreCounted(t *testing.T) {
	r := newRig(t, rigOpts{rows: 10, tablets: 1})
	fake := actor.NewPID(r.as.Address(), "nobody")
	long := strings.Repeat("x", 300)
	bad := []*messages.Heartbeat{
		{Server: "s", Pid: wire.FromPID(fake), IntervalMs: 1000},
		{Host: "h", Pid: wire.FromPID(fake), IntervalMs: 1000},
		{Host: "h", Server: "s", IntervalMs: 1000},
		{Host: long, Server: "s", Pid: wire.FromPID(fake), IntervalMs: 1000},
		{Host: "h", Server: "s", Zone: long, Pid: wire.FromPID(fake), IntervalMs: 1000},
		{Host: "h", Server: "s", Pid: wire.FromPID(fake), IntervalMs: 0},
		{Host: "h", Server: "s", Pid: wire.FromPID(fake), IntervalMs: 7 * 24 * 3600 * 1000},
	}
	for _, m := range bad {
		r.as.Root.Send(r.co.registry, m)
	}
	r.as.Root.Send(r.co.registry, &signalMsg{sig: &messages.LoadSignal{Server: "s"}})
	r.waitFor("8 bad messages", func() bool { return r.co.Status().GetBadMessages() == 8 })
	if n := len(r.co.board.View().Servers); n != 0 {
		t.Fatalf("%d servers in the view from bad heartbeats", n)
	}
	r.as.Root.Send(actor.NewPID(r.as.Address(), "no-such-actor"), &messages.Cancel{RequestId: "x"})
	r.waitFor("a dead letter", func() bool { return r.co.Status().GetDeadLetters() == 1 })
	for _, m := range []string{"dead_letters_total", "bad_messages_total", "overloaded_total", "host_actors", "flows"} {
		found := false
		for _, c := range r.co.Collectors() {
			ch := make(chan *prometheus.Desc, 16)
			c.Describe(ch)
			close(ch)
			for d := range ch {
				if strings.Contains(d.String(), `"scanplane_coordinator_`+m+`"`) {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("no collector scanplane_coordinator_%s", m)
		}
	}
}

// gatedMeta is a MetaSource whose Get blocks until open is closed, and
// counts the Gets running at once.
type gatedMeta struct {
	MetaSource
	open          chan struct{}
	running, peak atomic.Int32
}

func (g *gatedMeta) Get(ctx context.Context, table string, gen uint64) (*messages.TableMeta, error) {
	n := g.running.Add(1)
	defer g.running.Add(-1)
	for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
	}
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.MetaSource.Get(ctx, table, gen)
}

// Requests waiting for metadata are bounded (excess answered OVERLOADED
// at once) and so are the metadata loads running.
func TestRouterBoundsWaitingRequests(t *testing.T) {
	var gm *gatedMeta
	r := newRig(t, rigOpts{rows: 100, tablets: 1, coord: func(c *CoordinatorConfig) { c.MaxWaitingPerTable, c.MaxWaiting, c.MaxMetaLoads = 3, 5, 1 },
		meta: func(m MetaSource) MetaSource { gm = &gatedMeta{MetaSource: m, open: make(chan struct{})}; return gm }})
	r.addServer("h1", 0, servertest.Default(), nil)
	var waiting []*rigScan
	for range 3 {
		waiting = append(waiting, r.start(r.request(0), false))
	}
	over := r.scan(r.request(0))
	if over.err.GetCode() != messages.ErrorCode_ERROR_CODE_OVERLOADED {
		t.Fatalf("4th request for one table: %v, want OVERLOADED", over.err)
	}
	// Other generations: two more wait (MaxWaiting 5), then OVERLOADED; one
	// metadata load at a time.
	for i := range 3 {
		req := r.request(0)
		req.Tablet = &messages.TabletRef{Table: "t", Generation: uint64(7 + i), Index: 0, EndRow: req.Tablet.EndRow}
		s := r.start(req, false)
		if i < 2 {
			waiting = append(waiting, s)
			continue
		}
		<-s.done
		if s.err.GetCode() != messages.ErrorCode_ERROR_CODE_OVERLOADED {
			t.Fatalf("6th waiting request: %v, want OVERLOADED", s.err)
		}
	}
	if st := r.co.Status(); st.GetOverloaded() != 2 {
		t.Fatalf("overloaded %d, want 2", st.GetOverloaded())
	}
	close(gm.open)
	for i, s := range waiting {
		<-s.done
		if i < 3 {
			r.checkRows(s, 0)
		} else if s.err.GetCode() != messages.ErrorCode_ERROR_CODE_NO_SUCH_TABLE && s.err.GetCode() != messages.ErrorCode_ERROR_CODE_STALE_GENERATION {
			t.Fatalf("request for a missing generation: %v", s.err)
		}
	}
	if p := gm.peak.Load(); p != 1 {
		t.Fatalf("%d metadata loads at once, want MaxMetaLoads 1", p)
	}
}

// Warnings are rate-limited per kind: one line per WarnEvery, the next
// one saying how many were suppressed.
func TestWarningsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	w := &warnLimiter{log: slog.New(slog.NewTextHandler(&buf, nil)), every: 10 * time.Second, now: func() time.Time { return now },
		kinds: map[string]*warnKind{}}
	for range 100 {
		w.warn("dead_letter", "dead letter")
		w.warn("overloaded", "overloaded")
	}
	if n := strings.Count(buf.String(), "\n"); n != 2 {
		t.Fatalf("%d lines for 2×100 warnings within WarnEvery, want 2:\n%s", n, buf.String())
	}
	now = now.Add(10 * time.Second)
	buf.Reset()
	w.warn("dead_letter", "dead letter")
	if !strings.Contains(buf.String(), "level=WARN") || !strings.Contains(buf.String(), "suppressed=99") {
		t.Fatalf("the next line should be a warning counting 99 suppressed: %s", buf.String())
	}
}
