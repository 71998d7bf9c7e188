package coordinator

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/scanplane/scanplane/internal/actorenv"
	"github.com/scanplane/scanplane/internal/remoting"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/servertest"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
)

type rigOpts struct {
	rows, tablets int
	profiles      string // JSON; empty = built-in default
	coord         func(*CoordinatorConfig)
	meta          func(MetaSource) MetaSource // wraps the metadata source
	// noDone: the client sends no ScanDone for a scan that ended with its
	// winner's ScanFinished (as client.Client); else it sends one after
	// every scan.
	noDone bool
}

type rig struct {
	t      testing.TB
	as     *actor.ActorSystem
	co     *Coordinator
	store  *tablets.DirStore
	meta   *tablets.DirMetaStore
	icfg   tablets.IngestConfig // how the table was ingested
	table  *messages.TableMeta
	truth  []tablets.Entry
	client *actor.PID
	cl     *rigClient
	life   context.Context
	nreq   int
	mu     sync.Mutex
	// servers: the scan-server actors, stopped at cleanup.
	servers []*actor.PID
	// tablets: the running tablet actors.
	tablets *tabletWatch
}

func newRig(t testing.TB, o rigOpts) *rig {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	store, err := tablets.NewDirStore(dir + "/blocks")
	if err != nil {
		t.Fatal(err)
	}
	meta, err := tablets.NewDirMetaStore(dir + "/meta")
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, store: store, meta: meta, truth: tablets.GenerateRows(o.rows)}
	icfg := tablets.DefaultIngestConfig()
	icfg.Tablets = o.tablets
	icfg.BlockSize = 4 << 10
	r.icfg = icfg
	if r.table, err = tablets.Ingest(ctx, store, meta, "t", r.truth, icfg); err != nil {
		t.Fatal(err)
	}
	profiles := selection.DefaultProfiles()
	if o.profiles != "" {
		if profiles, err = selection.ParseProfiles([]byte(o.profiles)); err != nil {
			t.Fatal(err)
		}
	}
	cfg := DefaultCoordinatorConfig()
	cfg.SweepInterval = 20 * time.Millisecond
	// Tests make actors fail by sending them an *actorenv.Panic, and find
	// tablet actors with tablets.
	r.tablets = newTabletWatch()
	cfg.Env.Middleware = []actor.ReceiverMiddleware{actorenv.Panicking, r.tablets.middleware}
	if o.coord != nil {
		o.coord(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	// The dead-letter throttle's goroutine lives one throttle interval
	// after a dead letter (default 1s): short, so goleak does not see it.
	r.as = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return remoting.DiscardLogger() }),
		actor.WithDeadLetterThrottleInterval(time.Millisecond))
	var src MetaSource = meta
	if o.meta != nil {
		src = o.meta(src)
	}
	r.co = newCoordinator(cfg, nil, src, profiles)
	if err := r.co.startActors(r.as); err != nil {
		t.Fatal(err)
	}
	life, cancel := context.WithCancel(ctx)
	r.life = life
	r.cl = &rigClient{scans: map[string]*rigScan{}, noDone: o.noDone}
	r.client = r.as.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return r.cl }))
	t.Cleanup(func() {
		cancel()
		r.co.Close()
		for _, pid := range r.servers {
			_ = r.as.Root.StopFuture(pid).Wait()
		}
		_ = r.as.Root.StopFuture(r.client).Wait()
		r.as.Shutdown()
	})
	return r
}

// addServer spawns scan server idx of host and announces it by heartbeat.
func (r *rig) addServer(host string, idx int, cfg servertest.Config, fetcher tablets.BlockFetcher) *actor.PID {
	r.t.Helper()
	return r.addServerGens(host, idx, cfg, fetcher, nil)
}

// addServerGens is addServer for a server that looks up current
// generations in gens (as a host agent's servers do).
func (r *rig) addServerGens(host string, idx int, cfg servertest.Config, fetcher tablets.BlockFetcher, gens wire.GenerationSource) *actor.PID {
	r.t.Helper()
	return r.spawnServer(host, idx, cfg, servertest.Deps{Fetcher: fetcher, Gens: gens})
}

// spawnServer spawns scan server idx of host with deps (Fetcher nil: the
// rig's store; ID, Host, System and Life: the rig's), announces it by
// heartbeat and waits until the load view has it.
func (r *rig) spawnServer(host string, idx int, cfg servertest.Config, deps servertest.Deps) *actor.PID {
	r.t.Helper()
	if deps.Fetcher == nil {
		deps.Fetcher = tablets.StoreFetcher{Store: r.store}
	}
	id := fmt.Sprintf("%s/%d", host, idx)
	deps.ID, deps.Host, deps.System, deps.Life = id, host, r.as, r.life
	pid, err := r.as.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor {
		a, _ := servertest.New(cfg, deps)
		return a
	}), fmt.Sprintf("srv-%s-%d", host, idx))
	if err != nil {
		r.t.Fatal(err)
	}
	r.servers = append(r.servers, pid)
	r.heartbeat(host, id, pid, "inc1", cfg.Workers)
	r.waitFor("server "+id+" in the view", func() bool { return r.alive(id) })
	return pid
}

// alive reports whether server id is alive in the view.
func (r *rig) alive(id string) bool {
	s := r.co.board.View().Server(selection.ServerID(id))
	return s != nil && s.Alive
}

func (r *rig) heartbeat(host, id string, pid *actor.PID, incarnation string, workers int) {
	r.as.Root.Send(r.co.registry, &messages.Heartbeat{Host: host, Server: id, Zone: "z", Group: "default", Pid: wire.FromPID(pid),
		Incarnation: incarnation, Workers: uint32(workers), IntervalMs: time.Hour.Milliseconds()})
}

func (r *rig) waitFor(what string, cond func() bool) {
	r.t.Helper()
	testutil.Eventually(r.t, 20*time.Second, what, cond)
}

// request builds a ScanRequest for all of tablet idx.
func (r *rig) request(idx int) *messages.ScanRequest {
	r.mu.Lock()
	r.nreq++
	id := fmt.Sprintf("req-%d", r.nreq)
	r.mu.Unlock()
	tm := r.table.GetTablets()[idx]
	return &messages.ScanRequest{RequestId: id, Client: wire.FromPID(r.client), Tablet: tm.GetRef(),
		Range: &messages.KeyRange{Start: tm.GetRef().GetPrevEndRow(), End: tm.GetRef().GetEndRow()}, BatchRows: 50}
}

// start sends req through the router; the scan's result arrives on the
// returned scan's done channel.
func (r *rig) start(req *messages.ScanRequest, noAck bool) *rigScan {
	return r.startVia(req, noAck, false)
}

// startVia is start; direct: to the tablet actor once the client knows it.
func (r *rig) startVia(req *messages.ScanRequest, noAck, direct bool) *rigScan {
	s := &rigScan{req: req, noAck: noAck, done: make(chan struct{})}
	r.as.Root.Send(r.client, &rigStartScan{scan: s, router: r.co.router, direct: direct})
	return s
}

// wait waits for s to end.
func (r *rig) wait(s *rigScan) *rigScan {
	r.t.Helper()
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		r.t.Fatalf("scan %s: no end within 30s", s.req.RequestId)
	}
	return s
}

// scan runs req to its end.
func (r *rig) scan(req *messages.ScanRequest) *rigScan {
	r.t.Helper()
	return r.wait(r.start(req, false))
}

// truthOf returns the ground-truth rows of tablet idx.
func (r *rig) truthOf(idx int) []tablets.Entry {
	ref := r.table.GetTablets()[idx].GetRef()
	rg := tablets.Range{Start: ref.GetPrevEndRow(), End: ref.GetEndRow()}
	var out []tablets.Entry
	for _, e := range r.truth {
		if rg.Contains(e.Key) {
			out = append(out, e)
		}
	}
	return out
}

// checkRows compares a finished scan's rows with tablet idx's truth.
func (r *rig) checkRows(s *rigScan, idx int) {
	r.t.Helper()
	if s.err != nil {
		r.t.Fatalf("scan %s failed: %v", s.req.RequestId, s.err)
	}
	if s.protoErr != "" {
		r.t.Fatalf("scan %s: %s", s.req.RequestId, s.protoErr)
	}
	want := r.truthOf(idx)
	if len(s.rows) != len(want) {
		r.t.Fatalf("scan %s: %d rows, want %d", s.req.RequestId, len(s.rows), len(want))
	}
	for i, row := range s.rows {
		if !bytes.Equal(row.Key, want[i].Key) || !bytes.Equal(row.Value, want[i].Value) {
			r.t.Fatalf("scan %s: row %d is %q, want %q", s.req.RequestId, i, row.Key, want[i].Key)
		}
	}
}

type rigStartScan struct {
	scan   *rigScan
	router *actor.PID
	// direct: ask for the tablet actor's PID and, once known, send the
	// tablet's requests and ScanDones straight to it (as the client does).
	direct bool
	// to, if set: where the request goes (a direct scan).
	to *actor.PID
}

// rigScan is one request as the rig client sees it. Fields are written by
// the client actor and read by the test after done is closed.
type rigScan struct {
	req      *messages.ScanRequest
	noAck    bool
	dead     bool // a dead client: receives, answers nothing
	done     chan struct{}
	accepted uint32
	nextSeq  uint64
	dig      tablets.RowDigest
	rows     []tablets.Entry
	batches  []*messages.RowBatch // every batch received, any attempt
	fin      *messages.ScanFinished
	err      *messages.ScanError
	protoErr string // a protocol violation seen by the client
	ended    bool
	direct   bool
	sentTo   *actor.PID             // where the request went
	routed   []*messages.ScanRouted // the ScanRouted messages received
	progress []*messages.ScanProgress
}

// rigClient is the scan client actor.
type rigClient struct {
	scans  map[string]*rigScan
	noDone bool // rigOpts.noDone
	router *actor.PID
	// tabletActors: by tablet index, from ScanRouted (direct scans only).
	tabletActors map[uint32]*actor.PID
}

func (c *rigClient) end(s *rigScan) {
	if !s.ended {
		s.ended = true
		close(s.done)
	}
}

// Receive implements actor.Actor.
func (c *rigClient) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *rigStartScan:
		c.router = m.router
		s := m.scan
		c.scans[s.req.RequestId] = s
		s.direct, s.sentTo = m.direct, m.router
		if m.to != nil {
			s.direct, s.sentTo = true, m.to
		} else if m.direct {
			if pid := c.tabletActors[s.req.GetTablet().GetIndex()]; pid != nil {
				s.sentTo = pid
			} else {
				s.req.WantTabletActor = true
			}
		}
		ctx.Send(s.sentTo, s.req)
	case *messages.ScanRouted:
		s := c.scans[m.GetRequestId()]
		if s == nil {
			return
		}
		s.routed = append(s.routed, m)
		if ta := m.GetTabletActor(); ta != nil && s.direct {
			if c.tabletActors == nil {
				c.tabletActors = map[uint32]*actor.PID{}
			}
			c.tabletActors[s.req.GetTablet().GetIndex()] = wire.ToPID(ta)
		}
	case *messages.ScanProgress:
		if s := c.scans[m.GetRequestId()]; s != nil && !s.ended {
			s.progress = append(s.progress, m)
		}
	case *messages.RowBatch:
		s := c.scans[m.GetRequestId()]
		if s == nil || s.ended || s.dead {
			return
		}
		s.batches = append(s.batches, m)
		server := wire.ToPID(m.GetServerPid())
		if s.accepted == 0 {
			s.accepted = m.GetAttempt()
		}
		if m.GetAttempt() != s.accepted {
			if server != nil {
				ctx.Send(server, &messages.Cancel{RequestId: m.GetRequestId(), Attempt: m.GetAttempt(), Reason: "another attempt delivered first"})
			}
			return
		}
		s.nextSeq++
		if m.GetSeq() != s.nextSeq && s.protoErr == "" {
			s.protoErr = fmt.Sprintf("batch seq %d, want %d", m.GetSeq(), s.nextSeq)
		}
		rows := rowsOf(m)
		for _, row := range rows {
			s.dig.Add(row.Key, row.Value)
		}
		if (s.dig.Rows() != m.GetRowCount() || s.dig.Sum() != m.GetChecksum()) && s.protoErr == "" {
			s.protoErr = fmt.Sprintf("batch %d: row_count %d checksum %x, received %d rows checksum %x",
				m.GetSeq(), m.GetRowCount(), m.GetChecksum(), s.dig.Rows(), s.dig.Sum())
		}
		s.rows = append(s.rows, rows...)
		if f := m.GetFinished(); f != nil {
			// The last batch carries the end: no ack.
			if (f.GetBatches() != m.GetSeq() || f.GetRows() != m.GetRowCount() || f.GetChecksum() != m.GetChecksum()) && s.protoErr == "" {
				s.protoErr = fmt.Sprintf("final batch %d: finished %v disagrees with the batch", m.GetSeq(), f)
			}
			c.finish(ctx, s, f)
			return
		}
		if !s.noAck && server != nil {
			ctx.Send(server, &messages.BatchAck{RequestId: m.GetRequestId(), Attempt: m.GetAttempt(), Seq: m.GetSeq()})
		}
	case *messages.ScanFinished:
		s := c.scans[m.GetRequestId()]
		if s == nil || s.ended || s.dead || (m.GetAttempt() != s.accepted && m.GetAttempt() != 0) {
			return
		}
		c.finish(ctx, s, m)
	case *messages.ScanError:
		s := c.scans[m.GetRequestId()]
		if s == nil || s.ended {
			return
		}
		s.err = m
		c.end(s)
	}
}

// finish ends s on the accepted attempt's ScanFinished m (separate, or
// inside its last batch).
func (c *rigClient) finish(ctx actor.Context, s *rigScan, m *messages.ScanFinished) {
	s.fin = m
	if m.GetError() == messages.ErrorCode_ERROR_CODE_UNSPECIFIED &&
		(m.GetRows() != s.dig.Rows() || m.GetChecksum() != s.dig.Sum()) && s.protoErr == "" {
		s.protoErr = fmt.Sprintf("finished: rows %d checksum %x, received %d rows checksum %x", m.GetRows(), m.GetChecksum(), s.dig.Rows(), s.dig.Sum())
	}
	if c.noDone && m.GetError() == messages.ErrorCode_ERROR_CODE_UNSPECIFIED {
		c.end(s)
		return
	}
	to := c.router
	if pid := c.tabletActors[s.req.GetTablet().GetIndex()]; s.direct && pid != nil {
		to = pid
	}
	ctx.Send(to, &messages.ScanDone{RequestId: m.GetRequestId(), WinnerAttempt: s.accepted, Tablet: s.req.GetTablet(),
		Abandoned: m.GetError() != messages.ErrorCode_ERROR_CODE_UNSPECIFIED})
	c.end(s)
}

// rowsOf is a batch's rows from either encoding; an undecodable batch
// fails the test process loudly (the server under test made it).
func rowsOf(b *messages.RowBatch) []tablets.Entry {
	rows, err := tablets.BatchRows(b, 0)
	if err != nil {
		panic(fmt.Sprintf("batch %s/%d: %v", b.GetRequestId(), b.GetAttempt(), err))
	}
	return rows
}
