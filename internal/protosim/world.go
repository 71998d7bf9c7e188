package protosim

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	coordpkg "github.com/scanplane/scanplane/coordinator"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
	"github.com/scanplane/scanplane/tablets"
)

// world is one simulated run: the processes, the network between them,
// the ground truth, and what the checks have found so far.
type world struct {
	cfg      Config
	s        *scheduler
	net      *network
	trace    *tracer
	faults   *faultLog
	truth    *truthTable
	profiles *selection.Profiles
	coords   []*coordinator
	hosts    []*hostProc
	clients  []*clientProc
	scans    []*scanRun
	mut      mutations
	stats    Stats
	problems []string
	known    []string // problems of known, open findings (not failures)
}

// mutations break the simulated components on purpose, to show that the
// checks catch what they are meant to catch (tests only).
type mutations struct {
	// serverRows changes the rows of a batch before the server folds them
	// into its checksum (a server that loses rows consistently).
	serverRows func([]*messages.Row) []*messages.Row
	// serverBatch changes a batch after its checksum was computed.
	serverBatch func(*messages.RowBatch)
	// deliver changes a message just before the client sees it.
	deliver func(*envelope)
	// ignoreCancel makes servers ignore Cancel.
	ignoreCancel bool
	// noAcceptNotice makes servers hold back the accept notice
	// (ScanStarted without first_data) until the first batch, however
	// long its read takes.
	noAcceptNotice bool
	// flowActions changes a flow's actions before the tablet actor
	// carries them out.
	flowActions func([]coordpkg.Action) []coordpkg.Action
	// Test hooks that change nothing of the protocol: shape changes each
	// scan as it is drawn; count, when set, gets every scan message sent
	// (dropped ones included), by request id and message kind.
	shape func(w *world, sr *scanRun)
	count map[string]map[string]int
}

func (m mutations) any() bool {
	return m.serverRows != nil || m.serverBatch != nil || m.deliver != nil || m.ignoreCancel || m.flowActions != nil || m.noAcceptNotice
}

// Stats is what one run (or many, added up) did.
type Stats struct {
	Runs, Scans, OK, Orphaned int
	Abandoned                 int            // the caller stopped reading
	Known                     int            // problems of known, open findings
	Failed                    map[string]int // by error kind
	Events                    int
	SimTime                   time.Duration
	Flows, Dispatches, Hedges int
	Results                   map[selection.AttemptResult]int
	NetFaults, ProcFaults     int
	Excused                   int // blames excused by a real fault
	Resumes, Rejected         int
}

func (s *Stats) add(o Stats) {
	s.Runs += o.Runs
	s.Scans += o.Scans
	s.OK += o.OK
	s.Orphaned += o.Orphaned
	s.Abandoned += o.Abandoned
	s.Known += o.Known
	s.Events += o.Events
	s.SimTime += o.SimTime
	s.Flows += o.Flows
	s.Dispatches += o.Dispatches
	s.Hedges += o.Hedges
	s.NetFaults += o.NetFaults
	s.ProcFaults += o.ProcFaults
	s.Excused += o.Excused
	s.Resumes += o.Resumes
	s.Rejected += o.Rejected
	for k, v := range o.Failed {
		if s.Failed == nil {
			s.Failed = map[string]int{}
		}
		s.Failed[k] += v
	}
	for k, v := range o.Results {
		if s.Results == nil {
			s.Results = map[selection.AttemptResult]int{}
		}
		s.Results[k] += v
	}
}

// Result is the outcome of one run.
type Result struct {
	Seed     uint64
	Problems []string // property violations; empty = the run passed
	Known    []string // violations of known, open findings (see check.go)
	Trace    string   // when traced
	Stats    Stats
}

// Run simulates cfg; with trace, Result.Trace has every event.
func Run(cfg Config, trace bool) (*Result, error) {
	return run(cfg, trace, mutations{})
}

func run(cfg Config, trace bool, mut mutations) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	profiles, err := parsedProfiles(cfg.Profiles)
	if err != nil {
		return nil, err
	}
	w := &world{cfg: cfg, s: newScheduler(cfg.Seed), profiles: profiles, mut: mut}
	w.stats.Results = map[selection.AttemptResult]int{}
	w.stats.Failed = map[string]int{}
	w.trace = &tracer{on: trace, clock: w.s}
	w.faults = newFaultLog(w.s)
	w.truth = newTruthTable(rand.New(rand.NewPCG(cfg.Seed, 0x7ab1e)), cfg.Rows, cfg.Tablets)
	w.net = newNetwork(w, cfg.Net)
	w.build()
	quietAfter := w.scheduleFaults()
	for _, sr := range w.scans {
		quietAfter = maxTime(quietAfter, sr.deadline)
	}
	w.loop(quietAfter.Add(cfg.LeakBound))
	w.finalChecks()
	w.stats.Runs = 1
	w.stats.Events = w.s.steps
	w.stats.SimTime = w.s.now.Sub(epoch)
	w.stats.NetFaults, w.stats.ProcFaults = 0, 0
	for _, fs := range w.faults.byRequest {
		w.stats.NetFaults += len(fs)
	}
	for _, fs := range w.faults.procs {
		w.stats.ProcFaults += len(fs)
	}
	w.stats.Known = len(w.known)
	res := &Result{Seed: cfg.Seed, Problems: w.problems, Known: w.known, Stats: w.stats}
	if trace {
		res.Trace = w.trace.String()
	}
	return res, nil
}

// profileCache holds parsed profiles by their JSON: selection.Profiles
// are immutable and safe for concurrent use (policies keep their state in
// each tablet's TabletState), so runs share them.
var profileCache sync.Map

func parsedProfiles(text string) (*selection.Profiles, error) {
	if p, ok := profileCache.Load(text); ok {
		return p.(*selection.Profiles), nil
	}
	p, err := selection.ParseProfiles([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("protosim: profiles: %w", err)
	}
	profileCache.Store(text, p)
	return p, nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (w *world) build() {
	cfg := w.cfg
	for i := range cfg.Coordinators {
		c := &coordinator{w: w, addr: fmt.Sprintf("coord-%d:8090", i+1)}
		c.proc = w.net.add(c.addr, c.receive)
		w.coords = append(w.coords, c)
	}
	for i := range cfg.Hosts {
		h := &hostProc{w: w, name: fmt.Sprintf("h%d", i+1), addr: fmt.Sprintf("h%d:8100", i+1), zone: fmt.Sprintf("z%d", i%2+1)}
		h.proc = w.net.add(h.addr, h.receive)
		w.hosts = append(w.hosts, h)
	}
	if w.mut.serverRows != nil || w.mut.serverBatch != nil {
		// Servers that break batches have a fault: blaming them is fair.
		for _, h := range w.hosts {
			w.faults.procStart(h.addr, "broken on purpose", w.s.now)
		}
	}
	for _, c := range w.coords {
		c.boot()
	}
	for _, h := range w.hosts {
		h.boot()
	}
	for i := range cfg.Clients {
		c := &clientProc{w: w, addr: fmt.Sprintf("client-%d:9000", i+1), byReq: map[string]*scanRun{}, lost: map[string]string{}}
		c.self = pid{c.addr, "client"}
		c.proc = w.net.add(c.addr, func(env *envelope) {
			if w.mut.deliver != nil {
				w.mut.deliver(env)
			}
			c.receive(env)
		})
		w.clients = append(w.clients, c)
		for range cfg.ScansPerClient {
			sr := w.newScan(c)
			at := w.s.uniform(0, cfg.ScanStartMax)
			sr.deadline = epoch.Add(at + w.s.uniform(cfg.DeadlineMin, cfg.DeadlineMax)).Truncate(time.Millisecond)
			w.s.at(epoch.Add(at), "", "scan start", func() {
				if c.proc.state != procUp {
					sr.orphaned = true
					w.endScan(sr, nil)
					return
				}
				c.start(sr)
			})
		}
	}
}

// newScan picks a tablet and a piece of it: the whole tablet, or a range
// between two keys that may or may not be rows.
func (w *world) newScan(c *clientProc) *scanRun {
	r := w.s.rng
	sr := &scanRun{n: len(w.scans), cl: c, tablet: r.IntN(len(w.truth.refs)), hint: w.cfg.Hints[r.IntN(len(w.cfg.Hints))]}
	if w.cfg.Unplaceable != "" && r.IntN(25) == 0 {
		sr.hint = w.cfg.Unplaceable
	}
	tr := w.truth.tabletRange(sr.tablet)
	sr.rng = tr
	if r.IntN(2) == 0 {
		key := func() []byte {
			k := w.truth.rows[r.IntN(len(w.truth.rows))].Key
			if r.IntN(3) == 0 {
				k = append(bytes.Clone(k), 'x')
			}
			return k
		}
		a, b := key(), key()
		if bytes.Compare(a, b) > 0 {
			a, b = b, a
		}
		if got := (tablets.Range{Start: a, End: b}).Intersect(tr); !got.Empty() {
			sr.rng = got
		}
	}
	switch r.IntN(20) {
	case 0, 1, 2:
		sr.limit = 1 + r.IntN(40)
	case 3, 4:
		sr.abandonAfter = 1 + r.IntN(30)
	}
	if w.mut.shape != nil {
		w.mut.shape(w, sr)
	}
	w.scans = append(w.scans, sr)
	return sr
}

// loop runs events until everything of every scan is gone, or until the
// hard stop.
func (w *world) loop(stop time.Time) {
	for w.s.step(stop) {
		if w.s.steps >= w.cfg.MaxEvents {
			w.problem("no convergence: %d events by %s", w.s.steps, fmtDur(w.s.now.Sub(epoch)))
			return
		}
		if w.s.steps%64 == 0 && w.quiet() {
			return
		}
	}
}

// quiet: every scan ended and nothing of them is left anywhere, in
// flight or queued.
func (w *world) quiet() bool {
	for _, sr := range w.scans {
		if !sr.ended {
			return false
		}
	}
	if w.net.inFlight > 0 {
		return false
	}
	for _, p := range w.net.procs {
		if len(p.held) > 0 {
			return false
		}
	}
	for _, c := range w.coords {
		if len(c.flowsLeft()) > 0 {
			return false
		}
	}
	for _, h := range w.hosts {
		if len(h.jobsLeft()) > 0 {
			return false
		}
	}
	return true
}

func (w *world) problem(format string, args ...any) {
	msg := fmt.Sprintf("at %s: ", fmtDur(w.s.now.Sub(epoch))) + fmt.Sprintf(format, args...)
	w.problems = append(w.problems, msg)
	w.trace.printf("PROBLEM %s", msg)
}

// violate is problem for the simulated components' own invariants.
func (w *world) violate(format string, args ...any) { w.problem(format, args...) }

func hostAddrOf(id selection.ServerID) string {
	s := string(id)
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return s[:i]
	}
	return s
}

func serverIDOf(s string) selection.ServerID { return selection.ServerID(s) }

// flowsLeft lists the flows of a live coordinator.
func (c *coordinator) flowsLeft() []string {
	if c.proc.state == procDead {
		return nil
	}
	var out []string
	for _, t := range c.tablets {
		if t == nil {
			continue
		}
		for _, id := range sortedStrings(t.flows) {
			out = append(out, id)
		}
	}
	return out
}

// jobsLeft lists the queued and running jobs of a live host.
func (h *hostProc) jobsLeft() []string {
	if h.proc.state == procDead {
		return nil
	}
	var out []string
	for _, s := range h.servers {
		for _, k := range sortedKeys(s.pending) {
			out = append(out, fmt.Sprintf("%s/%d queued on %s", k.RequestID, k.Attempt, s.id))
		}
		for _, k := range sortedKeys(s.running) {
			out = append(out, fmt.Sprintf("%s/%d running on %s", k.RequestID, k.Attempt, s.id))
		}
	}
	return out
}

func sortedStrings[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
