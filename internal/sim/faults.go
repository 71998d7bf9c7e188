package sim

import (
	"time"

	"github.com/scanplane/scanplane/internal/actorenv"
)

// heartbeatGrace: a heartbeat lost this long before an attempt may still
// be why a coordinator thinks a server is dead (3 missed 1s beats).
const heartbeatGrace = 4 * time.Second

// scheduleFaults plans the run's process faults; it returns when the
// last one is over. Every draw is made here, up front and in a fixed
// order, so that a seed replays.
func (w *world) scheduleFaults() time.Time {
	f := w.cfg.Faults
	s := w.s
	last := s.now
	note := func(t time.Time) {
		if t.After(last) {
			last = t
		}
	}
	pause := func(p *proc, onPause, onResume func()) {
		at, d := s.uniform(0, f.Window), s.uniform(time.Millisecond, f.PauseMax)
		s.after(at, "pause", func() { w.pause(p, d, onPause, onResume) })
		note(s.now.Add(at + d))
	}
	kill := func(p *proc, restart func()) {
		at, d := s.uniform(0, f.Window), s.uniform(f.RestartMin, f.RestartMax)
		never := s.chance(f.NeverRestart)
		s.after(at, "kill", func() { w.kill(p, d, never, restart) })
		note(s.now.Add(at + d))
	}
	for range f.HostPauses {
		pause(w.hosts[s.rng.IntN(len(w.hosts))].proc, nil, nil)
	}
	for range f.HostKills {
		h := w.hosts[s.rng.IntN(len(w.hosts))]
		kill(h.proc, h.start)
	}
	for range f.HostRestartRaces {
		h := w.hosts[s.rng.IntN(len(w.hosts))]
		at, d := s.uniform(0, f.Window), s.uniform(time.Millisecond, restartRaceMax)
		s.after(at, "restart race", func() { w.restartRace(h, d) })
		note(s.now.Add(at + d + endpointBackoff))
	}
	for range f.CoordPauses {
		c := w.coords[s.rng.IntN(len(w.coords))]
		pause(c.proc, func() { w.leaseWatch(c) }, func() { w.leaseBack(c) })
	}
	for range f.CoordKills {
		c := w.coords[s.rng.IntN(len(w.coords))]
		kill(c.proc, func() {
			c.start()
			w.leaseBack(c)
		})
	}
	for range f.Panics {
		at, kind := s.uniform(0, f.Window), s.rng.IntN(3)
		i, t := s.rng.IntN(len(w.coords)), s.rng.IntN(len(w.truth.refs))
		h, j := s.rng.IntN(len(w.hosts)), s.rng.IntN(w.cfg.ServersPerHost)
		s.after(at, "panic", func() { w.panic(kind, w.coords[i], t, w.hosts[h], j) })
	}
	for range f.Reloads {
		at := s.uniform(0, f.Window)
		s.after(at, "reload", w.reload)
	}
	return last
}

// pause stops p (SIGSTOP) for d; onPause runs after SIGSTOP, onResume
// after SIGCONT.
func (w *world) pause(p *proc, d time.Duration, onPause, onResume func()) {
	if p.state != procUp {
		return
	}
	w.trace.printf("FAULT %s paused for %v", p.addr, d)
	w.stats.Kinds["pause"]++
	if onPause != nil {
		defer onPause()
	}
	w.faults.procStart(p.addr, "paused", w.s.now)
	p.state = procPaused
	inc := p.inc
	w.s.after(d, "resume", func() {
		if p.inc != inc || p.state != procPaused {
			return
		}
		w.trace.printf("FAULT %s resumes", p.addr)
		w.faults.procEnd(p.addr, "paused", w.s.now)
		p.resume()
		if onResume != nil {
			onResume()
		}
	})
}

// kill ends p's incarnation (SIGKILL); it restarts on the same address
// after d, unless never. Peers notice within DetectMax.
func (w *world) kill(p *proc, d time.Duration, never bool, restart func()) {
	if p.state == procDead {
		return
	}
	w.trace.printf("FAULT %s killed (restarts: %v)", p.addr, !never)
	w.stats.Kinds["kill"]++
	for _, c := range w.coords {
		if c.proc == p {
			c.collect()
			w.leaseWatch(c)
		}
	}
	w.down(p)
	w.detect(p)
	if never {
		return
	}
	w.restartAfter(p, d, restart)
}

// down ends p's incarnation: it is dead for the fault log from now, and
// its jobs are gone.
func (w *world) down(p *proc) {
	w.faults.procStart(p.addr, "dead", w.s.now)
	p.kill()
	for k, jp := range w.jobs {
		if jp == p {
			delete(w.jobs, k)
		}
	}
}

// restartAfter runs restart d from now, when p's death (down) ends.
func (w *world) restartAfter(p *proc, d time.Duration, restart func()) {
	w.s.after(d, "restart", func() {
		w.faults.procEnd(p.addr, "dead", w.s.now)
		w.trace.printf("FAULT %s restarts", p.addr)
		restart()
	})
}

// endpointBackoff is how long protoactor's endpoint writer waits after a
// failed connect before it reports the endpoint terminated (one try, then
// its 2 s sleep: remoting.StartSystem's MaxRetryCount 1). restartRaceMax
// bounds the restart of restartRace.
const (
	endpointBackoff = 2 * time.Second
	restartRaceMax  = 100 * time.Millisecond
)

// restartRace kills h's process and restarts it on the same address d
// later, while each coordinator's remote endpoint to the address is still
// failing: a coordinator that sent the old incarnation anything after it
// died has an endpoint writer whose connect failed and who sleeps out its
// back-off before it publishes EndpointTerminatedEvent. Until then every
// message the coordinator sends to the address — the new incarnation's
// connect among them — comes back a dead letter, and the event arrives
// after the new incarnation's first heartbeats (the stuck-view interleaving
// of a host restarted by supervision).
func (w *world) restartRace(h *hostProc, d time.Duration) {
	p := h.proc
	if p.state != procUp {
		return
	}
	w.trace.printf("FAULT %s killed, restarts in %v with every coordinator's endpoint to it failing", p.addr, d)
	w.stats.Kinds["restart race"]++
	w.down(p)
	last := w.s.now
	for _, c := range w.coords {
		cp := c.proc
		if cp.state == procDead {
			continue
		}
		until := w.s.now.Add(d + w.s.uniform(time.Millisecond, endpointBackoff))
		last = maxTime(last, until)
		w.net.failing[[2]string{cp.addr, p.addr}] = failingEndpoint{inc: cp.inc, until: until}
		cp.at(until.Sub(w.s.now), cp.inc, "endpoint terminated", func() { endpointLost(cp, p.addr) }, nil)
	}
	w.restartAfter(p, d, h.start)
	// Scans that met the failing endpoints had a fault.
	w.faults.procStart(p.addr, "behind a failing endpoint", w.s.now)
	w.s.at(last, "endpoints terminated", func() { w.faults.procEnd(p.addr, "behind a failing endpoint", w.s.now) })
}

// detect tells p's peers that it died: coordinators see its endpoint
// terminate, clients lose the coordinator.
func (w *world) detect(p *proc) {
	for _, c := range w.coords {
		if c.proc == p {
			continue
		}
		cp := c.proc
		cp.at(w.s.uniform(0, w.cfg.Faults.DetectMax), cp.inc, "endpoint terminated", func() { endpointLost(cp, p.addr) }, nil)
	}
	for _, cl := range w.clients {
		if w.isCoord(p) {
			cl := cl
			w.s.after(w.s.uniform(0, w.cfg.Faults.DetectMax), "coordinator lost", func() {
				if p.state == procDead {
					cl.coordinatorLost(p.addr, "endpoint terminated")
				}
			})
		}
	}
}

func (w *world) isCoord(p *proc) bool {
	for _, c := range w.coords {
		if c.proc == p {
			return true
		}
	}
	return false
}

// leaseWatch expires c's lease LeaseTTL after it stops renewing (dead or
// paused), if it is not running by then.
func (w *world) leaseWatch(c *coordProc) {
	w.s.after(w.cfg.Faults.LeaseTTL, "lease expiry", func() {
		if c.lease && c.proc.state != procUp {
			w.trace.printf("lease of %s expired", c.proc.addr)
			w.stats.Kinds["lease expired while "+c.proc.state.String()]++
			c.lease = false
			w.setMembers()
		}
	})
}

// leaseBack: c runs again and renews its lease; the others and the
// clients see it.
func (w *world) leaseBack(c *coordProc) {
	if !c.lease {
		c.lease = true
		w.setMembers()
	} else if c.co != nil {
		c.co.SetMembers(w.members())
	}
	for _, cl := range w.clients {
		cl := cl
		w.s.after(w.s.uniform(0, w.cfg.Faults.DetectMax), "coordinator up", func() {
			if c.proc.state == procUp {
				cl.coordinatorUp(c.proc.addr)
			}
		})
	}
}

// panic makes an actor panic: a coordinator's router (kind 0) or tablet
// actor (1), or a scan server (2).
func (w *world) panic(kind int, c *coordProc, tablet int, h *hostProc, server int) {
	const why = "injected by the harness"
	switch kind {
	case 0, 1:
		if c.proc.state != procUp || c.co == nil {
			return
		}
		target := "router"
		if kind == 1 {
			target = "tablet"
		}
		w.trace.printf("FAULT %s: %s panics", c.proc.addr, target)
		w.stats.Kinds[target+" panic"]++
		w.faults.procStart(c.proc.addr, "panicked", w.s.now)
		w.faults.procEnd(c.proc.addr, "panicked", w.s.now.Add(time.Nanosecond))
		c.panics.inject(c.co.ActorSystem(), target, w.truth.refs[tablet], why)
	default:
		if h.proc.state != procUp || server >= len(h.pids) {
			return
		}
		w.trace.printf("FAULT %s: server %d panics", h.proc.addr, server)
		w.stats.Kinds["scan server panic"]++
		w.faults.procStart(h.proc.addr, "panicked", w.s.now)
		w.faults.procEnd(h.proc.addr, "panicked", w.s.now.Add(time.Nanosecond))
		h.proc.sys.Root.Send(h.pids[server], &actorenv.Panic{Why: why})
	}
}

// reload swaps the profiles on every live coordinator (scanctl reload),
// during the scans.
func (w *world) reload() {
	w.trace.printf("FAULT reload of the profiles on every coordinator")
	w.stats.Kinds["reload"]++
	w.profiles = w.cfg.ReloadProfiles
	for _, c := range w.coords {
		if c.co != nil && c.proc.state != procDead {
			co := c.co
			p, err := parsedProfiles(w.profiles)
			if err != nil {
				w.problem("reload: %v", err)
				return
			}
			c.proc.at(0, c.proc.inc, "reload", func() { co.SetProfiles(p) }, nil)
		}
	}
	w.faults.count++
}
