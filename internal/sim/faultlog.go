package sim

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
)

// msgFault is a network fault that touched one message of a scan.
type msgFault struct {
	at       time.Time
	attempt  uint32
	from, to string // process addresses
	kind     string
}

// procFault is a span during which a process was paused, or dead (until
// its restart; zero end = until the end of the run).
type procFault struct {
	kind       string // "paused", "dead"
	start, end time.Time
}

// faultLog remembers every fault of the run, so that a blamed server can
// be checked against the faults it really had.
type faultLog struct {
	byRequest map[string][]msgFault // request id → faults of its messages
	other     map[string][]msgFault // sending process → faults of its messages of no scan (heartbeats, signals)
	procs     map[string][]procFault
	count     int
	clock     *scheduler
}

func newFaultLog(clock *scheduler) *faultLog {
	return &faultLog{clock: clock, byRequest: map[string][]msgFault{}, other: map[string][]msgFault{}, procs: map[string][]procFault{}}
}

func (l *faultLog) message(from, to string, msg proto.Message, kind string) {
	l.count++
	req, att := requestOf(msg)
	f := msgFault{at: l.clock.now, attempt: att, from: from, to: to, kind: kind}
	if req == "" {
		l.other[from] = append(l.other[from], f)
		return
	}
	l.byRequest[req] = append(l.byRequest[req], f)
}

func (l *faultLog) procStart(addr, kind string, at time.Time) {
	l.count++
	l.procs[addr] = append(l.procs[addr], procFault{kind: kind, start: at})
}

func (l *faultLog) procEnd(addr, kind string, at time.Time) {
	fs := l.procs[addr]
	for i := len(fs) - 1; i >= 0; i-- {
		if fs[i].kind == kind && fs[i].end.IsZero() {
			fs[i].end = at
			return
		}
	}
}

// procTroubled reports the first pause or death of addr that overlaps
// [from, to].
func (l *faultLog) procTroubled(addr string, from, to time.Time) (procFault, bool) {
	for _, f := range l.procs[addr] {
		if !f.start.After(to) && (f.end.IsZero() || !f.end.Before(from)) {
			return f, true
		}
	}
	return procFault{}, false
}

// excuse returns why server addr may have been blamed by process `by`
// for an attempt of one of requests (attempt 0 = any) over [from, to], or
// "" when it had no fault: its process was paused, dead or broken (for a
// coordinator's blame, up to heartbeatGrace before: the coordinator learns
// of a death through missed heartbeats), a message between it and anyone
// about those requests was dropped, late, duplicated or reordered, or one
// of its heartbeats to the blamer was.
func (l *faultLog) excuse(addr, by string, byCoordinator bool, requests []string, attempt uint32, from, to time.Time) string {
	since := from
	if byCoordinator {
		since = from.Add(-heartbeatGrace)
	}
	if f, ok := l.procTroubled(addr, since, to); ok {
		return fmt.Sprintf("%s %s from %s", addr, f.kind, fmtDur(f.start.Sub(epoch)))
	}
	for _, r := range requests {
		for _, f := range l.byRequest[r] {
			if (f.from == addr || f.to == addr) && (attempt == 0 || f.attempt == attempt || f.attempt == 0) {
				return fmt.Sprintf("message %s -> %s of %s/%d %s at %s", f.from, f.to, r, f.attempt, f.kind, fmtDur(f.at.Sub(epoch)))
			}
		}
	}
	for _, f := range l.other[addr] {
		if f.to == by && !f.at.Before(from.Add(-heartbeatGrace)) && !f.at.After(to) {
			return fmt.Sprintf("heartbeat from %s %s at %s", addr, f.kind, fmtDur(f.at.Sub(epoch)))
		}
	}
	return ""
}
