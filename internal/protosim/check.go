package protosim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
	"github.com/scanplane/scanplane/tablets"
)

// The properties checked on every run:
//
//  1. Every scan ends by its deadline + DeadlineBound, with exactly the
//     ground truth's rows of its range in order, or with a named error
//     (a client.ScanError with a code, or an error wrapping
//     client.ErrNoCoordinator, client.ErrStream or
//     context.DeadlineExceeded) after a prefix of those rows — never a
//     wrong row. A deadline error never comes before the deadline.
//  2. Nothing of a scan outlives it: FlowBound after a scan ended, no
//     coordinator has a flow of its requests, no server a queued or
//     running job, and no timer of them is pending — unless a fault
//     touched the request (then the bound is its deadline + LeakBound,
//     checked when the run ends).
//  3. No server is blamed for a fault it did not have: an attempt ends
//     Error, Timeout or Stalled, and a client avoids a server, only if
//     that server was paused, dead or broken, or a message between it and
//     anyone about that request (or a heartbeat to the blamer) was
//     dropped, late, duplicated or reordered.
//  4. A run without any fault completes every scan, and a scan for a
//     group without servers fails with NO_SERVERS naming the group within
//     the profile's wait.
//  5. The components keep their own promises: ServerQueue never runs a
//     scan it answered Busy and answers or starts within the busy timeout
//     (unless the server was paused); a completed ScanFlow is Done with no
//     live attempt; an ended scan's TabletStream is Done.

// endScan records a scan's end and checks property 1; it schedules the
// check of property 2.
func (w *world) endScan(sr *scanRun, err error) {
	if sr.ended {
		w.violate("scan-%d ended twice (second: %v)", sr.n, err)
		return
	}
	now := w.s.now
	sr.ended, sr.err, sr.endAt = true, err, now
	w.stats.Scans++
	if sr.stream != nil && !sr.orphaned && !sr.stream.Done() {
		w.violate("scan-%d ended but its TabletStream is not done", sr.n)
	}
	if sr.stream != nil {
		st := sr.stream.Stats()
		w.stats.Resumes += st.Resumes
		w.stats.Rejected += st.Rejected
	}
	switch {
	case sr.orphaned:
		w.stats.Orphaned++
		w.trace.printf("scan-%d orphaned: its client died", sr.n)
	case err == nil:
		w.stats.OK++
	case errors.Is(err, errAbandoned):
		w.stats.Abandoned++
		w.trace.printf("scan-%d finished with %d rows", sr.n, len(sr.got))
	default:
		w.stats.Failed[errorKind(err)]++
		w.trace.printf("scan-%d failed after %d rows: %v", sr.n, len(sr.got), err)
	}
	if !sr.orphaned {
		w.checkOutcome(sr)
	}
	w.s.after(w.cfg.FlowBound, "", "leak check", func() { w.checkGone(sr) })
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
	if w.cfg.calm() && !w.mut.any() && kind != "abandoned" {
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
	var se *client.ScanError
	switch {
	case errors.As(err, &se) && se.Code != messages.ErrorCode_ERROR_CODE_UNSPECIFIED:
		return se.Code.String()
	case errors.Is(err, client.ErrNoCoordinator):
		return "no coordinator"
	case errors.Is(err, client.ErrStream):
		return "stream"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.Is(err, errAbandoned):
		return "abandoned"
	}
	return ""
}

// checkGone checks property 2 for one scan, FlowBound after it ended:
// what is left of a request on a process is excused only by a fault of
// that request's messages or of that process since the scan began.
func (w *world) checkGone(sr *scanRun) {
	for _, e := range w.s.pending(sr.owner()) {
		w.problem("scan-%d ended at %s but its %s is still pending (at %s)", sr.n, fmtDur(sr.endAt.Sub(epoch)), e.what, fmtDur(e.at.Sub(epoch)))
	}
	if sr.orphaned {
		return // its client died: nothing tells the flow (checked at the end of the run)
	}
	ended := fmtDur(sr.endAt.Sub(epoch))
	for _, id := range sr.requests {
		if len(w.faults.byRequest[id]) > 0 {
			continue // a fault touched it: checked at the end of the run
		}
		troubled := func(addr string) bool {
			_, ok := w.faults.procTroubled(addr, sr.begin, w.s.now)
			return ok
		}
		for _, c := range w.coords {
			if c.proc.state == procUp && !troubled(c.addr) && c.tablets[sr.tablet] != nil && c.tablets[sr.tablet].flows[id] != nil {
				w.problem("scan-%d ended at %s; %v later its request %s still has a flow on %s", sr.n, ended, w.cfg.FlowBound, id, c.addr)
			}
		}
		for _, h := range w.hosts {
			if h.proc.state != procUp || troubled(h.addr) {
				continue
			}
			for _, s := range h.servers {
				for _, k := range append(sortedKeys(s.pending), sortedKeys(s.running)...) {
					if k.RequestID == id {
						w.problem("scan-%d ended at %s; %v later attempt %d of its request %s is still on %s", sr.n, ended, w.cfg.FlowBound,
							k.Attempt, id, s.id)
					}
				}
			}
		}
		for _, e := range w.s.pending(id) {
			if e.proc != nil && troubled(e.proc.addr) {
				continue
			}
			w.problem("scan-%d ended at %s; %v later a %s of its request %s is pending (at %s)", sr.n, ended, w.cfg.FlowBound, e.what, id,
				fmtDur(e.at.Sub(epoch)))
		}
	}
}

// finalChecks: at the end of the run, every scan ended and nothing of
// any scan is left.
func (w *world) finalChecks() {
	for _, sr := range w.scans {
		if !sr.ended {
			w.problem("scan-%d never ended (deadline %s)", sr.n, fmtDur(sr.deadline.Sub(epoch)))
		}
	}
	for _, c := range w.coords {
		for _, id := range c.flowsLeft() {
			w.problem("flow %s is still on %s at the end of the run", id, c.addr)
		}
	}
	for _, h := range w.hosts {
		for _, j := range h.jobsLeft() {
			w.problem("job %s at the end of the run", j)
		}
	}
	for _, sr := range w.scans {
		for _, id := range sr.requests {
			for _, e := range w.s.pending(id) {
				w.problem("a %s of request %s is pending at the end of the run (at %s)", e.what, id, fmtDur(e.at.Sub(epoch)))
			}
		}
	}
}

// blame is a server counted as failed: by a tablet actor's flow (an
// attempt ended Error, Timeout or Stalled) or by a client (it resumed
// elsewhere, avoiding the server).
type blame struct {
	by       string
	server   selection.ServerID
	requests []string
	attempt  uint32
	from     time.Time
	what     string
}

// blamed checks property 3.
func (w *world) blamed(b blame) {
	addr := hostAddrOf(b.server)
	byCoordinator := strings.HasPrefix(b.by, "coord-")
	if why := w.faults.excuse(addr, b.by, byCoordinator, b.requests, b.attempt, b.from, w.s.now); why != "" {
		w.stats.Excused++
		w.trace.printf("%s blames %s (%s): excused, %s", b.by, b.server, b.what, why)
		return
	}
	msg := fmt.Sprintf("%s blamed %s (%s; requests %v attempt %d, since %s) though it had no fault", b.by, b.server, b.what,
		b.requests, b.attempt, fmtDur(b.from.Sub(epoch)))
	w.problem("%s", msg)
}

// String summarises stats for the test log.
func (s Stats) String() string {
	return fmt.Sprintf("%d runs, %d scans: %d ok, %d abandoned, %d failed %v, %d orphaned; %d known-finding problems; %d flows, %d dispatches, %d hedges, attempt results %v; "+
		"%d resumes, %d batches rejected; %d network and %d process faults, %d blames excused; %d events, %v simulated",
		s.Runs, s.Scans, s.OK, s.Abandoned, s.Scans-s.OK-s.Abandoned-s.Orphaned, s.Failed, s.Orphaned, s.Known, s.Flows, s.Dispatches, s.Hedges, s.Results,
		s.Resumes, s.Rejected, s.NetFaults, s.ProcFaults, s.Excused, s.Events, s.SimTime.Round(time.Second))
}
