package scanserver

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
)

type rigOpts struct{ rows, tablets int }

// rig runs real scan-server actors over a table ingested into a
// directory store; a probe actor plays the client and the tablet actor.
type rig struct {
	t       testing.TB
	as      *actor.ActorSystem
	store   *tablets.DirStore
	table   *messages.TableMeta
	truth   []tablets.Entry
	life    context.Context
	servers []*actor.PID
}

// dirTable ingests a table "t" of rows generated rows in nTablets
// tablets of 4 KiB blocks into a directory store of the test's own.
func dirTable(t testing.TB, rows, nTablets int) (*tablets.DirStore, *messages.TableMeta, []tablets.Entry) {
	t.Helper()
	dir := t.TempDir()
	store, err := tablets.NewDirStore(dir + "/blocks")
	if err != nil {
		t.Fatal(err)
	}
	meta, err := tablets.NewDirMetaStore(dir + "/meta")
	if err != nil {
		t.Fatal(err)
	}
	truth := tablets.GenerateRows(rows)
	icfg := tablets.DefaultIngestConfig()
	icfg.Tablets, icfg.BlockSize = nTablets, 4<<10
	table, err := tablets.Ingest(context.Background(), store, meta, "t", truth, icfg)
	if err != nil {
		t.Fatal(err)
	}
	return store, table, truth
}

func newRig(t testing.TB, o rigOpts) *rig {
	t.Helper()
	r := &rig{t: t}
	r.store, r.table, r.truth = dirTable(t, o.rows, o.tablets)
	quiet := slog.New(slog.DiscardHandler)
	r.as = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }),
		actor.WithDeadLetterThrottleInterval(time.Millisecond))
	life, cancel := context.WithCancel(context.Background())
	r.life = life
	t.Cleanup(func() {
		cancel()
		for _, pid := range r.servers {
			_ = r.as.Root.StopFuture(pid).Wait()
		}
		r.as.Shutdown()
	})
	return r
}

// addServer spawns scan server idx of host reading through fetcher (nil:
// the rig's store).
func (r *rig) addServer(host string, idx int, cfg ScanServerConfig, fetcher tablets.BlockFetcher) *actor.PID {
	r.t.Helper()
	return r.addServerCounting(host, idx, cfg, fetcher, nil)
}

// addServerCounting is addServer with counters that receive the server's
// counts (nil: its own).
func (r *rig) addServerCounting(host string, idx int, cfg ScanServerConfig, fetcher tablets.BlockFetcher, counters *ServerCounters) *actor.PID {
	r.t.Helper()
	if fetcher == nil {
		fetcher = tablets.StoreFetcher{Store: r.store}
	}
	id := fmt.Sprintf("%s/%d", host, idx)
	pid, err := r.as.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor {
		return NewScanServerActor(cfg, ServerDeps{ID: id, Host: host, Fetcher: fetcher, System: r.as, Life: r.life, Counters: counters})
	}), fmt.Sprintf("srv-%s-%d", host, idx))
	if err != nil {
		r.t.Fatal(err)
	}
	r.servers = append(r.servers, pid)
	return pid
}

func (r *rig) waitFor(what string, cond func() bool) {
	r.t.Helper()
	testutil.Eventually(r.t, 20*time.Second, what, cond)
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

// probe is an actor that records every message it receives.
type probe struct {
	mu   sync.Mutex
	msgs []any
	pid  *actor.PID
}

func (r *rig) newProbe() *probe {
	p := &probe{}
	p.pid = r.as.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch c.Message().(type) {
		case actor.SystemMessage, *actor.Started, *actor.Stopping, *actor.Stopped:
			return
		}
		p.mu.Lock()
		p.msgs = append(p.msgs, c.Message())
		p.mu.Unlock()
	}))
	return p
}

// all returns the messages matching pred.
func (p *probe) all(pred func(any) bool) []any {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []any
	for _, m := range p.msgs {
		if pred(m) {
			out = append(out, m)
		}
	}
	return out
}

// wait waits for a message matching pred and returns the first.
func (p *probe) wait(r *rig, what string, pred func(any) bool) any {
	r.t.Helper()
	var got any
	r.waitFor(what, func() bool {
		if ms := p.all(pred); len(ms) > 0 {
			got = ms[0]
			return true
		}
		return false
	})
	return got
}

// startScan sends StartScan for all of tablet idx straight to a server;
// p plays both the client and the tablet actor.
func (r *rig) startScan(p *probe, server *actor.PID, id string, idx int, window uint32) {
	r.startScanWith(p, server, id, idx, window, nil)
}

// startScanWith is startScan with the StartScan changed by edit (nil: none)
// before it goes.
func (r *rig) startScanWith(p *probe, server *actor.PID, id string, idx int, window uint32, edit func(*messages.StartScan)) {
	tm := r.table.GetTablets()[idx]
	m := &messages.StartScan{RequestId: id, Attempt: 1, Client: wire.FromPID(p.pid), TabletActor: wire.FromPID(p.pid),
		Tablet: tm.GetRef(), Files: tm.GetFiles(), Range: &messages.KeyRange{Start: tm.GetRef().GetPrevEndRow(), End: tm.GetRef().GetEndRow()},
		BatchRows: 50, Window: window, BusyTimeoutUs: time.Minute.Microseconds()}
	if edit != nil {
		edit(m)
	}
	r.as.Root.Send(server, m)
}

// drain acknowledges every batch of attempt 1 of scan id on server until
// the scan finishes, and returns its batches in order and the client's
// ScanFinished (the last batch's, or a separate one).
func (r *rig) drain(p *probe, server *actor.PID, id string) ([]*messages.RowBatch, *messages.ScanFinished) {
	r.t.Helper()
	acked := uint64(0)
	var fin *messages.ScanFinished
	r.waitFor("scan "+id+" to finish", func() bool {
		for _, m := range p.all(isBatch(id, 0)) {
			b := m.(*messages.RowBatch)
			if f := b.GetFinished(); f != nil {
				fin = f
			} else if b.GetSeq() > acked {
				acked = b.GetSeq()
				r.as.Root.Send(server, &messages.BatchAck{RequestId: id, Attempt: 1, Seq: acked})
			}
		}
		if fin == nil {
			if fs := p.all(isFinished(id)); len(fs) > 0 {
				fin = fs[0].(*messages.ScanFinished)
			}
		}
		return fin != nil
	})
	var batches []*messages.RowBatch
	for _, m := range p.all(isBatch(id, 0)) {
		batches = append(batches, m.(*messages.RowBatch))
	}
	return batches, fin
}

func isBatch(id string, seq uint64) func(any) bool {
	return func(m any) bool {
		b, ok := m.(*messages.RowBatch)
		return ok && b.GetRequestId() == id && (seq == 0 || b.GetSeq() == seq)
	}
}

func isFinished(id string) func(any) bool {
	return func(m any) bool { f, ok := m.(*messages.ScanFinished); return ok && f.GetRequestId() == id }
}

func isStarted(id string) func(any) bool {
	return func(m any) bool { s, ok := m.(*messages.ScanStarted); return ok && s.GetRequestId() == id }
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
