package sim

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/internal/tabletstream"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
	"github.com/scanplane/scanplane/tablets"
)

// The properties checked on every run:
//
//  1. Every scan ends by its deadline + DeadlineBound, with exactly the
//     ground truth's rows of its range in order, or with a named error
//     (a tabletstream.ScanError with a code, or an error wrapping
//     tabletstream.ErrNoCoordinator, tabletstream.ErrStream or
//     context.DeadlineExceeded) after a prefix of those rows — never a
//     wrong row. A deadline error never comes before the deadline.
//  2. Nothing of a scan outlives the run: once every scan ended and the
//     faults are over (LeakBound after the last deadline at the latest),
//     no live coordinator has a flow or counts an attempt in flight on a
//     server (host counters exact), and no live server has a queued or
//     running job.
//  3. No server is avoided by a client for a fault it did not have: only
//     if that server was paused, dead or broken, or a message between it
//     and anyone about that request was dropped, late, duplicated or
//     reordered.
//  4. A run without any fault completes every scan within CalmBound of
//     its start (a request lost between coordinators costs the client
//     its idle timeout), and a scan for a group without servers fails
//     with NO_SERVERS naming the group within the profile's wait.
//  5. The components keep their own promises: an ended scan's
//     TabletStream is Done; no actor sends a local message across the
//     network; no goroutine an actor started panics.

// endScan records a scan's end and checks properties 1 and 4.
func (w *world) endScan(sr *scanRun, err error) {
	if sr.ended {
		w.violate("scan-%d ended twice (second: %v)", sr.n, err)
		return
	}
	now := w.s.now
	sr.ended, sr.err, sr.endAt = true, err, now
	w.s.cancel(sr.wake)
	sr.wake = nil
	w.stats.Scans++
	if sr.stream != nil && !sr.stream.Done() {
		w.violate("scan-%d ended but its TabletStream is not done", sr.n)
	}
	if sr.stream != nil {
		st := sr.stream.Stats()
		w.stats.Resumes += st.Resumes
		w.stats.Rejected += st.Rejected
	}
	switch {
	case err == nil:
		w.stats.OK++
		w.trace.printf("scan-%d finished with %d rows", sr.n, len(sr.got))
	case errors.Is(err, errAbandoned):
		w.stats.Abandoned++
		w.trace.printf("scan-%d abandoned after %d rows", sr.n, len(sr.got))
	default:
		w.stats.Failed[errorKind(err)]++
		w.trace.printf("scan-%d failed after %d rows: %v", sr.n, len(sr.got), err)
	}
	w.checkOutcome(sr)
	w.s.after(w.cfg.FlowBound, "leak check", func() { w.checkGone(sr) })
}

// watchSilence checks, every quarter of SilenceBound while sr runs, that
// its request in flight, while it waits for its first rows, is not left
// without a word for SilenceBound: waiting for a server is announced
// (ScanProgress), not silence. A fault of the request's messages or of
// any coordinator since it was last heard of excuses it.
func (w *world) watchSilence(sr *scanRun) {
	w.s.after(w.cfg.SilenceBound/4, "silence check", func() {
		if sr.ended {
			return
		}
		defer w.watchSilence(sr)
		id := sr.stream.RequestID()
		gap := w.s.now.Sub(sr.heardAt)
		if id == "" || gap <= w.cfg.SilenceBound || !strings.HasPrefix(sr.stream.Waiting(), "waiting for the first rows") {
			return
		}
		if len(w.faults.byRequest[id]) > 0 {
			return
		}
		for _, c := range w.coords {
			if _, ok := w.faults.procTroubled(c.proc.addr, sr.heardAt, w.s.now); ok {
				return
			}
		}
		w.problem("scan-%d: its request %s heard nothing for %v while it waits for its first rows (bound %v)", sr.n, id, gap.Round(time.Millisecond),
			w.cfg.SilenceBound)
		sr.heardAt = w.s.now // one report per silence
	})
}

// jobKey is one attempt on one server.
type jobKey struct {
	server, request string
	attempt         uint32
}

// checkGone: FlowBound after a scan ended, no live server still runs or
// queues an attempt of its requests, unless a fault touched the request,
// the coordinator it was sent to, or that server since the scan began
// (then the end of the run checks). A request that waited in a paused
// coordinator while its client moved on is served when the coordinator
// runs again, after the scan ended: the client cancels it at its first
// batch.
func (w *world) checkGone(sr *scanRun) {
	ended := fmtDur(sr.endAt.Sub(epoch))
	for _, id := range sr.requests {
		if len(w.faults.byRequest[id]) > 0 {
			continue
		}
		if co := sr.sentTo[id]; co != "" {
			if _, troubled := w.faults.procTroubled(co, sr.begin, w.s.now); troubled {
				continue
			}
		}
		for k, p := range w.jobs {
			if k.request != id || p.state != procUp {
				continue
			}
			if _, troubled := w.faults.procTroubled(p.addr, sr.begin, w.s.now); troubled {
				continue
			}
			w.problem("scan-%d ended at %s; %v later attempt %d of its request %s is still on %s", sr.n, ended, w.cfg.FlowBound,
				k.attempt, id, k.server)
		}
	}
}

func (w *world) checkOutcome(sr *scanRun) {
	if late := sr.endAt.Sub(sr.deadline); late > w.cfg.DeadlineBound {
		w.problem("scan-%d ended %v after its deadline (bound %v)", sr.n, late, w.cfg.DeadlineBound)
	}
	want := w.truth.scan(sr.rng, nil)
	if sr.limit > 0 && len(want) > sr.limit {
		want = want[:sr.limit]
	}
	if len(sr.got) > len(want) {
		w.problem("scan-%d got %d rows, its range %s has %d", sr.n, len(sr.got), sr.rng, len(want))
	}
	for i, r := range sr.got {
		if i >= len(want) {
			break
		}
		if !bytes.Equal(r.Key, want[i].Key) || !bytes.Equal(r.Value, want[i].Value) {
			w.problem("scan-%d row %d is %s=%x, want %s=%x", sr.n, i, tablets.FormatKey(r.Key), r.Value,
				tablets.FormatKey(want[i].Key), want[i].Value)
			break
		}
	}
	calm := w.cfg.calm() && !w.mut.any()
	if calm && sr.hint != w.cfg.Unplaceable {
		if took := sr.endAt.Sub(sr.begin); took > w.cfg.CalmBound {
			w.problem("scan-%d took %v in a run without faults (bound %v)", sr.n, took, w.cfg.CalmBound)
		}
	}
	if sr.hint == w.cfg.Unplaceable && !errors.Is(sr.err, errAbandoned) {
		w.checkUnplaceable(sr)
		return
	}
	if sr.err == nil {
		if len(sr.got) < len(want) {
			w.problem("scan-%d finished with %d rows, its range %s has %d (first missing %s)", sr.n, len(sr.got), sr.rng, len(want),
				tablets.FormatKey(want[len(sr.got)].Key))
		}
		return
	}
	kind := errorKind(sr.err)
	if kind == "" {
		w.problem("scan-%d failed with an unnamed error: %v", sr.n, sr.err)
	}
	if kind == "deadline" || kind == messages.ErrorCode_ERROR_CODE_DEADLINE_EXCEEDED.String() {
		if early := sr.deadline.Sub(sr.endAt); early > time.Millisecond {
			w.problem("scan-%d failed with a deadline error %v before its deadline: %v", sr.n, early, sr.err)
		}
	}
	if calm && kind != "abandoned" {
		w.problem("scan-%d failed in a run without faults: %v", sr.n, sr.err)
	}
}

// checkUnplaceable: a scan whose profile's group has no server never
// returns a row; without faults it fails with NO_SERVERS naming the group
// within the profile's wait (+ DeadlineBound).
func (w *world) checkUnplaceable(sr *scanRun) {
	if sr.err == nil || len(sr.got) > 0 {
		w.problem("scan-%d for group-less profile %q ended with %d rows and error %v", sr.n, sr.hint, len(sr.got), sr.err)
		return
	}
	if !w.cfg.calm() || w.mut.any() {
		return
	}
	if kind := errorKind(sr.err); kind != messages.ErrorCode_ERROR_CODE_NO_SERVERS.String() || !strings.Contains(sr.err.Error(), `"batch"`) {
		w.problem("scan-%d for group-less profile %q failed with %v, want NO_SERVERS naming group \"batch\"", sr.n, sr.hint, sr.err)
	}
	if took, bound := sr.endAt.Sub(sr.begin), w.cfg.UnplaceableWait+w.cfg.DeadlineBound; took > bound && sr.deadline.Sub(sr.begin) > bound {
		w.problem("scan-%d for group-less profile %q took %v to fail (bound %v)", sr.n, sr.hint, took, bound)
	}
}

// errorKind names an error the way a caller can test it ("" = unnamed).
func errorKind(err error) string {
	var se *tabletstream.ScanError
	switch {
	case errors.As(err, &se) && se.Code != messages.ErrorCode_ERROR_CODE_UNSPECIFIED:
		return se.Code.String()
	case errors.Is(err, tabletstream.ErrNoCoordinator):
		return "no coordinator"
	case errors.Is(err, tabletstream.ErrStream):
		return "stream"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.Is(err, errAbandoned):
		return "abandoned"
	}
	return ""
}

// finalChecks: at the end of the run, every scan ended and nothing of
// any scan is left (property 2).
func (w *world) finalChecks() {
	for _, sr := range w.scans {
		if !sr.ended {
			w.problem("scan-%d never ended (deadline %s)", sr.n, fmtDur(sr.deadline.Sub(epoch)))
		}
	}
	for _, l := range w.leftovers() {
		w.problem("at the end of the run %s", l)
	}
	for _, c := range w.coords {
		if c.proc.state != procDead {
			c.collect()
		}
	}
}

// attemptKey is one attempt of one request.
type attemptKey struct {
	request string
	attempt uint32
}

// cancelled sees a Cancel on its way: one a tablet actor sends because
// it gave up on the attempt's server (the reason names the attempt's
// result: timeout, stalled) blames that server (property 3).
func (w *world) cancelled(from *proc, to *actor.PID, m *messages.Cancel) {
	r, ok := strings.CutPrefix(m.GetReason(), "cancelled by tablet actor: ")
	if !ok || (r != "timeout" && r != "stalled" && r != "error") {
		return
	}
	since, ok := w.dispatched[attemptKey{m.GetRequestId(), m.GetAttempt()}]
	if !ok {
		since = epoch
	}
	if _, paused := w.faults.procTroubled(from.addr, since, w.s.now); paused {
		return // the blamer itself was paused: its timers ran late
	}
	w.blamedBy(from.addr, true, to.Address, []string{m.GetRequestId()}, m.GetAttempt(), since, "attempt ended "+r)
}

// blamed checks property 3: a client avoids server (a server id) for
// requests since from.
func (w *world) blamed(by, server string, requests []string, from time.Time, what string) {
	addr := server
	if i := strings.LastIndexByte(server, '/'); i >= 0 {
		addr = server[:i]
	}
	w.blamedBy(by, false, addr, requests, 0, from, what)
}

func (w *world) blamedBy(by string, byCoordinator bool, addr string, requests []string, attempt uint32, from time.Time, what string) {
	server := addr
	if why := w.faults.excuse(addr, by, byCoordinator, requests, attempt, from, w.s.now); why != "" {
		w.trace.printf("%s blames %s (%s): excused, %s", by, server, what, why)
		return
	}
	w.problem("%s blamed %s (%s; requests %v, since %s) though it had no fault", by, server, what, requests, fmtDur(from.Sub(epoch)))
}

// settleBeats: after the last fault, the run goes on this many heartbeat
// intervals with a calm network before the views are checked.
const settleBeats = 4

// settle runs the cluster on with the network's faults off until
// settleBeats heartbeat intervals after the last fault ended (faultsEnd)
// or after now, whichever is later: the scans are over; what still
// happens is heartbeats, sweeps and idle actors stopping.
func (w *world) settle(faultsEnd time.Time) {
	w.net.cfg.Drop, w.net.cfg.Duplicate, w.net.cfg.Reorder, w.net.cfg.Late = 0, 0, 0, 0
	w.runUntil(maxTime(w.s.now, faultsEnd).Add(settleBeats*w.cfg.Server.Heartbeat), "no convergence while settling", nil)
}

// checkViews: once settled, every running coordinator's view has every
// server of every running host alive, in its current incarnation, and the
// coordinator reached that incarnation with a connect (which opens the
// connections both ways before its first scan) — unless the network
// dropped messages in the run, which may have been that connect. A
// server left out after a restart, whatever the order in which its
// heartbeats, the old incarnation's endpoint-terminated event and the dead
// letters of a failing endpoint arrived, is the stuck view.
func (w *world) checkViews() {
	for _, c := range w.coords {
		if c.proc.state != procUp || c.co == nil {
			continue
		}
		v := c.co.View()
		for _, h := range w.hosts {
			p := h.proc
			if p.state != procUp {
				continue
			}
			inc := h.incarnation(p.inc)
			for i, id := range h.ids {
				switch s := v.Server(selection.ServerID(id)); {
				case s == nil:
					w.problem("%s's view has no server %s (host up since incarnation %d)", c.proc.addr, id, p.inc)
				case !s.Alive || s.Incarnation != inc:
					w.problem("%s's view has server %s alive=%v in incarnation %q, want alive in %q", c.proc.addr, id, s.Alive, s.Incarnation, inc)
				}
				if w.cfg.Net.Drop == 0 && !w.net.connects[connectKey{c.proc.addr, h.pids[i].Address + "/" + h.pids[i].Id, p.inc}] {
					w.problem("%s never reached server %s of incarnation %d with a connect", c.proc.addr, id, p.inc)
				}
			}
		}
	}
}
