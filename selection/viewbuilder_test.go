package selection

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spaolacci/murmur3"
)

// fleet is a test cluster whose servers a step changes the way host
// actors do: a changed server is a new *ServerLoad, an unchanged one the
// same pointer as in the previous view.
type fleet struct {
	r  *rand.Rand
	ss []*ServerLoad
	at time.Time
}

func newFleet(seed uint64, n int) *fleet {
	f := &fleet{r: rng(seed), at: t0}
	for i := 0; i < n; i++ {
		f.ss = append(f.ss, f.server(i/3, i%3))
	}
	return f
}

func (f *fleet) server(host, i int) *ServerLoad {
	h := fmt.Sprintf("host%03d", host)
	s := &ServerLoad{ID: ServerID(fmt.Sprintf("%s:9000/%d", h, i)), Host: h, Zone: fmt.Sprintf("z%d", host%3),
		Group: DefaultGroup, Alive: true, Workers: 4, LastHeartbeat: f.at}
	f.vary(s)
	return s
}

// vary changes s's load figures at random.
func (f *fleet) vary(s *ServerLoad) {
	r, at := f.r, f.at
	s.InFlight, s.QueueLen, s.Active = r.IntN(4), r.IntN(3), r.IntN(2)
	s.LastHeartbeat = at.Add(-time.Duration(r.IntN(3000)) * time.Millisecond)
	s.StartLatency = time.Duration(r.IntN(4)*r.IntN(50)) * time.Millisecond
	s.StartLatencyAt = at.Add(-time.Duration(r.IntN(5000)) * time.Millisecond)
	s.ConsecutiveFailures, s.LastFailure, s.RecentFailures = 0, time.Time{}, nil
	if r.IntN(4) == 0 {
		s.ConsecutiveFailures, s.LastFailure = r.IntN(8), at.Add(-time.Duration(r.IntN(40))*time.Second)
		s.RecentFailures = []time.Time{s.LastFailure}
	}
	s.UnansweredSince, s.LastAnswer = time.Time{}, at.Add(-time.Duration(r.IntN(500))*time.Millisecond)
	if r.IntN(4) == 0 {
		s.UnansweredSince = at.Add(-time.Duration(r.IntN(500)) * time.Millisecond)
	}
	s.Errors, s.Slowdowns, s.Busy = nil, nil, nil
	if r.IntN(3) > 0 {
		s.Errors = []DecayedCount{{Count: uint32(r.IntN(5)), Origin: at}, {Count: uint32(r.IntN(5)), Origin: at}}
		s.Slowdowns = []DecayedCount{{Count: uint32(r.IntN(3)), Origin: at}, {Count: uint32(r.IntN(3)), Origin: at}}
		s.Busy = []DecayedCount{{Count: uint32(r.IntN(3)), Origin: at}, {Count: uint32(r.IntN(3)), Origin: at}}
	}
}

// step advances time and replaces some servers with changed copies; now
// and then it changes the membership too: a server added, removed, dead
// or alive again, moved to another zone, host or group.
func (f *fleet) step() []*ServerLoad {
	r := f.r
	f.at = f.at.Add(time.Duration(1+r.IntN(3000)) * time.Millisecond)
	for k := 0; k < 1+r.IntN(3); k++ {
		i := r.IntN(len(f.ss))
		c := *f.ss[i]
		f.vary(&c)
		f.ss[i] = &c
	}
	if r.IntN(3) == 0 {
		i := r.IntN(len(f.ss))
		c := *f.ss[i]
		switch r.IntN(6) {
		case 0:
			c.Alive = !c.Alive
		case 1:
			c.Zone = fmt.Sprintf("z%d", r.IntN(5))
		case 2:
			c.Host = fmt.Sprintf("host%03d", r.IntN(len(f.ss)/3+2))
		case 3:
			c.Group = []string{"", DefaultGroup, "batch"}[r.IntN(3)]
		case 4:
			f.ss = append(f.ss, f.server(r.IntN(len(f.ss)/3+2), 3+r.IntN(1000)))
		case 5:
			if len(f.ss) > 2 {
				f.ss = slices.Delete(f.ss, i, i+1)
				return slices.Clone(f.ss)
			}
		}
		f.ss[i] = &c
	}
	return slices.Clone(f.ss)
}

// refGroup is the index of group name computed the plain way, from its
// definition, for comparing with a view's.
type refGroup struct {
	alive      []ServerID
	hosts      []string
	hostOf     []int32
	servers    [][]int32
	maxPerHost int
	zones      []zoneEntry
	zoneOf     []int32
	heartbeat  []time.Time
	latMedian  time.Duration
	fp         [2]uint64
}

func reference(servers []*ServerLoad, name string, at time.Time) refGroup {
	var ref refGroup
	var alive []*ServerLoad
	for _, s := range servers {
		if s.Alive && groupName(s.Group) == name {
			alive = append(alive, s)
		}
	}
	slices.SortFunc(alive, func(a, b *ServerLoad) int { return strings.Compare(string(a.ID), string(b.ID)) })
	var zones []string
	var lats []time.Duration
	var buf []byte
	for _, s := range alive {
		ref.alive = append(ref.alive, s.ID)
		if !slices.Contains(ref.hosts, s.Host) {
			ref.hosts = append(ref.hosts, s.Host)
		}
		if !slices.Contains(zones, s.Zone) {
			zones = append(zones, s.Zone)
		}
		if s.StartLatency > 0 {
			lats = append(lats, s.StartLatency)
		}
		// The fingerprint as defined (groupShape.fp), in one buffer.
		buf = append(append(append(append(buf, s.ID...), 0), s.Host...), 0)
	}
	slices.Sort(ref.hosts)
	slices.Sort(zones)
	ref.servers = make([][]int32, len(ref.hosts))
	ref.heartbeat = make([]time.Time, len(ref.hosts))
	for _, z := range zones {
		ref.zones = append(ref.zones, zoneEntry{name: z})
	}
	for i, s := range alive {
		h := int32(slices.Index(ref.hosts, s.Host))
		z := int32(slices.Index(zones, s.Zone))
		ref.hostOf = append(ref.hostOf, h)
		ref.zoneOf = append(ref.zoneOf, z)
		ref.servers[h] = append(ref.servers[h], int32(i))
		ref.maxPerHost = max(ref.maxPerHost, len(ref.servers[h]))
		if s.LastHeartbeat.After(ref.heartbeat[h]) {
			ref.heartbeat[h] = s.LastHeartbeat
		}
		ref.zones[z].n++
		if tripped(s, at, defaultBreaker) || (s.ConsecutiveFailures > 0 && !s.LastFailure.IsZero() && at.Sub(s.LastFailure) < recentFailure) {
			ref.zones[z].unhealthy++
		}
	}
	if len(lats) > 0 {
		slices.Sort(lats)
		ref.latMedian = lats[len(lats)/2]
	}
	ref.fp[0], ref.fp[1] = murmur3.Sum128(buf)
	return ref
}

func refOf(g *groupIndex) refGroup {
	ref := refGroup{hostOf: g.hostOf, zoneOf: g.zoneOf, maxPerHost: g.maxPerHost, zones: g.zones, heartbeat: g.heartbeat,
		latMedian: g.latMedian, fp: g.fp}
	for _, s := range g.alive {
		ref.alive = append(ref.alive, s.ID)
	}
	for _, h := range g.hosts {
		ref.hosts = append(ref.hosts, h.name)
		ref.servers = append(ref.servers, h.servers)
	}
	return ref
}

// TestViewBuilderMatchesDefinition: views built in succession, sharing
// what did not change, have the index of their servers computed from its
// definition (ground truth: reference above, whose fingerprint is the
// single-buffer murmur3 of before), give the same accessor answers as a
// view built from scratch, and every policy decides on them as it does on
// views built from scratch (two instances of each policy, fed the same
// calls).
func TestViewBuilderMatchesDefinition(t *testing.T) {
	cases := conformanceCases()
	for seed := uint64(1); seed <= 3; seed++ {
		f := newFleet(seed, []int{5, 24, 60}[seed-1])
		var b ViewBuilder
		polA, polB := make([]Policy, len(cases)), make([]Policy, len(cases))
		stA, stB := make([][]*TabletState, len(cases)), make([][]*TabletState, len(cases))
		for k, pc := range cases {
			polA[k], polB[k] = mustPolicy(t, pc.p), mustPolicy(t, pc.p)
			for tb := 0; tb < 3; tb++ {
				stA[k], stB[k] = append(stA[k], &TabletState{}), append(stB[k], &TabletState{})
			}
		}
		shared := 0
		decays := []DecayParams{DefaultDecay, clickhouseTally}
		var prev *LoadView
		for step := 0; step < 120; step++ {
			ss := f.step()
			va := b.Build(slices.Clone(ss), decays, f.at)
			vb := NewLoadView(slices.Clone(ss), decays, f.at)
			for _, name := range []string{DefaultGroup, "batch", "none"} {
				ga, gb := va.group(name), vb.group(name)
				want := reference(ss, name, f.at)
				if len(want.alive) == 0 {
					if ga != emptyGroup || gb != emptyGroup {
						t.Fatalf("seed %d step %d group %s: no live server, not the empty group", seed, step, name)
					}
					continue
				}
				if got := refOf(ga); !reflect.DeepEqual(got, want) {
					t.Fatalf("seed %d step %d group %s: built index\n%+v\nwant\n%+v", seed, step, name, got, want)
				}
				if got := refOf(gb); !reflect.DeepEqual(got, want) {
					t.Fatalf("seed %d step %d group %s: fresh index\n%+v\nwant\n%+v", seed, step, name, got, want)
				}
				if prev != nil && prev.indexedGroup(name) != nil && &prev.indexedGroup(name).hosts[0] == &ga.hosts[0] {
					shared++
				}
			}
			prev = va
			for _, s := range ss {
				if va.Server(s.ID) != s || va.ErrorsOf(s, DefaultDecay, f.at) != vb.ErrorsOf(s, DefaultDecay, f.at) ||
					va.BusyOf(s, clickhouseTally, f.at) != vb.BusyOf(s, clickhouseTally, f.at) {
					t.Fatalf("seed %d step %d: accessors differ for %s", seed, step, s.ID)
				}
			}
			if !slices.Equal(va.Servers, vb.Servers) {
				t.Fatalf("seed %d step %d: servers differ", seed, step)
			}
			for k, pc := range cases {
				for tb := 0; tb < 3; tb++ {
					for _, hedge := range []bool{false, true} {
						r := rng(uint64(step*7 + tb))
						hist := randomHistory(r, vb, hedge)
						in := func(v *LoadView, st *TabletState) *Input {
							return &Input{Tablet: tablet(tb), Profile: pc.p, View: v, Now: f.at, Rand: rng(uint64(step*13 + tb)),
								Attempts: hist, Hedge: hedge, State: st, LocalHost: "host001", Explain: step%5 == 0}
						}
						da, ea := polA[k].Select(in(va, stA[k][tb]))
						db, eb := polB[k].Select(in(vb, stB[k][tb]))
						if !reflect.DeepEqual(da, db) || fmt.Sprint(ea) != fmt.Sprint(eb) {
							t.Fatalf("seed %d step %d %s tablet %d hedge %v: built view %+v %v, fresh view %+v %v",
								seed, step, pc.name, tb, hedge, da, ea, db, eb)
						}
					}
				}
			}
		}
		t.Logf("seed %d: %d group indices of 120 views shared with the view before", seed, shared)
		if shared < 60 {
			t.Fatalf("seed %d: only %d group indices of 120 views shared with the view before", seed, shared)
		}
	}
}

// dumpView renders everything a view holds, through every pointer, for
// comparing a view with itself later.
func dumpView(v *LoadView) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%v %v %v %v %d %d\n", v.Decays, v.At, v.StartLatencyP50, v.StartLatencyP95, v.RecentDispatches, v.RecentHedges)
	for _, s := range v.Servers {
		fmt.Fprintf(&sb, "%p %+v\n", s, *s)
	}
	for _, g := range v.groups {
		fmt.Fprintf(&sb, "%s %+v %+v %v %v %v %v %d %v %v %v\n", g.name, g.hosts, g.zones0, g.hostOf, g.zoneOf, g.members,
			g.fp, g.maxPerHost, g.heartbeat, g.zones, g.latMedian)
		for _, s := range g.alive {
			fmt.Fprintf(&sb, "%p ", s)
		}
	}
	return sb.String()
}

// TestViewBuilderLeavesPublishedViewsAlone: building later views, which
// share the indices of earlier ones, changes nothing an earlier view
// holds.
func TestViewBuilderLeavesPublishedViewsAlone(t *testing.T) {
	f := newFleet(9, 30)
	var b ViewBuilder
	var views []*LoadView
	var dumps []string
	for step := 0; step < 150; step++ {
		v := b.Build(f.step(), []DecayParams{DefaultDecay}, f.at)
		views, dumps = append(views, v), append(dumps, dumpView(v))
		from := max(0, len(views)-4) // the few latest each step, all at the end
		if step == 149 {
			from = 0
		}
		for i := from; i < len(views); i++ {
			if got := dumpView(views[i]); got != dumps[i] {
				t.Fatalf("step %d changed the view of step %d:\nwas %s\nnow %s", step, i, dumps[i], got)
			}
		}
	}
}

// TestSelectKthMatchesSort: SelectKth picks what a sort puts at k, for
// every k, on random, constant, sorted and reversed inputs with
// duplicates (ground truth: slices.Sort).
func TestSelectKthMatchesSort(t *testing.T) {
	r := rng(4)
	inputs := [][]time.Duration{{7}, {2, 1}, {5, 5, 5, 5}}
	for n := 1; n <= 70; n += 3 {
		rnd, asc, desc, dup := make([]time.Duration, n), make([]time.Duration, n), make([]time.Duration, n), make([]time.Duration, n)
		for i := range rnd {
			rnd[i] = time.Duration(r.IntN(1000))
			asc[i], desc[i], dup[i] = time.Duration(i), time.Duration(n-i), time.Duration(r.IntN(3))
		}
		inputs = append(inputs, rnd, asc, desc, dup)
	}
	for _, in := range inputs {
		want := slices.Clone(in)
		slices.Sort(want)
		for k := range in {
			if got := SelectKth(slices.Clone(in), k); got != want[k] {
				t.Fatalf("SelectKth(%v, %d) = %v, want %v", in, k, got, want[k])
			}
		}
	}
}
