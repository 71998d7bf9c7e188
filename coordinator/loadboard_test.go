package coordinator

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scanplane/scanplane/selection"
)

func servers(host string, n int) []*selection.ServerLoad {
	out := make([]*selection.ServerLoad, n)
	for i := range out {
		out[i] = &selection.ServerLoad{ID: selection.ServerID(fmt.Sprintf("%s:1/%d", host, i)), Host: host, Zone: "z", Group: "default", Alive: true,
			Errors: make([]selection.DecayedCount, 1), Slowdowns: make([]selection.DecayedCount, 1)}
	}
	return out
}

func TestLoadBoardView(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewLoadBoard(func() time.Time { return now }, []selection.DecayParams{selection.DefaultDecay})
	b.SetHost("h1", servers("h1", 2))
	b.SetHost("h2", servers("h2", 3))
	v := b.View()
	if len(v.Servers) != 5 || v.Server("h2:1/2") == nil {
		t.Fatalf("view %+v", v.Servers)
	}
	if b.View() != v {
		t.Fatal("an unchanged board must return the same snapshot")
	}
	b.SetHost("h1", nil)
	if b.View() != v {
		t.Fatal("a change within minStale must not rebuild")
	}
	now = now.Add(10 * b.minStale)
	if v2 := b.View(); len(v2.Servers) != 3 || len(v.Servers) != 5 {
		t.Fatal("removing a host must not change older snapshots")
	}
	for i := 0; i < 30; i++ {
		b.RecordStartLatency(time.Duration(i+1) * time.Millisecond)
	}
	b.CountDispatch(false)
	b.CountDispatch(false)
	b.CountDispatch(true)
	now = now.Add(time.Second)
	v = b.View()
	if v.StartLatencyP95 != 29*time.Millisecond {
		t.Fatalf("p95 %v", v.StartLatencyP95)
	}
	if v.RecentDispatches != 2 || v.RecentHedges != 1 {
		t.Fatalf("window %d/%d", v.RecentDispatches, v.RecentHedges)
	}
	now = now.Add(time.Minute)
	b.SetHost("h2", servers("h2", 3))
	if v = b.View(); v.RecentDispatches != 0 {
		t.Fatalf("old dispatches still counted: %d", v.RecentDispatches)
	}
}

// BenchmarkLoadBoardViewAfterChange: the cost of one view rebuild.
func BenchmarkLoadBoardViewAfterChange(b *testing.B) {
	for _, hosts := range []int{3, 100, 500} {
		b.Run(fmt.Sprintf("servers=%d", hosts*2), func(b *testing.B) {
			now := time.Unix(0, 0)
			board := NewLoadBoard(func() time.Time { return now }, []selection.DecayParams{selection.DefaultDecay})
			for h := 0; h < hosts; h++ {
				board.SetHost(fmt.Sprintf("h%d", h), servers(fmt.Sprintf("h%d", h), 2))
			}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				board.SetHost("h0", servers("h0", 2))
				now = now.Add(time.Second) // past any staleness bound: measure a rebuild
				_ = board.View()
			}
		})
	}
}

// TestLoadBoardLatencyPercentilesSelectedPerShare: with a full latency
// ring, a rebuild selects the start-latency percentiles again only once
// 1/latSelectEvery of the ring is new; in between views carry the last
// ones. With few samples every new one counts.
func TestLoadBoardLatencyPercentilesSelectedPerShare(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewLoadBoard(func() time.Time { return now }, []selection.DecayParams{selection.DefaultDecay})
	b.SetHost("h1", servers("h1", 2))
	rebuild := func() *selection.LoadView {
		t.Helper()
		b.SetHost("h1", servers("h1", 2))
		now = now.Add(time.Second)
		return b.View()
	}
	for i := 0; i < 25; i++ {
		b.RecordStartLatency(time.Millisecond)
		rebuild()
	}
	if b.latSelects != 25-19 {
		t.Fatalf("%d selections over the rebuilds with 20..25 samples, want one each", b.latSelects)
	}
	ring := len(b.lat)
	for i := 25; i < ring; i++ {
		b.RecordStartLatency(time.Millisecond)
	}
	if v := rebuild(); v.StartLatencyP50 != time.Millisecond || v.StartLatencyP95 != time.Millisecond {
		t.Fatalf("p50 %v p95 %v, want 1ms", v.StartLatencyP50, v.StartLatencyP95)
	}
	selects := b.latSelects
	share := ring / latSelectEvery
	for i := 1; i < share; i++ {
		b.RecordStartLatency(time.Second)
		if v := rebuild(); v.StartLatencyP95 != time.Millisecond {
			t.Fatalf("after %d new samples: p95 %v, want the last selection's 1ms", i, v.StartLatencyP95)
		}
	}
	if b.latSelects != selects {
		t.Fatalf("%d selections for %d new samples of a full ring, want none before %d", b.latSelects-selects, share-1, share)
	}
	b.RecordStartLatency(time.Second)
	v := rebuild()
	if b.latSelects != selects+1 {
		t.Fatalf("%d selections after %d new samples, want 1", b.latSelects-selects, share)
	}
	if v.StartLatencyP50 != time.Millisecond || v.StartLatencyP95 != time.Millisecond {
		t.Fatalf("p50 %v p95 %v with %d of %d samples at 1s", v.StartLatencyP50, v.StartLatencyP95, share, ring)
	}
	for i := 0; i < 2*share; i++ {
		b.RecordStartLatency(time.Second)
	}
	if v := rebuild(); v.StartLatencyP95 != time.Second {
		t.Fatalf("p95 %v with %d of %d samples at 1s, want 1s", v.StartLatencyP95, 3*share, ring)
	}
}

// BenchmarkLoadBoardViewWithLatencies: one rebuild after one new start
// latency in a full ring, on 3 hosts × 2 servers, as a one-row scan's
// ScanRequest finds the board (the previous scan's events made it dirty).
func BenchmarkLoadBoardViewWithLatencies(b *testing.B) {
	now := time.Unix(0, 0)
	board := NewLoadBoard(func() time.Time { return now }, []selection.DecayParams{selection.DefaultDecay})
	for h := 0; h < 3; h++ {
		board.SetHost(fmt.Sprintf("h%d", h), servers(fmt.Sprintf("h%d", h), 2))
	}
	for i := range board.lat {
		board.RecordStartLatency(time.Duration(i%97) * time.Microsecond)
	}
	hosts := servers("h0", 2)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		board.RecordStartLatency(time.Duration(i%89) * time.Microsecond)
		board.SetHost("h0", hosts)
		now = now.Add(time.Second)
		_ = board.View()
	}
}

// TestHostActorLatencyForgives: a sample after a quiet spell blends into
// the decayed estimate, so one fast start forgives an old slow one.
func TestHostActorLatencyForgives(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewLoadBoard(func() time.Time { return now }, []selection.DecayParams{selection.DefaultDecay})
	for i := 0; i < 40; i++ {
		b.RecordStartLatency(time.Millisecond)
	}
	b.View() // tablet actors build snapshots as they decide
	h := newHostActor("h1", b, &sync.Map{}, 3, time.Minute, func() time.Time { return now }, nil)
	h.servers["s"] = &serverState{load: selection.ServerLoad{ID: "s", Host: "h1", Alive: true}}
	h.onEvent(now, &hostEvent{kind: evLatency, server: "s", latency: 250 * time.Millisecond})
	if got := h.servers["s"].load.StartLatency; got != 250*time.Millisecond {
		t.Fatalf("first sample: %v", got)
	}
	now = now.Add(10 * time.Second)
	h.onEvent(now, &hostEvent{kind: evLatency, server: "s", latency: 2 * time.Millisecond})
	if got := h.servers["s"].load.StartLatency; got > 5*time.Millisecond {
		t.Fatalf("a fast sample 10 s later left the estimate at %v", got)
	}
}

// TestHostActorEndedWithLatency: an attempt whose first batch was its
// last ends with one evEnded carrying its start latency, which the host
// records as an evLatency before it would: the sample, the answer, the
// in-flight count.
func TestHostActorEndedWithLatency(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewLoadBoard(func() time.Time { return now }, []selection.DecayParams{selection.DefaultDecay})
	h := newHostActor("h1", b, &sync.Map{}, 3, time.Minute, func() time.Time { return now }, nil)
	h.servers["s"] = &serverState{load: selection.ServerLoad{ID: "s", Host: "h1", Alive: true,
		Errors: make([]selection.DecayedCount, 1), Slowdowns: make([]selection.DecayedCount, 1), Busy: make([]selection.DecayedCount, 1)}}
	l := &h.servers["s"].load
	h.onEvent(now, &hostEvent{kind: evDispatched, server: "s"})
	now = now.Add(time.Millisecond)
	h.onEvent(now, &hostEvent{kind: evEnded, server: "s", result: selection.Started, latency: 700 * time.Microsecond})
	if l.StartLatency != 700*time.Microsecond || !l.StartLatencyAt.Equal(now) || l.InFlight != 0 ||
		!l.UnansweredSince.IsZero() || !l.LastAnswer.Equal(now) {
		t.Fatalf("after evEnded with a latency: %+v", l)
	}
	// Without one, the estimate stays.
	h.onEvent(now, &hostEvent{kind: evDispatched, server: "s"})
	h.onEvent(now.Add(time.Millisecond), &hostEvent{kind: evEnded, server: "s", result: selection.Started})
	if l.StartLatency != 700*time.Microsecond || !l.StartLatencyAt.Equal(now) {
		t.Fatalf("evEnded without a latency changed the estimate: %v at %v", l.StartLatency, l.StartLatencyAt)
	}
}

// TestHostActorTracksSilence: a dispatch starts a silence that only an
// answer from the server ends (first data, busy, error, a finished scan),
// never a timeout, a stall or a cancellation decided by the coordinator.
func TestHostActorTracksSilence(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewLoadBoard(func() time.Time { return now }, []selection.DecayParams{selection.DefaultDecay})
	h := newHostActor("h1", b, &sync.Map{}, 3, time.Minute, func() time.Time { return now }, nil)
	h.servers["s"] = &serverState{load: selection.ServerLoad{ID: "s", Host: "h1", Alive: true,
		Errors: make([]selection.DecayedCount, 1), Slowdowns: make([]selection.DecayedCount, 1), Busy: make([]selection.DecayedCount, 1)}}
	l := &h.servers["s"].load
	t0 := now
	h.onEvent(now, &hostEvent{kind: evDispatched, server: "s"})
	now = now.Add(time.Millisecond)
	h.onEvent(now, &hostEvent{kind: evDispatched, server: "s"})
	if !l.UnansweredSince.Equal(t0) {
		t.Fatalf("two dispatches: silent since %v, want the first (%v)", l.UnansweredSince, t0)
	}
	for _, r := range []selection.AttemptResult{selection.Timeout, selection.Stalled, selection.Cancelled} {
		h.onEvent(now, &hostEvent{kind: evEnded, server: "s", result: r})
		if !l.UnansweredSince.Equal(t0) || !l.LastAnswer.IsZero() {
			t.Fatalf("%v ended the silence: since %v, answer %v", r, l.UnansweredSince, l.LastAnswer)
		}
	}
	for _, ev := range []hostEvent{{kind: evLatency, server: "s", latency: time.Millisecond}, {kind: evAnswer, server: "s"},
		{kind: evEnded, server: "s", result: selection.Busy}, {kind: evEnded, server: "s", result: selection.Error},
		{kind: evEnded, server: "s", result: selection.Started}} {
		h.onEvent(now, &hostEvent{kind: evDispatched, server: "s"})
		now = now.Add(time.Millisecond)
		h.onEvent(now, &ev)
		if !l.UnansweredSince.IsZero() || !l.LastAnswer.Equal(now) {
			t.Fatalf("%v/%v: silent since %v, last answer %v (now %v)", ev.kind, ev.result, l.UnansweredSince, l.LastAnswer, now)
		}
	}
}

// TestHostActorPublishedViewIsImmutable: published loads share the
// counter slices with the host's working state, which must replace rather
// than change them: a failure, a busy answer or a slowdown after a publish
// leaves the published counters as they were, and the next publish shows
// the change.
func TestHostActorPublishedViewIsImmutable(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewLoadBoard(func() time.Time { return now }, []selection.DecayParams{selection.DefaultDecay})
	h := newHostActor("h1", b, &sync.Map{}, 3, time.Minute, func() time.Time { return now }, nil)
	h.servers["s"] = &serverState{load: selection.ServerLoad{ID: "s", Host: "h1", Alive: true, Address: "a", ActorID: "s",
		Errors: make([]selection.DecayedCount, 1), Slowdowns: make([]selection.DecayedCount, 1), Busy: make([]selection.DecayedCount, 1)}}
	d := selection.DefaultDecay
	for _, ev := range []hostEvent{{kind: evEnded, server: "s", result: selection.Error}, {kind: evBusySignal, server: "s"},
		{kind: evSlowdown, server: "s"}, {kind: evPenalize, server: "s"}, {kind: evTimeoutSignal, server: "s"}} {
		h.publish()
		old := b.View().Server("s")
		errs, busy, slows, fails := old.Errors[0].Value(now, d), old.Busy[0].Value(now, d), old.Slowdowns[0].Value(now, d), len(old.RecentFailures)
		now = now.Add(time.Millisecond)
		h.onEvent(now, &ev)
		if old.Errors[0].Value(now, d) != errs || old.Busy[0].Value(now, d) != busy || old.Slowdowns[0].Value(now, d) != slows ||
			len(old.RecentFailures) != fails {
			t.Fatalf("event %v changed a published view's counters", ev.kind)
		}
		h.publish()
		now = now.Add(time.Second) // past the view's refresh
		cur := b.View().Server("s")
		if cur.Errors[0].Value(now, d) == errs && cur.Busy[0].Value(now, d) == busy && cur.Slowdowns[0].Value(now, d) == slows {
			t.Fatalf("event %v: the next publish does not show it", ev.kind)
		}
	}
	st := &sync.Map{}
	h.status = st
	h.publish()
	v, _ := st.Load("h1")
	if ms := v.(*hostStatus).messages(); len(ms) != 1 || ms[0].GetId() != "s" || ms[0].GetErrors() == 0 || ms[0].GetAttemptsFailed() != 1 {
		t.Fatalf("status: %v", ms)
	}
}

// BenchmarkHostActorDispatchEvent times what a host actor does for one
// dispatch of a one-row scan: apply the event and publish its servers (2
// here, as in BenchmarkOneRowScan's hosts) to the load board.
func BenchmarkHostActorDispatchEvent(b *testing.B) {
	now := time.Unix(1000, 0)
	board := NewLoadBoard(func() time.Time { return now }, []selection.DecayParams{selection.DefaultDecay})
	h := newHostActor("h1", board, &sync.Map{}, 3, time.Minute, func() time.Time { return now }, nil)
	for _, id := range []selection.ServerID{"s0", "s1"} {
		h.servers[id] = &serverState{load: selection.ServerLoad{ID: id, Host: "h1", Alive: true, Address: "a", ActorID: string(id),
			Errors: make([]selection.DecayedCount, 1), Slowdowns: make([]selection.DecayedCount, 1), Busy: make([]selection.DecayedCount, 1),
			RecentFailures: make([]time.Time, 5)}}
	}
	ev := &hostEvent{kind: evDispatched, server: "s0"}
	b.ReportAllocs()
	for b.Loop() {
		h.onEvent(now, ev)
		h.publish()
	}
}

// TestLoadBoardViewsStayAsPublished: the board builds each view sharing
// what did not change with the one before; a published view must stay as
// it was published while later ones are built (its servers and, through
// every policy's decisions, its indices), and decide like a view built
// from scratch of the same servers (ground truth: selection.NewLoadView).
func TestLoadBoardViewsStayAsPublished(t *testing.T) {
	now := time.Unix(1000, 0)
	rng := rand.New(rand.NewPCG(7, 7))
	decays := []selection.DecayParams{selection.DefaultDecay}
	b := NewLoadBoard(func() time.Time { return now }, decays)
	host := func(h, n int) []*selection.ServerLoad {
		ss := servers(fmt.Sprintf("h%d", h), n)
		for _, s := range ss {
			s.Zone = fmt.Sprintf("z%d", h%3)
			s.InFlight, s.QueueLen, s.Workers = rng.IntN(4), rng.IntN(3), 2
			s.LastHeartbeat = now.Add(-time.Duration(rng.IntN(4000)) * time.Millisecond)
			s.Alive = rng.IntN(8) > 0
			if rng.IntN(3) == 0 {
				s.Errors[0] = selection.DecayedCount{Count: uint32(rng.IntN(4)), Origin: now}
				s.ConsecutiveFailures, s.LastFailure = rng.IntN(5), now.Add(-time.Duration(rng.IntN(20))*time.Second)
			}
		}
		return ss
	}
	set := map[string][]*selection.ServerLoad{} // what the board was given
	setHost := func(h string, ss []*selection.ServerLoad) {
		if ss == nil {
			delete(set, h)
		} else {
			set[h] = ss
		}
		b.SetHost(h, ss)
	}
	for h := 0; h < 6; h++ {
		setHost(fmt.Sprintf("h%d", h), host(h, 2))
	}
	var policies []*selection.Profile
	for _, name := range selection.PolicyNames() {
		policies = append(policies, &selection.Profile{Name: name, Policy: name, Group: selection.DefaultGroup,
			Options: selection.DefaultOptions(name)})
	}
	// decisions: every policy's choice for a few tablets, each with a
	// fresh policy and tablet state.
	decisions := func(v *selection.LoadView) string {
		var out []string
		for _, p := range policies {
			pol, err := selection.NewPolicy(p)
			if err != nil {
				t.Fatal(err)
			}
			for tb := 0; tb < 4; tb++ {
				in := &selection.Input{Tablet: selection.Tablet{Table: "t", EndRow: []byte(fmt.Sprintf("r%03d", tb))}, Profile: p, View: v,
					Now: v.At, Rand: rand.New(rand.NewPCG(uint64(tb), 1)), State: &selection.TabletState{}}
				d, err := pol.Select(in)
				out = append(out, fmt.Sprintf("%s/%d:%s:%v", p.Name, tb, d.Server, err))
			}
		}
		return strings.Join(out, " ")
	}
	dump := func(v *selection.LoadView) string {
		var sb strings.Builder
		fmt.Fprintf(&sb, "%v %v %v %v %d %d\n", v.Decays, v.At, v.StartLatencyP50, v.StartLatencyP95, v.RecentDispatches, v.RecentHedges)
		for _, s := range v.Servers {
			fmt.Fprintf(&sb, "%p %+v\n", s, *s)
		}
		return sb.String()
	}
	var views []*selection.LoadView
	var dumps, decided []string
	for step := 0; step < 40; step++ {
		switch h := rng.IntN(7); {
		case h == 6 && step%5 == 0:
			setHost(fmt.Sprintf("h%d", 6+step), host(6+step, 1+rng.IntN(3))) // a new host
		case h == 5 && step%4 == 0:
			setHost(fmt.Sprintf("h%d", rng.IntN(6)), nil) // a host gone
		default:
			setHost(fmt.Sprintf("h%d", h), host(h, 2))
		}
		// Past twice the last rebuild's cost too: the board serves a
		// dirty view that long (LoadBoard.fresh), and a loaded machine's
		// rebuild can take longer than the smallest step.
		now = now.Add(time.Duration(1+rng.IntN(200))*time.Millisecond + 2*time.Duration(b.cost.Load()))
		v := b.View()
		var want []*selection.ServerLoad
		for _, ss := range set {
			want = append(want, ss...)
		}
		slices.SortFunc(want, func(a, b *selection.ServerLoad) int { return strings.Compare(string(a.ID), string(b.ID)) })
		if !slices.Equal(v.Servers, want) {
			t.Fatalf("step %d: the view holds %d servers, not the %d the board was given, in ID order", step, len(v.Servers), len(want))
		}
		fresh := selection.NewLoadView(slices.Clone(v.Servers), v.Decays, v.At)
		fresh.StartLatencyP50, fresh.StartLatencyP95 = v.StartLatencyP50, v.StartLatencyP95
		fresh.RecentDispatches, fresh.RecentHedges = v.RecentDispatches, v.RecentHedges
		d := decisions(v)
		if want := decisions(fresh); d != want {
			t.Fatalf("step %d: the board's view decides\n%s\na fresh view of its servers\n%s", step, d, want)
		}
		views, dumps, decided = append(views, v), append(dumps, dump(v)), append(decided, d)
	}
	for i, v := range views {
		if got := dump(v); got != dumps[i] {
			t.Fatalf("view %d changed after publication:\nwas %s\nnow %s", i, dumps[i], got)
		}
		if got := decisions(v); got != decided[i] {
			t.Fatalf("view %d decides differently after later rebuilds:\nwas %s\nnow %s", i, decided[i], got)
		}
	}
}

// TestLoadBoardBlockTimes: scan times per block recorded at home and
// away reach the next view (adaptive's learned spill cost).
func TestLoadBoardBlockTimes(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewLoadBoard(func() time.Time { return now }, []selection.DecayParams{selection.DefaultDecay})
	for range 16 {
		b.RecordBlockTime(selection.PlacementHome, time.Millisecond)
		b.RecordBlockTime(selection.PlacementAway, 2*time.Millisecond)
	}
	now = now.Add(time.Second)
	if s, ok := b.View().BlockTimes.Spill(); !ok || s < 0.99 || s > 1.01 {
		t.Fatalf("view's spill cost %v %v, want 1", s, ok)
	}
}
