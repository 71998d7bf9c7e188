package loadtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/scanplane/scanplane/client"
)

// Run brings up (or connects to) the cluster, makes sure the table exists,
// and runs the workload once per fault and policy: for each fault spec in
// Config.Faults, for each policy in Config.Policies, one phase. A phase on
// a local cluster restarts every host (cold caches, fresh server
// identities; the fault host gets the slow-server/slow-host flags when the
// fault has them), loads the policy's profiles, runs Warmup then Duration
// of workload, injecting timed faults during the fault window, and
// collects a Result. Every scan is verified against the ground truth.
//
// On error or cancellation Run returns the report of the phases done so
// far together with the error.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	started := time.Now()
	rep := &Report{Started: started.UTC().Format(time.RFC3339),
		Cluster: ClusterInfo{Hosts: cfg.Hosts, ServersPerHost: cfg.ServersPerHost, Zones: cfg.Zones, Local: cfg.Local()},
		Workload: WorkloadInfo{Clients: cfg.Clients, Rows: cfg.Rows, Tablets: cfg.Tablets, Zipf: cfg.Zipf, ScanRows: cfg.ScanRows,
			DurationS: cfg.Duration.Seconds(), WarmupS: cfg.Warmup.Seconds(), RateScansS: cfg.Rate, Loop: "open", FullTablet: cfg.FullTablet,
			Seed: cfg.Seed, Table: cfg.Table, Unverified: cfg.Unverified, SlowPause: cfg.SlowPause, SlowFactor: cfg.SlowFactor, HotTablet: cfg.hotTablet(), HotShare: cfg.HotShare},
		Results: []Result{}, Machine: MachineInfo{CPUs: runtime.NumCPU(), LoadAvgStart: loadAvg()}}
	if cfg.Rate == 0 {
		rep.Workload.Loop = "closed"
	}
	finish := func(err error) (*Report, error) {
		rep.Finished = time.Now().UTC().Format(time.RFC3339)
		rep.ElapsedS = time.Since(started).Seconds()
		rep.Machine.LoadAvgEnd = loadAvg()
		return rep, err
	}
	t, err := startTarget(ctx, cfg)
	if err != nil {
		return finish(err)
	}
	defer t.close()
	if cfg.Local() {
		rep.Workload.FaultHost = fmt.Sprintf("host%d", cfg.FaultHost+1)
		rep.Cluster.Coordinators = t.local.Coordinators()
		rep.Workload.Workers = cfg.Workers
		for _, f := range cfg.Faults {
			kinds, _ := ParseFault(f) // validated
			if slices.Contains(kinds, FaultHeterogeneous) {
				rep.Workload.FaultHostWorkers = cfg.Workers / 2
			}
			if slices.Contains(kinds, FaultAntagonist) {
				rep.Workload.AntagonistThreads = cfg.AntagonistThreads
			}
		}
	} else {
		st, err := t.client.Status(ctx)
		if err != nil {
			return finish(err)
		}
		hosts, zones := map[string]bool{}, map[string]bool{}
		for _, s := range st.Servers {
			if s.Alive {
				hosts[s.Host], zones[s.Zone] = true, true
			}
		}
		rep.Cluster.Hosts, rep.Cluster.Zones = len(hosts), len(zones)
		if len(hosts) > 0 {
			rep.Cluster.ServersPerHost = (len(st.Servers) + len(hosts) - 1) / len(hosts)
		}
	}
	tm, err := t.ensureTable(ctx)
	if err != nil {
		return finish(err)
	}
	rep.Cluster.TableBytes = tm.Bytes
	if cfg.Local() {
		t.mu.Lock()
		if cfg.CacheSize == 0 {
			t.cacheBytes = autoCacheBytes(int64(tm.Bytes), cfg.Hosts)
		}
		rep.Cluster.CacheBytes = t.cacheBytes
		t.mu.Unlock()
	}
	wl, err := NewWorkload(WorkloadConfig{Rows: cfg.Rows, Bounds: TabletBounds(tm.SplitPoints, cfg.Rows), Zipf: cfg.Zipf,
		ScanRows: cfg.ScanRows, FullTablet: cfg.FullTablet, HotTablet: cfg.hotTablet(), HotShare: cfg.HotShare, Seed: cfg.Seed})
	if err != nil {
		return finish(err)
	}
	ver := NewVerifier(cfg.Rows)
	var policies []PolicySpec
	for _, p := range cfg.Policies {
		ps, _ := ParsePolicy(p) // validated
		policies = append(policies, ps)
	}
	total := len(cfg.Faults) * len(policies)
	n := 0
	for _, f := range cfg.Faults {
		kinds, _ := ParseFault(f) // validated
		for _, ps := range policies {
			n++
			ph := &phase{cfg: cfg, t: t, wl: wl, ver: ver, fault: strings.Join(kinds, "+"), kinds: kinds, policy: ps,
				index: n, total: total, runStart: started}
			res, err := ph.run(ctx)
			if err != nil {
				return finish(fmt.Errorf("loadtest: phase %d/%d (policy %s, fault %s): %w", n, total, ps.Label, ph.fault, err))
			}
			rep.Results = append(rep.Results, *res)
			cfg.logf("%-18s %-12s scans %6d  p50 %7.2f ms  p99 %8.2f ms  p99.9 %8.2f ms  gap %6.0f ms  errors %d  wrong %d  cache hit %5.1f%%  disp/scan %.3f  hedges %d  (load %.1f)",
				ps.Label, ph.fault, res.Scans, res.P50Ms, res.P99Ms, res.P999Ms, res.LongestGapMs, res.Errors, res.Wrong, 100*res.CacheHitRatio, res.DispatchesPerScan, res.Hedges, res.LoadAvg)
			if a := res.Antagonist; a != nil {
				cfg.logf("antagonist pid %d (%d thread(s)) burned %.2f CPU-s in %.2f s on CPU %s beside host%d's scanserver (pid %d)",
					a.PID, a.Threads, a.CPUS, a.WallS, a.CPUs, cfg.FaultHost+1, a.ServerPID)
			}
			if res.Missed > 0 {
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s/%s: %d scheduled scans never started (the harness fell more than %v behind its open-loop schedule: the cluster could not keep up with %v scans/s)",
					ps.Label, ph.fault, res.Missed, cfg.Drain, cfg.Rate))
			}
			if res.WarmupWrong > 0 {
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s/%s: %d scans returned wrong rows during warm-up", ps.Label, ph.fault, res.WarmupWrong))
			}
		}
	}
	return finish(nil)
}

// phase is one policy under one fault.
type phase struct {
	cfg          Config
	t            *target
	wl           *Workload
	ver          *Verifier
	fault        string
	kinds        []string
	policy       PolicySpec
	index, total int
	runStart     time.Time
	setupTime    time.Duration
	faultCoord   string // the coordinator a coordinator fault hit (its name)
	antagonist   AntagonistInfo

	// scanner runs one op (default p.scan); observe, if set, sees every
	// outcome (tests).
	scanner func(context.Context, Op) outcome
	observe func(Op, outcome)

	rec          *recorder
	measureStart time.Time
	end          time.Time
	stage        atomic.Value // string
}

func (p *phase) has(kind string) bool { return slices.Contains(p.kinds, kind) }

// hasAny reports whether the phase's fault has any of kinds.
func (p *phase) hasAny(kinds []string) bool {
	return slices.ContainsFunc(p.kinds, func(k string) bool { return slices.Contains(kinds, k) })
}

func (p *phase) run(ctx context.Context) (*Result, error) {
	cfg := p.cfg
	cfg.logf("phase %d/%d: policy %s, fault %s", p.index, p.total, p.policy.Label, p.fault)
	p.stage.Store("setup")
	setup := time.Now()
	if p.t.local != nil {
		if err := p.t.restartHosts(ctx, p.kinds); err != nil {
			return nil, err
		}
	}
	if err := p.t.usePolicy(ctx, p.policy); err != nil {
		return nil, err
	}
	p.setupTime = time.Since(setup)
	t0 := time.Now().Add(20 * time.Millisecond)
	p.measureStart = t0.Add(cfg.Warmup)
	p.end = p.measureStart.Add(cfg.Duration)
	p.rec = newRecorder(p.measureStart, cfg.Duration, time.Second)
	p.scanner = p.scan
	p.stage.Store("warm-up")

	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var next atomic.Uint64
	for i := 0; i < cfg.Clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.worker(pctx, t0, &next)
		}()
	}
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		p.progress(pctx)
	}()

	// The measurement window: snapshots at its start, faults inside it.
	var s0 statusSet
	var m0 *cacheMark
	var cpu0 cpuMark
	var cpuAt time.Time
	var windows [][2]float64
	var faultErr error
	if err := sleepUntil(pctx, p.measureStart); err == nil {
		p.stage.Store("measure")
		cpu0, cpuAt = markCPU(p.t.cpuPIDs()), time.Now()
		m0 = p.t.cache.mark()
		s0, faultErr = p.t.statusAll(pctx)
		if p.hasAny(flagFaults) {
			windows = append(windows, [2]float64{0, cfg.Duration.Seconds()})
		}
		if faultErr == nil && p.hasAny(timedFaults) {
			var w [2]float64
			w, faultErr = p.injectTimed(pctx)
			windows = append(windows, w)
		}
	}
	if faultErr != nil {
		cancel()
	}
	wg.Wait()
	var cpu map[string]float64
	var cpuWindow time.Duration
	if !cpuAt.IsZero() {
		cpu, cpuWindow = cpuDelta(cpu0, markCPU(p.t.cpuPIDs())), time.Since(cpuAt)
	}
	p.stage.Store("collect")
	cancel()
	<-progressDone
	if cfg.Progress != nil {
		fmt.Fprint(cfg.Progress, "\r\x1b[K")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if faultErr != nil {
		return nil, faultErr
	}
	// A crashed host must be back before the next phase.
	if p.has(FaultCrashHost) {
		if err := p.t.waitView(ctx, 30*time.Second); err != nil {
			return nil, err
		}
	}
	m1 := p.t.cache.mark()
	s1, err := p.t.statusAll(ctx)
	if err != nil {
		return nil, err
	}
	p.t.cache.settle(ctx, m1, cfg.Heartbeat, 2*cfg.Heartbeat+500*time.Millisecond)
	hits, misses := p.t.cache.delta(m0, m1)
	res := p.result(s0, s1, hits, misses, windows)
	res.LoadAvg = loadAvg()
	res.CPUSeconds, res.CPUWindowS = cpu, cpuWindow.Seconds()
	res.SetupS, res.CollectS = p.setupTime.Seconds(), time.Since(p.end).Seconds()
	return res, nil
}

// injectTimed runs the timed faults over the fault window and returns the
// window actually applied, in seconds into the measurement window.
func (p *phase) injectTimed(ctx context.Context) (w [2]float64, err error) {
	cfg := p.cfg
	from := p.measureStart.Add(cfg.faultAfter())
	to := from.Add(cfg.faultFor())
	if err := sleepUntil(ctx, from); err != nil {
		return w, nil
	}
	w[0] = time.Since(p.measureStart).Seconds()
	p.stage.Store("measure, fault on")
	if p.has(FaultAntagonist) {
		// Before the other faults, while the host's process surely runs;
		// undone on every way out (window end, error, cancellation).
		stop, aerr := p.startAntagonist(to)
		if aerr != nil {
			return w, aerr
		}
		defer func() { // err: the named result
			if uerr := stop(); uerr != nil && err == nil {
				err = uerr
			}
		}()
	}
	if p.has(FaultHungServer) {
		if err := p.t.hang(); err != nil {
			return w, fmt.Errorf("loadtest: hung-server: SIGSTOP: %w", err)
		}
	}
	if p.has(FaultCrashHost) {
		if err := p.t.crash(); err != nil {
			return w, fmt.Errorf("loadtest: crash-host: SIGKILL: %w", err)
		}
	}
	coord := -1
	if p.hasAny(coordinatorFaults) {
		coord = p.t.faultCoordinator()
		p.faultCoord = p.t.local.CoordinatorProc(coord).Name
	}
	if p.has(FaultHungCoordinator) {
		if err := p.t.local.SignalCoordinator(coord, syscall.SIGSTOP); err != nil {
			return w, fmt.Errorf("loadtest: hung-coordinator: SIGSTOP: %w", err)
		}
	}
	if p.has(FaultCrashCoordinator) {
		if err := p.t.local.KillCoordinator(coord); err != nil {
			return w, fmt.Errorf("loadtest: crash-coordinator: SIGKILL: %w", err)
		}
	}
	_ = sleepUntil(ctx, to) // on cancellation, still undo the faults
	if p.has(FaultHungServer) {
		if err := p.t.unhang(); err != nil {
			return w, fmt.Errorf("loadtest: hung-server: SIGCONT: %w", err)
		}
	}
	if p.has(FaultHungCoordinator) {
		if err := p.t.local.SignalCoordinator(coord, syscall.SIGCONT); err != nil {
			return w, fmt.Errorf("loadtest: hung-coordinator: SIGCONT: %w", err)
		}
	}
	w[1] = time.Since(p.measureStart).Seconds()
	if p.has(FaultCrashCoordinator) {
		p.stage.Store("measure, restarting coordinator")
		// The workers go on meanwhile; the restarted coordinator is ready
		// (NATS node rejoined, JetStream answers, every server in its
		// view) before the phase ends.
		if err := p.t.local.RestartCoordinator(context.WithoutCancel(ctx), coord); err != nil {
			return w, fmt.Errorf("loadtest: crash-coordinator: restart: %w", err)
		}
		w[1] = time.Since(p.measureStart).Seconds()
	}
	if p.has(FaultCrashHost) {
		p.stage.Store("measure, restarting host")
		// The workers go on meanwhile; the phase waits for the full view
		// before it ends.
		if err := p.t.restartFaultHost(context.WithoutCancel(ctx)); err != nil {
			return w, fmt.Errorf("loadtest: crash-host: restart: %w", err)
		}
		w[1] = time.Since(p.measureStart).Seconds()
	}
	p.stage.Store("measure")
	return w, nil
}

// startAntagonist pins the fault host's scanserver to one CPU and starts
// the antagonist pinned to the same CPU, burning until to (and no longer);
// stop kills it, gives the scanserver its affinity back and records what
// the antagonist burned in p.antagonist.
func (p *phase) startAntagonist(to time.Time) (stop func() error, err error) {
	cfg := p.cfg
	pid := p.t.local.Host(cfg.FaultHost).PID()
	cpus, err := antagonistCPUs(pid, cfg.AntagonistCPU)
	if err != nil {
		return nil, fmt.Errorf("loadtest: antagonist: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("loadtest: antagonist: %w", err)
	}
	pin, err := pinProcess(pid, cpus)
	if err != nil {
		return nil, fmt.Errorf("loadtest: antagonist: pin host%d's scanserver: %w", cfg.FaultHost+1, err)
	}
	// Its own limit, a little past the window: stop kills it at the window's end.
	a, err := startAntagonist(exe, cpus, cfg.AntagonistThreads, time.Until(to)+time.Second)
	if err != nil {
		_ = pin.restore()
		return nil, err
	}
	started := time.Now()
	p.antagonist = AntagonistInfo{PID: a.pid(), CPUs: formatCPUSet(cpus), Threads: cfg.AntagonistThreads, ServerPID: pid}
	return func() error {
		used := a.stop()
		p.antagonist.CPUS, p.antagonist.WallS = used.Seconds(), time.Since(started).Seconds()
		if err := pin.restore(); err != nil {
			return fmt.Errorf("loadtest: antagonist: restore host%d's scanserver's CPU affinity: %w", cfg.FaultHost+1, err)
		}
		return nil
	}, nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// worker runs scans until the window ends: open loop (each scan due at its
// schedule slot, latency from the slot) or closed loop (back to back).
func (p *phase) worker(ctx context.Context, t0 time.Time, next *atomic.Uint64) {
	cfg := p.cfg
	sched := Schedule{Start: t0, Rate: cfg.Rate}
	hotFault := p.has(FaultHotTablet)
	hotFrom := p.measureStart.Add(cfg.faultAfter())
	hotTo := hotFrom.Add(cfg.faultFor())
	hot := func(due time.Time) bool {
		return hotFault && !due.Before(hotFrom) && due.Before(hotTo)
	}
	for ctx.Err() == nil {
		var due time.Time
		k := next.Add(1) - 1
		if cfg.Rate > 0 {
			due = sched.At(k)
			if !due.Before(p.end) {
				return
			}
			if time.Now().After(p.end.Add(cfg.Drain)) {
				if !due.Before(p.measureStart) {
					p.rec.addMissed(1)
				}
				continue
			}
			if sleepUntil(ctx, due) != nil {
				return
			}
		} else {
			due = time.Now()
			if !due.Before(p.end) {
				return
			}
		}
		op := p.wl.Op(k, hot(due))
		o := p.scanner(ctx, op)
		if ctx.Err() != nil && o.err != nil {
			return // cancelled: not the cluster's fault
		}
		o.done = time.Now()
		o.sched, o.latency, o.full = due, o.done.Sub(due), op.Full
		p.rec.add(o)
		if p.observe != nil {
			p.observe(op, o)
		}
	}
}

// scan runs one op and verifies its rows.
func (p *phase) scan(ctx context.Context, op Op) outcome {
	sctx, cancel := context.WithTimeout(ctx, p.cfg.ScanTimeout)
	defer cancel()
	tally, err := p.t.scan(sctx, op.Range())
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("scan not finished within %v: %w", p.cfg.ScanTimeout, err)
		}
		return outcome{err: err, rows: tally.Count}
	}
	return outcome{rows: tally.Count, wrong: p.ver.Check(op.Lo, op.Hi, tally)}
}

// progress draws the live line until ctx ends.
func (p *phase) progress(ctx context.Context) {
	cfg := p.cfg
	if cfg.Progress == nil || cfg.ProgressEvery <= 0 {
		return
	}
	tick := time.NewTicker(cfg.ProgressEvery)
	defer tick.Stop()
	var prev int64
	prevT := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			l := p.rec.live()
			rate := float64(l.scans-prev) / now.Sub(prevT).Seconds()
			prev, prevT = l.scans, now
			in := now.Sub(p.measureStart)
			window := cfg.Duration
			stage, _ := p.stage.Load().(string)
			if in < 0 {
				in, window = now.Sub(p.measureStart.Add(-cfg.Warmup)), cfg.Warmup
			}
			el := now.Sub(p.runStart).Round(time.Second)
			p99 := "p99 -"
			if l.p99 > 0 {
				p99 = fmt.Sprintf("p99 %.1f ms", float64(l.p99)/1e6)
			}
			fmt.Fprintf(cfg.Progress, "\r\x1b[K[%d/%d] %s · %s · %s %.1f/%.0fs · elapsed %v · %.0f scans/s · %s · errors %d · wrong %d",
				p.index, p.total, p.policy.Label, p.fault, stage, in.Seconds(), window.Seconds(), el, rate, p99, l.errors, l.wrong)
		}
	}
}

// statusSet is one status snapshot per coordinator (see
// target.statusAll).
type statusSet map[string]*client.Status

// counterDelta sums a counter's growth over the window across the
// coordinators of s1: since s0 for one that was in s0, all it counted for
// one started in the window (a restarted coordinator). A coordinator
// killed in the window counts nothing.
func counterDelta(s0, s1 statusSet, f func(*client.Status) uint64) uint64 {
	var n uint64
	for k, st := range s1 {
		v := f(st)
		if b, ok := s0[k]; ok {
			v -= min(f(b), v)
		}
		n += v
	}
	return n
}

// serverDispatches is every server's StartScans in the window, keyed
// host/index (e.g. host1/0), summed over the coordinators (as
// counterDelta).
func serverDispatches(s0, s1 statusSet) map[string]uint64 {
	out := map[string]uint64{}
	for k, st := range s1 {
		before := map[string]uint64{}
		if b, ok := s0[k]; ok {
			for _, s := range b.Servers {
				before[s.ID+"@"+s.Incarnation] = s.Dispatched
			}
		}
		for _, s := range st.Servers {
			out[serverKey(s)] += s.Dispatched - min(before[s.ID+"@"+s.Incarnation], s.Dispatched)
		}
	}
	return out
}

// serverKey names a server by host and index (host1/0), the same across
// the host's restarts.
func serverKey(s client.ServerStatus) string {
	idx := s.ID
	if i := strings.LastIndexByte(idx, '/'); i >= 0 {
		idx = idx[i+1:]
	}
	return s.Host + "/" + idx
}

// serverHealth is the coordinators' view of each live server
// (host/index) at the window's end: counts and in-flight scans summed over
// the coordinators, the queue length the largest any reports.
func serverHealth(set statusSet) map[string]ServerHealth {
	out := map[string]ServerHealth{}
	for _, st := range set {
		for _, s := range st.Servers {
			if !s.Alive {
				continue
			}
			h := out[serverKey(s)]
			h.Errors += s.Errors
			h.Timeouts += s.Timeouts
			h.Busy += s.BusyTotal
			h.Slowdowns += s.Slowdowns
			h.InFlight += s.InFlight
			h.QueueLen = max(h.QueueLen, s.QueueLen)
			out[serverKey(s)] = h
		}
	}
	return out
}

// cdfQuantiles are the points of Result.CDF.
var cdfQuantiles = func() []float64 {
	var q []float64
	for i := 1; i <= 99; i++ {
		q = append(q, float64(i))
	}
	return append([]float64{0, 0.1, 0.5}, append(q, 99.5, 99.9, 99.95, 99.99, 100)...)
}()

func (p *phase) result(s0, s1 statusSet, hits, misses uint64, windows [][2]float64) *Result {
	r := p.rec
	samples := r.errorSamples()
	gap, gapAt := r.longestGap()
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.hist
	res := &Result{Policy: p.policy.Label, Fault: p.fault, Scans: r.scans, Rows: r.rows, Errors: r.errors, Wrong: r.wrong,
		ThroughputScansPerS: float64(r.scans) / p.cfg.Duration.Seconds(),
		P50Ms:               ms(h.ValueAtQuantile(50)), P90Ms: ms(h.ValueAtQuantile(90)), P99Ms: ms(h.ValueAtQuantile(99)),
		P999Ms: ms(h.ValueAtQuantile(99.9)), MaxMs: ms(h.Max()), MeanMs: h.Mean() / 1000,
		SelectionPolicy: p.policy.Policy, Hedge: p.policy.Hedge, CacheHits: hits, CacheMisses: misses,
		Missed: r.missed, WarmupScans: r.wScans, WarmupErrors: r.wErrors, WarmupWrong: r.wWrong,
		WrongSamples: slices.Clone(r.wrongs), FaultWindowsS: windows, P99OverTimeMs: []float64{},
		LongestGapMs: float64(gap.Microseconds()) / 1000, LongestGapAtS: gapAt.Seconds()}
	res.FaultCoordinator = p.faultCoord
	if p.antagonist.PID != 0 {
		a := p.antagonist
		res.Antagonist = &a
	}
	if h.TotalCount() == 0 {
		res.MaxMs = 0
	}
	if hits+misses > 0 {
		res.CacheHitRatio = float64(hits) / float64(hits+misses)
	}
	if s0 != nil && s1 != nil {
		res.Dispatches = counterDelta(s0, s1, func(s *client.Status) uint64 { return s.Dispatches })
		res.Hedges = counterDelta(s0, s1, func(s *client.Status) uint64 { return s.Hedges })
		res.BusyRejections = counterDelta(s0, s1, func(s *client.Status) uint64 { return s.Busy })
		res.Timeouts = counterDelta(s0, s1, func(s *client.Status) uint64 { return s.Timeouts })
		res.CoordScans = counterDelta(s0, s1, func(s *client.Status) uint64 { return s.ScansStarted })
		if r.scans > 0 {
			res.DispatchesPerScan = float64(res.Dispatches) / float64(r.scans)
		}
		res.ServerDispatches = serverDispatches(s0, s1)
		res.Servers = serverHealth(s1)
	}
	if n := r.full.TotalCount(); n > 0 {
		res.FullTabletScans, res.FullTabletP50Ms, res.FullTabletP99Ms = n, ms(r.full.ValueAtQuantile(50)), ms(r.full.ValueAtQuantile(99))
	}
	for _, th := range r.timeline {
		res.P99OverTimeMs = append(res.P99OverTimeMs, ms(th.ValueAtQuantile(99)))
	}
	if h.TotalCount() > 0 {
		for _, q := range cdfQuantiles {
			res.CDF = append(res.CDF, CDFPoint{Q: q / 100, Ms: ms(h.ValueAtQuantile(q))})
		}
	}
	res.ErrorSamples = samples
	return res
}
