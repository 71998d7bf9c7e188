package coordinator

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/selection"
)

// scanctl route does not disturb the tablet's real policy
// state. A tablet actor answers routes between its decisions; its next 400
// decisions must equal those of an identical actor that never routed.
func TestRouteLeavesSelectionStateAlone(t *testing.T) {
	for _, policy := range []string{"accumulo", "accumulo-host", "adaptive", "bookkeeper", "ribbon-zone", "clickhouse-nearest_hostname", "round-robin"} {
		t.Run(policy, func(t *testing.T) {
			profiles, err := selection.ParseProfiles([]byte(fmt.Sprintf(`[{"isDefault": true, "policy": %q,
				"attemptPlans": [{"servers": "3", "busyTimeout": "33ms", "salt": "one"}, {"servers": "6", "busyTimeout": "66ms", "salt": "two"},
				                 {"servers": "100%%", "busyTimeout": "100ms"}]},
				{"scanTypeActivations": ["other"], "policy": %q,
				"attemptPlans": [{"servers": "2", "busyTimeout": "33ms", "salt": "x"}, {"servers": "5", "busyTimeout": "66ms", "salt": "y"},
				                 {"servers": "8", "busyTimeout": "100ms", "salt": "z"}]},
				{"scanTypeActivations": ["third"], "policy": %q,
				"attemptPlans": [{"servers": "4", "busyTimeout": "33ms", "salt": "p"}, {"servers": "7", "busyTimeout": "66ms", "salt": "q"}]}]`,
				policy, policy, policy)))
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Unix(100000, 0)
			cfg := DefaultCoordinatorConfig()
			cfg.Hostname = "h03"
			co := newCoordinator(cfg, nil, nil, profiles)
			co.board = NewLoadBoard(func() time.Time { return t0 }, profiles.Decays())
			var all []selection.ServerID
			for h := range 12 {
				host := fmt.Sprintf("h%02d", h)
				ss := servers(host, 4)
				for i, s := range ss {
					s.Zone = fmt.Sprintf("z%d", h%3)
					s.LastHeartbeat = t0
					s.Busy = make([]selection.DecayedCount, 1)
					s.QueueLen = (h + i) % 3
					all = append(all, s.ID)
				}
				co.board.SetHost(host, ss)
			}
			table := &messages.TableMeta{Name: "t", Generation: 1}
			meta := &messages.TabletMeta{Ref: &messages.TabletRef{Table: "t", Generation: 1, Index: 2, PrevEndRow: []byte("b"), EndRow: []byte("c")}}
			routed, fresh := newTabletActor(co.tabletDeps(), table, meta), newTabletActor(co.tabletDeps(), table, meta)
			// Real scans use two profiles (six cached orders), routes a third.
			flows := []*flowEntry{{profiles: profiles, profile: profiles.ForHints(nil)},
				{profiles: profiles, profile: profiles.ForHints(map[string]string{"scan_type": "other"})}}
			decide := func(ta *TabletActor, rng *rand.Rand, k int) selection.ServerID {
				ta.rng = rng
				e := flows[(k/4)%2]
				var hist []selection.Attempt
				for j := range k % 4 {
					hist = append(hist, selection.Attempt{Server: all[(k+j)%len(all)], Host: "x", Result: selection.Busy, Start: t0, End: t0, PlanIndex: j})
				}
				d, err := ta.picker(e)(t0, hist, false)
				if err != nil {
					t.Fatal(err)
				}
				return d.Server
			}
			r1, r2 := rand.New(rand.NewPCG(1, 2)), rand.New(rand.NewPCG(1, 2))
			for k := range 20 { // warm both states alike
				if a, b := decide(routed, r1, k), decide(fresh, r2, k); a != b {
					t.Fatalf("warm-up decision %d differs (%s, %s) before any route", k, a, b)
				}
			}
			for _, attempts := range [][]messages.AttemptResult{nil, {messages.AttemptResult_ATTEMPT_RESULT_BUSY},
				{messages.AttemptResult_ATTEMPT_RESULT_BUSY, messages.AttemptResult_ATTEMPT_RESULT_BUSY}} {
				for _, hints := range []map[string]string{nil, {"scan_type": "other"}, {"scan_type": "third"}} {
					if rep := routed.route(t0, &messages.RouteRequest{Table: "t", Attempts: attempts, Hints: hints}); rep.GetError() != "" {
						t.Fatalf("route: %s", rep.GetError())
					}
				}
			}
			differ := 0
			for k := range 400 {
				if a, b := decide(routed, r1, k), decide(fresh, r2, k); a != b {
					differ++
				}
			}
			if differ != 0 {
				t.Fatalf("%d of 400 decisions after routes differ from a state that never routed", differ)
			}
		})
	}
}

// Clone shares no memory with its source, whatever fields TabletState
// gains: every non-empty slice (at any depth) of a warm state's clone has
// its own backing array.
func TestTabletStateCloneSharesNothing(t *testing.T) {
	profiles, err := selection.ParseProfiles([]byte(`[{"isDefault": true, "policy": "ribbon-zone",
		"attemptPlans": [{"servers": "3", "busyTimeout": "33ms", "salt": "one"}, {"servers": "100%", "busyTimeout": "100ms"}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(100000, 0)
	var ss []*selection.ServerLoad
	for h := range 6 {
		for _, s := range servers(fmt.Sprintf("h%d", h), 3) {
			s.Zone, s.LastHeartbeat, s.Busy = fmt.Sprintf("z%d", h%2), t0, make([]selection.DecayedCount, 1)
			ss = append(ss, s)
		}
	}
	view := selection.NewLoadView(ss, profiles.Decays(), t0)
	st := &selection.TabletState{}
	rng := rand.New(rand.NewPCG(3, 4))
	for k := range 50 {
		var hist []selection.Attempt
		for j := range k % 3 {
			hist = append(hist, selection.Attempt{Server: ss[(k+j)%len(ss)].ID, Result: selection.Busy, Start: t0, End: t0})
		}
		p := profiles.ForHints(nil)
		if _, err := profiles.Policy(p).Select(&selection.Input{Tablet: selection.Tablet{Table: "t", EndRow: []byte("m")}, Profile: p,
			Attempts: hist, View: view, Now: t0, Rand: rng, State: st, Explain: k%2 == 0}); err != nil {
			t.Fatal(err)
		}
	}
	c := st.Clone()
	slices := 0
	var walk func(path string, a, b reflect.Value)
	walk = func(path string, a, b reflect.Value) {
		switch a.Kind() {
		case reflect.Struct:
			for i := range a.NumField() {
				walk(path+"."+a.Type().Field(i).Name, a.Field(i), b.Field(i))
			}
		case reflect.Array:
			for i := range a.Len() {
				walk(fmt.Sprintf("%s[%d]", path, i), a.Index(i), b.Index(i))
			}
		case reflect.Slice:
			if a.Cap() > 0 && b.Cap() > 0 {
				slices++
				if a.Pointer() == b.Pointer() {
					t.Errorf("%s: the clone shares the slice's backing array", path)
				}
			}
		case reflect.Pointer, reflect.Map:
			if !a.IsNil() && a.Pointer() == b.Pointer() {
				t.Errorf("%s: the clone shares a %s", path, a.Kind())
			}
		}
	}
	walk("TabletState", reflect.ValueOf(st).Elem(), reflect.ValueOf(c).Elem())
	if slices < 5 {
		t.Fatalf("only %d non-empty slices checked: the state was not warmed up", slices)
	}
}
