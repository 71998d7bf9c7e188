package selection

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestReorderPendingRule(t *testing.T) {
	cases := []struct {
		pending []int
		t       int
		want    []int32
	}{
		{[]int{5, 3, 1}, 2, []int32{2, 0, 1}},       // best=2, 5 ≥ 1+2
		{[]int{2, 1, 1}, 2, []int32{0, 1, 2}},       // 2 < 1+2: keep
		{[]int{3, 1, 1}, 2, []int32{1, 0, 2}},       // first strictly smallest = 1
		{[]int{3, 1, 0, 0}, 3, []int32{2, 0, 1, 3}}, // others keep their order
		{[]int{0, 0, 0}, 1, []int32{0, 1, 2}},       // no better replica
		{[]int{100, 0}, 0, []int32{0, 1}},           // T = 0: off
		{[]int{4, 5, 1}, 3, []int32{2, 0, 1}},
		{[]int{4, 5, 2}, 3, []int32{0, 1, 2}},
		{[]int{1}, 1, []int32{0}},
	}
	for _, c := range cases {
		order := make([]int32, len(c.pending))
		for i := range order {
			order[i] = int32(i)
		}
		reorderPending(order, func(i int32) int { return c.pending[i] }, c.t)
		if !slices.Equal(order, c.want) {
			t.Errorf("pending %v T=%d: %v want %v", c.pending, c.t, order, c.want)
		}
	}
}

func bkProfile(mods ...func(*Options)) *Profile {
	p := profileFor(PolicyBookKeeper)
	for _, m := range mods {
		m(&p.Options)
	}
	return p
}

// writeSetOf computes the expected write set: first n servers of the
// rendezvous order on distinct hosts.
func writeSetOf(tab Tablet, v *LoadView, n int) []*ServerLoad {
	var out []*ServerLoad
	hosts := map[string]bool{}
	for _, s := range RendezvousOrder(tab, v.group("").alive, "") {
		if !hosts[s.Host] && len(out) < n {
			hosts[s.Host] = true
			out = append(out, s)
		}
	}
	return out
}

func TestBookKeeperAffinityAndReorder(t *testing.T) {
	tab := tablet(21)
	base := hostsView(5, 2)
	ws := writeSetOf(tab, base, 3)
	p := bkProfile(func(o *Options) { o.ReorderThresholdPendingRequests = 3 })
	pol := mustPolicy(t, p)
	sel := func(v *LoadView, h []Attempt) Decision {
		t.Helper()
		d, err := pol.Select(&Input{Tablet: tab, Profile: p, View: v, Attempts: h, Rand: rng(1), Now: t0, Explain: true})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := sel(base, nil)
	if d.Server != ws[0].ID || len(d.Candidates) != 3 || d.Candidates[1] != ws[1].ID || d.Candidates[2] != ws[2].ID {
		t.Fatalf("affinity: %v candidates %v, write set %v %v %v", d.Server, d.Candidates, ws[0].ID, ws[1].ID, ws[2].ID)
	}
	hosts := map[string]bool{}
	for _, id := range d.Candidates {
		hosts[base.Server(id).Host] = true
	}
	if len(hosts) != 3 {
		t.Errorf("write set not on distinct hosts: %v", d.Candidates)
	}
	load := func(pend map[ServerID]int) *LoadView {
		var ss []*ServerLoad
		for _, s := range base.Servers {
			c := *s
			c.InFlight = pend[s.ID]
			ss = append(ss, &c)
		}
		return NewLoadView(ss, nil, t0)
	}
	// First replica's queue grows: pending 4 ≥ 0 + 3 → the best moves first.
	v := load(map[ServerID]int{ws[0].ID: 4, ws[1].ID: 1})
	if d := sel(v, nil); d.Server != ws[2].ID {
		t.Errorf("reorder: %v want %v", d.Server, ws[2].ID)
	}
	// Below the threshold: stay.
	v = load(map[ServerID]int{ws[0].ID: 2})
	if d := sel(v, nil); d.Server != ws[0].ID {
		t.Errorf("below threshold: %v", d.Server)
	}
	// QueueLen reported by the server counts too (max with InFlight).
	v = load(nil)
	v.Server(ws[0].ID).QueueLen = 5
	v = NewLoadView(append([]*ServerLoad(nil), v.Servers...), nil, t0)
	if d := sel(v, nil); d.Server != ws[1].ID {
		t.Errorf("queue length: %v", d.Server)
	}
	// Drained: back to the first replica.
	if d := sel(load(nil), nil); d.Server != ws[0].ID {
		t.Errorf("drained: %v", d.Server)
	}
	// Failures: next replica in order; all tried: start over.
	h := []Attempt{att(ws[0].ID, ws[0].Host, Busy)}
	if d := sel(base, h); d.Server != ws[1].ID {
		t.Errorf("after busy: %v", d.Server)
	}
	h = append(h, att(ws[1].ID, ws[1].Host, Error), att(ws[2].ID, ws[2].Host, Timeout))
	if d := sel(base, h); d.Server != ws[0].ID || d.Delay != 100*time.Millisecond || d.BusyTimeout != 264*time.Millisecond {
		t.Errorf("start over: %+v", d)
	}
	// writeSetSize 0: every server, plain rendezvous order.
	p0 := bkProfile(func(o *Options) { o.WriteSetSize = 0 })
	d, _ = mustPolicy(t, p0).Select(&Input{Tablet: tab, Profile: p0, View: base, Rand: rng(1), Explain: true})
	order := RendezvousOrder(tab, base.group("").alive, "")
	if len(d.Candidates) != 10 || d.Candidates[1] != order[1].ID || d.Server != order[0].ID {
		t.Errorf("writeSetSize 0: %v", d.Candidates)
	}
	// One host only: the write set is filled from its servers.
	one := hostsView(1, 4)
	d, _ = pol.Select(&Input{Tablet: tab, Profile: p, View: one, Rand: rng(1), Explain: true})
	if len(d.Candidates) != 3 {
		t.Errorf("one host: %v", d.Candidates)
	}
}

func TestBookKeeperSpeculative(t *testing.T) {
	tab := tablet(5)
	v := hostsView(5, 1)
	ws := writeSetOf(tab, v, 3)
	// BookKeeper's default maximum is the first timeout: no backoff.
	if def := bkProfile(); speculativeTimeout(&def.Options, 0) != 2*time.Second || speculativeTimeout(&def.Options, 3) != 2*time.Second {
		t.Errorf("default maximum: %v %v", speculativeTimeout(&def.Options, 0), speculativeTimeout(&def.Options, 3))
	}
	p := bkProfile(func(o *Options) { o.MaxSpeculativeReadTimeout = 10 * time.Second })
	pol := mustPolicy(t, p)
	sel := func(h []Attempt, hedge bool) (Decision, error) {
		return pol.Select(&Input{Tablet: tab, Profile: p, View: v, Attempts: h, Hedge: hedge, Rand: rng(1), Now: t0})
	}
	d, err := sel(nil, false)
	if err != nil || d.HedgeDelay != 2*time.Second || d.DataTimeout != 2*time.Second {
		t.Fatalf("first: %+v %v", d, err)
	}
	// First speculative read: next replica, next timeout 2s × 2.
	h := []Attempt{att(ws[0].ID, ws[0].Host, Slow)}
	d, err = sel(h, true)
	if err != nil || d.Server != ws[1].ID || d.HedgeDelay != 4*time.Second || d.Delay != 0 {
		t.Fatalf("speculative 1: %+v %v", d, err)
	}
	h = append(h, Attempt{Server: ws[1].ID, Host: ws[1].Host, Result: Slow, Hedge: true})
	d, err = sel(h, true)
	if err != nil || d.Server != ws[2].ID || d.HedgeDelay != 8*time.Second {
		t.Fatalf("speculative 2: %+v %v", d, err)
	}
	h = append(h, Attempt{Server: ws[2].ID, Host: ws[2].Host, Result: Pending, Hedge: true})
	// No replica left.
	if _, err := sel(h, true); !errors.Is(err, ErrNoHedge) {
		t.Fatalf("no replica left: %v", err)
	}
	// Backoff capped at maxSpeculativeReadTimeout.
	if got := speculativeTimeout(&p.Options, 10); got != 10*time.Second {
		t.Errorf("cap: %v", got)
	}
	// Accepted but no data by DataTimeout: speculate to the next replica.
	if d, err := sel([]Attempt{att(ws[0].ID, ws[0].Host, Started)}, true); err != nil || d.Server != ws[1].ID {
		t.Errorf("started without data: %v %v", d.Server, err)
	}
	// Off.
	off := bkProfile(func(o *Options) { o.SpeculativeReadTimeout = 0 })
	d, _ = mustPolicy(t, off).Select(&Input{Tablet: tab, Profile: off, View: v, Rand: rng(1)})
	if d.HedgeDelay != 0 || d.DataTimeout != 0 {
		t.Errorf("off: %+v", d)
	}
	if _, err := mustPolicy(t, off).Select(&Input{Tablet: tab, Profile: off, View: v, Rand: rng(1), Hedge: true,
		Attempts: []Attempt{att(ws[0].ID, ws[0].Host, Slow)}}); !errors.Is(err, ErrNoHedge) {
		t.Errorf("off hedge: %v", err)
	}
}

// BookKeeper's TestSpeculativeRead.testSpeculativeReadMultipleReplicasDown
// (timing part): five replicas, the 2nd and 3rd never answer, timeout T.
// A read whose first replica is the 2nd must reach the 4th after two
// speculative timeouts: at ≥ 2T and < 3T. With BookKeeper's default maximum
// (= the first timeout) the waits are T, T; a maximum above T (scanplane's
// old 10 s default) makes them T, 2T = 3T.
func TestBookKeeperSpeculativeReadMultipleReplicasDown(t *testing.T) {
	tab := tablet(3)
	v := hostsView(5, 1)
	ws := writeSetOf(tab, v, 5)
	const timeout = 5 * time.Second
	p := bkProfile(func(o *Options) {
		o.WriteSetSize = 5
		o.ReorderThresholdPendingRequests = 0
		o.SpeculativeReadTimeout = timeout
	})
	pol := mustPolicy(t, p)
	// readAt is when a read whose replicas answer per down first reaches a
	// live replica: the sum of the hedge delays until then.
	var readIn func(v *LoadView, down map[ServerID]bool) (time.Duration, ServerID)
	readAt := func(down map[ServerID]bool) (time.Duration, ServerID) { return readIn(v, down) }
	readIn = func(v *LoadView, down map[ServerID]bool) (time.Duration, ServerID) {
		t.Helper()
		var h []Attempt
		var at time.Duration
		for k := 0; k < len(ws); k++ {
			d, err := pol.Select(&Input{Tablet: tab, Profile: p, View: v, Attempts: h, Hedge: k > 0, Rand: rng(1), Now: t0.Add(at)})
			if err != nil {
				t.Fatalf("dispatch %d: %v", k, err)
			}
			if !down[d.Server] {
				return at, d.Server
			}
			h = append(h, Attempt{Server: d.Server, Host: v.Server(d.Server).Host, Result: Slow, Hedge: k > 0})
			at += d.HedgeDelay
		}
		t.Fatal("no live replica reached")
		return 0, ""
	}
	// First read: the first replica answers at once.
	if at, s := readAt(map[ServerID]bool{ws[1].ID: true, ws[2].ID: true, ws[4].ID: true}); at != 0 || s != ws[0].ID {
		t.Errorf("first replica up: %v on %v", at, s)
	}
	// First replica (and the next) down: two timeouts, less than three.
	at, s := readAt(map[ServerID]bool{ws[0].ID: true, ws[1].ID: true})
	if at < 2*timeout || at >= 3*timeout || s != ws[2].ID {
		t.Errorf("two replicas down: reached %v after %v, want [%v, %v) on %v", s, at, 2*timeout, 3*timeout, ws[2].ID)
	}
	// One down: one timeout, less than two.
	at, _ = readAt(map[ServerID]bool{ws[0].ID: true})
	if at < timeout || at >= 2*timeout {
		t.Errorf("one replica down: %v, want [%v, %v)", at, timeout, 2*timeout)
	}
	// The two replicas a speculative read was sent away from are now slow
	// (the coordinator counts a slowdown for each): the next read goes to
	// the third replica without a timeout (BookKeeper's reorderThreshold-
	// PendingRequests is 0 here, its default).
	var ss []*ServerLoad
	for _, s := range v.Servers {
		c := *s
		c.Slowdowns = make([]DecayedCount, len(testDecays))
		if c.ID == ws[0].ID || c.ID == ws[1].ID {
			slowNow(&c)
		}
		ss = append(ss, &c)
	}
	at, s = readIn(view(ss...), map[ServerID]bool{ws[0].ID: true, ws[1].ID: true})
	if at != 0 || s != ws[2].ID {
		t.Errorf("slow replicas registered: reached %v after %v, want %v at once", s, at, ws[2].ID)
	}
}

// bkHealthView: hostsView(4, 1) with per-server modifications by write-set
// position of tab (BookKeeper's ensemble index).
func bkHealthView(tab Tablet, mod func(pos int, s *ServerLoad)) (*LoadView, []*ServerLoad) {
	base := hostsView(4, 1)
	ws := writeSetOf(tab, base, 4)
	pos := map[ServerID]int{}
	for k, s := range ws {
		pos[s.ID] = k
	}
	var ss []*ServerLoad
	for _, s := range base.Servers {
		c := *s
		c.Errors = make([]DecayedCount, len(testDecays))
		c.Slowdowns = make([]DecayedCount, len(testDecays))
		mod(pos[s.ID], &c)
		ss = append(ss, &c)
	}
	return view(ss...), ws
}

// slowNow marks s slow as BookKeeper's registerSlowBookie would: one
// speculative read sent because it gave no data in time, at t0.
func slowNow(s *ServerLoad) {
	for i, d := range testDecays {
		s.Slowdowns[i] = s.Slowdowns[i].Add(t0, d, 1)
	}
}

// BookKeeper's TestRackawareEnsemblePlacementPolicy testNodeSlow,
// testTwoNodesSlow and testNodeDownAndNodeSlow (reorderReadSequence,
// reorderThresholdPendingRequests 0): a write set 0 1 2 3 becomes
// 1 2 3 0 when 0 is slow; 2 3 0 1 when 0 (1 pending) and 1 (2 pending) are
// slow; and 2 3 0 when 0 is slow and 1 is down (here the down server is no
// candidate: the write set over the live servers is 0 2 3, read as 2 3 0).
// Order is checked on the candidates (Explain) and on the pick sequence.
func TestBookKeeperSlowReplicasLast(t *testing.T) {
	tab := tablet(8)
	p := bkProfile(func(o *Options) { o.WriteSetSize = 4; o.ReorderThresholdPendingRequests = 0 })
	pol := mustPolicy(t, p)
	order := func(v *LoadView, now time.Time) []ServerID {
		t.Helper()
		d, err := pol.Select(&Input{Tablet: tab, Profile: p, View: v, Rand: rng(1), Now: now, Explain: true})
		if err != nil {
			t.Fatal(err)
		}
		if d.Server != d.Candidates[0] {
			t.Fatalf("picked %v, first candidate %v", d.Server, d.Candidates[0])
		}
		return d.Candidates
	}
	ids := func(ss []*ServerLoad, pos ...int) []ServerID {
		var out []ServerID
		for _, k := range pos {
			out = append(out, ss[k].ID)
		}
		return out
	}
	// testNodeSlow.
	v, ws := bkHealthView(tab, func(pos int, s *ServerLoad) {
		if pos == 0 {
			slowNow(s)
			s.InFlight = 1
		}
	})
	if got, want := order(v, t0), ids(ws, 1, 2, 3, 0); !slices.Equal(got, want) {
		t.Errorf("node slow: %v want %v", got, want)
	}
	// The slow mark expires like BookKeeper's (60 s): back in order.
	if got, want := order(v, t0.Add(61*time.Second)), ids(ws, 0, 1, 2, 3); !slices.Equal(got, want) {
		t.Errorf("slow mark expired: %v want %v", got, want)
	}
	// testTwoNodesSlow: slow replicas by pending, fewest first.
	v, ws = bkHealthView(tab, func(pos int, s *ServerLoad) {
		switch pos {
		case 0:
			slowNow(s)
			s.InFlight = 2
		case 1:
			slowNow(s)
			s.InFlight = 1
		}
	})
	if got, want := order(v, t0), ids(ws, 2, 3, 1, 0); !slices.Equal(got, want) {
		t.Errorf("two nodes slow (pending 2, 1): %v want %v", got, want)
	}
	v, ws = bkHealthView(tab, func(pos int, s *ServerLoad) {
		switch pos {
		case 0:
			slowNow(s)
			s.InFlight = 1
		case 1:
			slowNow(s)
			s.InFlight = 2
		}
	})
	if got, want := order(v, t0), ids(ws, 2, 3, 0, 1); !slices.Equal(got, want) {
		t.Errorf("two nodes slow: %v want %v", got, want)
	}
	// testNodeDownAndNodeSlow.
	v, ws = bkHealthView(tab, func(pos int, s *ServerLoad) {
		switch pos {
		case 0:
			slowNow(s)
			s.InFlight = 1
		case 1:
			s.Alive = false
		}
	})
	if got, want := order(v, t0), ids(ws, 2, 3, 0); !slices.Equal(got, want) {
		t.Errorf("node down and node slow: %v want %v", got, want)
	}
	// A failure history orders after the healthy replicas and before the
	// slow ones, earliest failure first (only when a replica is slow).
	v, ws = bkHealthView(tab, func(pos int, s *ServerLoad) {
		switch pos {
		case 0:
			slowNow(s)
		case 1, 2:
			at := t0.Add(-time.Duration(pos) * time.Second) // 2 failed first
			for i, d := range testDecays {
				s.Errors[i] = s.Errors[i].Add(at, d, 1)
			}
			s.LastFailure = at
		}
	})
	if got, want := order(v, t0), ids(ws, 3, 2, 1, 0); !slices.Equal(got, want) {
		t.Errorf("failure history: %v want %v", got, want)
	}
	// With reorderThresholdPendingRequests > 0 BookKeeper never registers a
	// slow bookie: the order stays.
	pT := bkProfile(func(o *Options) { o.WriteSetSize = 4; o.ReorderThresholdPendingRequests = 10 })
	v, ws = bkHealthView(tab, func(pos int, s *ServerLoad) {
		if pos == 0 {
			slowNow(s)
		}
	})
	d, _ := mustPolicy(t, pT).Select(&Input{Tablet: tab, Profile: pT, View: v, Rand: rng(1), Now: t0, Explain: true})
	if want := ids(ws, 0, 1, 2, 3); !slices.Equal(d.Candidates, want) {
		t.Errorf("T > 0: %v want %v", d.Candidates, want)
	}
}

// TestBookKeeperSlowMarkWindow: BookKeeper keeps a slow bookie in
// RackawareEnsemblePlacementPolicyImpl.slowBookies, a cache with
// expireAfterWrite(bookieFailureHistoryExpirationMSec = 60 s) written by
// every registerSlowBookie: a replica is slow for exactly 60 s after its
// last slowdown, however many slowdowns it had and whenever the view's
// counter started its half-life period.
func TestBookKeeperSlowMarkWindow(t *testing.T) {
	tab := tablet(8)
	p := bkProfile(func(o *Options) { o.WriteSetSize = 4; o.ReorderThresholdPendingRequests = 0 })
	pol := mustPolicy(t, p)
	// slowdowns adds n slowdowns at each offset from t0 to counters whose
	// half-life period started at origin (relative to t0).
	slowdowns := func(origin time.Duration, n uint32, at ...time.Duration) func(*ServerLoad) {
		return func(s *ServerLoad) {
			for i, d := range testDecays {
				c := DecayedCount{Origin: t0.Add(origin)}
				for _, a := range at {
					c = c.Add(t0.Add(a), d, n)
				}
				s.Slowdowns[i] = c
			}
		}
	}
	const window = 60 * time.Second
	for _, c := range []struct {
		name     string
		slow     func(*ServerLoad)
		at       time.Duration // when Select runs, after t0
		wantSlow bool
	}{
		{"one slowdown, period just begun", slowdowns(0, 1, 0), 30 * time.Second, true},
		{"one slowdown, period about to end: still slow after the period", slowdowns(-59*time.Second, 1, 0), 2 * time.Second, true},
		{"one slowdown, period about to end: slow until the window ends", slowdowns(-59*time.Second, 1, 0), window - time.Millisecond, true},
		{"one slowdown: not slow once the window ended", slowdowns(0, 1, 0), window, false},
		{"many slowdowns: not slow once the window ended", slowdowns(0, 8, 0), window, false},
		{"many slowdowns, long after", slowdowns(0, 8, 0), 3 * window, false},
		{"a later slowdown renews the window", slowdowns(0, 1, -50*time.Second, 0), window - time.Millisecond, true},
		{"renewed window ends", slowdowns(0, 1, -50*time.Second, 0), window, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, ws := bkHealthView(tab, func(pos int, s *ServerLoad) {
				if pos == 0 {
					c.slow(s)
				}
			})
			d, err := pol.Select(&Input{Tablet: tab, Profile: p, View: v, Rand: rng(1), Now: t0.Add(c.at), Explain: true})
			if err != nil {
				t.Fatal(err)
			}
			want := []ServerID{ws[0].ID, ws[1].ID, ws[2].ID, ws[3].ID}
			if c.wantSlow {
				want = []ServerID{ws[1].ID, ws[2].ID, ws[3].ID, ws[0].ID}
			}
			if !slices.Equal(d.Candidates, want) {
				t.Errorf("order %v, want %v (replica %v slow: %v)", d.Candidates, want, ws[0].ID, c.wantSlow)
			}
		})
	}
}

// TestBookKeeperFailureHistoryWindow: BookKeeper's failure history
// (LedgerHandle.bookieFailureHistory, written by
// registerOperationFailureOnBookie) is a cache with the same
// expireAfterWrite(bookieFailureHistoryExpirationMSec = 60 s): a replica
// has a failure history for exactly 60 s after its last failure. With
// replica 0 slow (so the order is rebuilt), replica 1 with a history goes
// after the healthy replicas 2 and 3, without one it keeps its place.
func TestBookKeeperFailureHistoryWindow(t *testing.T) {
	tab := tablet(8)
	p := bkProfile(func(o *Options) { o.WriteSetSize = 4; o.ReorderThresholdPendingRequests = 0 })
	pol := mustPolicy(t, p)
	// failures counts n failures at each offset from t0, as the host
	// actor does, in counters whose half-life period started at origin.
	failures := func(origin time.Duration, n uint32, at ...time.Duration) func(*ServerLoad) {
		return func(s *ServerLoad) {
			for i, d := range testDecays {
				c := DecayedCount{Origin: t0.Add(origin)}
				for _, a := range at {
					c = c.Add(t0.Add(a), d, n)
					s.LastFailure = t0.Add(a)
				}
				s.Errors[i] = c
			}
		}
	}
	const window = 60 * time.Second
	for _, c := range []struct {
		name        string
		fail        func(*ServerLoad)
		wantHistory bool
	}{
		{"one failure, period just begun", failures(-30*time.Second, 1, -30*time.Second), true},
		{"one failure, period ended since", failures(-61*time.Second, 1, -2*time.Second), true},
		{"one failure, window about to end", failures(-window, 1, -window+time.Millisecond), true},
		{"one failure, window ended", failures(-window, 1, -window), false},
		{"many failures, window ended", failures(-window, 8, -window), false},
		{"a later failure renews the window", failures(-100*time.Second, 1, -100*time.Second, -10*time.Second), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, ws := bkHealthView(tab, func(pos int, s *ServerLoad) {
				switch pos {
				case 0:
					slowNow(s)
				case 1:
					c.fail(s)
				}
			})
			d, err := pol.Select(&Input{Tablet: tab, Profile: p, View: v, Rand: rng(1), Now: t0, Explain: true})
			if err != nil {
				t.Fatal(err)
			}
			want := []ServerID{ws[1].ID, ws[2].ID, ws[3].ID, ws[0].ID}
			if c.wantHistory {
				want = []ServerID{ws[2].ID, ws[3].ID, ws[1].ID, ws[0].ID}
			}
			if !slices.Equal(d.Candidates, want) {
				t.Errorf("order %v, want %v (replica %v has a failure history: %v)", d.Candidates, want, ws[1].ID, c.wantHistory)
			}
		})
	}
}
