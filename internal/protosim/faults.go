package protosim

import (
	"time"
)

// ProcFaults say how many process faults a run has and how they behave.
// Each starts at a random instant of [0, Window].
type ProcFaults struct {
	HostPauses, HostKills   int // scanserver processes SIGSTOPped / SIGKILLed
	CoordPauses, CoordKills int
	ClientKills             int
	Window                  time.Duration
	// PauseMax bounds a pause; a killed process restarts on the same
	// address after RestartMin..RestartMax, or never with NeverRestart.
	PauseMax               time.Duration
	RestartMin, RestartMax time.Duration
	NeverRestart           float64
	// DetectMax bounds how long until peers notice a death or a restart
	// (endpoint terminated, cluster info watch).
	DetectMax time.Duration
}

// heartbeatGrace: a heartbeat lost this long before an attempt may still
// be why the coordinator thinks a server is dead (3 missed 1s beats).
const heartbeatGrace = 4 * time.Second

// scheduleFaults plans the run's process faults; it returns when the
// last one is over.
func (w *world) scheduleFaults() time.Time {
	f := w.cfg.Faults
	s := w.s
	last := s.now
	note := func(t time.Time) {
		if t.After(last) {
			last = t
		}
	}
	// pause and kill draw a fault's start and length in the fault window
	// (the same draws in the same order for every kind, so seeds replay).
	pause := func(p *process) {
		at, d := s.uniform(0, f.Window), s.uniform(time.Millisecond, f.PauseMax)
		s.after(at, "", "pause", func() { w.pause(p, d) })
		note(s.now.Add(at + d))
	}
	kill := func(fn func(down time.Duration, never bool)) {
		at, d := s.uniform(0, f.Window), s.uniform(f.RestartMin, f.RestartMax)
		never := s.chance(f.NeverRestart)
		s.after(at, "", "kill", func() { fn(d, never) })
		note(s.now.Add(at + d))
	}
	for range f.HostPauses {
		pause(w.hosts[s.rng.IntN(len(w.hosts))].proc)
	}
	for range f.HostKills {
		h := w.hosts[s.rng.IntN(len(w.hosts))]
		kill(func(d time.Duration, never bool) { w.killHost(h, d, never) })
	}
	for range f.CoordPauses {
		pause(w.coords[s.rng.IntN(len(w.coords))].proc)
	}
	for range f.CoordKills {
		c := w.coords[s.rng.IntN(len(w.coords))]
		kill(func(d time.Duration, never bool) { w.killCoordinator(c, d, never) })
	}
	for range f.ClientKills {
		c := w.clients[s.rng.IntN(len(w.clients))]
		at := s.uniform(0, f.Window)
		s.after(at, "", "kill", func() { w.killClient(c) })
	}
	return last.Add(f.DetectMax)
}

func (w *world) pause(p *process, d time.Duration) {
	if p.state != procUp {
		return
	}
	w.trace.printf("FAULT %s paused for %v", p.addr, d)
	p.state = procPaused
	w.faults.procStart(p.addr, "paused", w.s.now)
	w.s.after(d, "", "resume", func() {
		if p.state != procPaused {
			return
		}
		w.trace.printf("FAULT %s resumes", p.addr)
		w.faults.procEnd(p.addr, "paused", w.s.now)
		p.resume()
	})
}

// kill ends p's incarnation: its state, queued messages and timers are
// lost. It returns false if p was already dead.
func (w *world) kill(p *process) bool {
	if p.state == procDead {
		return false
	}
	if p.state == procPaused {
		w.faults.procEnd(p.addr, "paused", w.s.now)
	}
	w.trace.printf("FAULT %s killed", p.addr)
	p.state, p.held = procDead, nil
	w.faults.procStart(p.addr, "dead", w.s.now)
	return true
}

func (w *world) restart(p *process) {
	w.trace.printf("FAULT %s restarts", p.addr)
	w.faults.procEnd(p.addr, "dead", w.s.now)
	p.inc++
	p.state = procUp
}

func (w *world) killHost(h *hostProc, d time.Duration, never bool) {
	if !w.kill(h.proc) {
		return
	}
	for _, c := range w.coords {
		c.proc.timer(w.s.uniform(0, w.cfg.Faults.DetectMax), "", "endpoint terminated", func() { c.endpointDown(h.addr) })
	}
	if never {
		return
	}
	w.s.after(d, "", "restart", func() {
		w.restart(h.proc)
		h.boot()
	})
}

func (w *world) killCoordinator(c *coordinator, d time.Duration, never bool) {
	if !w.kill(c.proc) {
		return
	}
	for _, cl := range w.clients {
		cl.proc.timer(w.s.uniform(0, w.cfg.Faults.DetectMax), "", "coordinator lost", func() { cl.coordinatorLost(c.addr, "endpoint terminated") })
	}
	if never {
		return
	}
	w.s.after(d, "", "restart", func() {
		w.restart(c.proc)
		c.boot()
		for _, cl := range w.clients {
			cl.proc.timer(w.s.uniform(0, w.cfg.Faults.DetectMax), "", "coordinator up", func() { cl.coordinatorUp(c.addr) })
		}
	})
}

func (w *world) killClient(c *clientProc) {
	active := c.active()
	if !w.kill(c.proc) {
		return
	}
	for _, sr := range active {
		sr.orphaned = true
		w.endScan(sr, nil)
	}
}
