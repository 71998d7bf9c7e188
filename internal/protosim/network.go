package protosim

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
)

// pid locates an actor: the address of its process and its id there.
type pid struct{ addr, id string }

func (p pid) String() string { return p.addr + "/" + p.id }

// envelope is one message on the simulated network.
type envelope struct {
	n    uint64 // message number, for the trace
	from pid
	to   pid
	msg  proto.Message
	inc  int // the destination's incarnation when sent
}

type procState uint8

const (
	procUp procState = iota
	procPaused
	procDead
)

func (s procState) String() string {
	return [...]string{"up", "paused", "dead"}[s]
}

// process is one simulated OS process: an address, an incarnation that
// changes when it restarts, and the actors in it. While paused (SIGSTOP)
// messages and timers queue and run, in order, when it resumes; when
// dead, both are lost, and so is its state.
type process struct {
	addr  string
	inc   int
	state procState
	held  []func()
	recv  func(env *envelope)
	w     *world
}

// timer starts a timer of this incarnation; it fires late if the process
// is paused and never if it died meanwhile.
func (p *process) timer(d time.Duration, owner, what string, fn func()) *event {
	inc := p.inc
	var e *event
	e = p.w.s.after(d, owner, what, func() {
		if p.inc != inc || p.state == procDead {
			return
		}
		if p.state == procPaused {
			// It fires when the process resumes, unless cancelled before.
			p.held = append(p.held, func() {
				if !e.dead {
					e.dead = true
					fn()
				}
			})
			return
		}
		fn()
	})
	e.proc, e.inc = p, inc
	return e
}

func (p *process) resume() {
	p.state = procUp
	held := p.held
	p.held = nil
	for _, fn := range held {
		if p.state != procUp {
			p.held = append(p.held, fn)
			continue
		}
		fn()
	}
}

// NetFaults are the per-message fault probabilities of one run and the
// delays of healthy and late messages.
type NetFaults struct {
	Drop, Duplicate, Reorder, Late float64
	// MinDelay..MaxDelay is a healthy message's delay; messages between
	// two processes arrive in order unless Reorder picks one.
	MinDelay, MaxDelay time.Duration
	// LateMax bounds the delay of a late message.
	LateMax time.Duration
}

// network carries envelopes between processes with NetFaults.
type network struct {
	w      *world
	procs  map[string]*process
	last   map[[2]string]time.Time // last arrival per link: FIFO links
	faults NetFaults
	n      uint64
	// inFlight counts messages of scans on the wire (not heartbeats).
	inFlight int
}

func newNetwork(w *world, f NetFaults) *network {
	return &network{w: w, procs: map[string]*process{}, last: map[[2]string]time.Time{}, faults: f}
}

func (n *network) add(addr string, recv func(*envelope)) *process {
	p := &process{addr: addr, inc: 1, recv: recv, w: n.w}
	n.procs[addr] = p
	return p
}

// send puts m on the wire from → to. The receiver must not modify m
// (duplicates are clones).
func (n *network) send(from, to pid, m proto.Message) {
	w := n.w
	n.n++
	if c := w.mut.count; c != nil {
		if id, _ := requestOf(m); id != "" {
			if c[id] == nil {
				c[id] = map[string]int{}
			}
			c[id][string(m.ProtoReflect().Descriptor().Name())]++
		}
	}
	env := &envelope{n: n.n, from: from, to: to, msg: m}
	dst := n.procs[to.addr]
	if dst == nil || dst.state == procDead {
		w.faults.message(env, "lost (destination down)")
		if w.trace.on {
			w.trace.printf("#%d %s -> %s %s LOST: %s down", env.n, from, to, describe(m), to.addr)
		}
		return
	}
	if src := n.procs[from.addr]; src != nil && src.state != procUp {
		// A paused or dead process sends nothing; callers never do this.
		panic(fmt.Sprintf("protosim: %s sends while %s", from.addr, src.state))
	}
	env.inc = dst.inc
	f := n.faults
	s := w.s
	if s.chance(f.Drop) {
		w.faults.message(env, "dropped")
		if w.trace.on {
			w.trace.printf("#%d %s -> %s %s DROPPED", env.n, from, to, describe(m))
		}
		return
	}
	n.schedule(env, "")
	if s.chance(f.Duplicate) {
		n.n++
		dup := &envelope{n: n.n, from: from, to: to, msg: proto.Clone(m), inc: env.inc}
		w.faults.message(dup, "duplicated")
		n.schedule(dup, fmt.Sprintf(" (duplicate of #%d)", env.n))
	}
}

func (n *network) schedule(env *envelope, note string) {
	w, s, f := n.w, n.w.s, n.faults
	d := s.uniform(f.MinDelay, f.MaxDelay)
	if s.chance(f.Late) {
		d = s.uniform(f.MaxDelay, f.LateMax)
		w.faults.message(env, "late "+d.String())
		note += " LATE " + d.String()
	}
	at := s.now.Add(d)
	link := [2]string{env.from.addr, env.to.addr}
	if s.chance(f.Reorder) {
		w.faults.message(env, "reordered")
		note += " REORDERED"
	} else if last := n.last[link]; at.Before(last) {
		at = last
		if at.Sub(s.now) > f.MaxDelay {
			w.faults.message(env, "late (behind a late message)")
			note += " LATE (head of line)"
		}
	}
	if at.After(n.last[link]) {
		n.last[link] = at
	}
	if w.trace.on {
		w.trace.printf("#%d %s -> %s %s sent%s", env.n, env.from, env.to, describe(env.msg), note)
	}
	scan, _ := requestOf(env.msg)
	if scan != "" {
		n.inFlight++
	}
	s.at(at, "", "deliver", func() {
		if scan != "" {
			n.inFlight--
		}
		n.deliver(env)
	})
}

func (n *network) deliver(env *envelope) {
	w := n.w
	p := n.procs[env.to.addr]
	if p.inc != env.inc || p.state == procDead {
		w.faults.message(env, "lost (destination restarted or died)")
		w.trace.printf("#%d lost: %s %s", env.n, env.to.addr, p.state)
		return
	}
	if p.state == procPaused {
		w.trace.printf("#%d held: %s paused", env.n, env.to.addr)
		p.held = append(p.held, func() {
			w.trace.printf("#%d delivered to %s (after pause)", env.n, env.to)
			p.recv(env)
		})
		return
	}
	w.trace.printf("#%d delivered to %s", env.n, env.to)
	p.recv(env)
}
