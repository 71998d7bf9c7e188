package sim

import (
	"cmp"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	flagSeeds = flag.Int("sim.seeds", 0, "how many seeds TestSim runs (0: 2000, 150 under the race detector or -short)")
	flagFrom  = flag.Uint64("sim.from", 1, "the first seed TestSim runs")
	flagSeed  = flag.Int64("sim.seed", -1, "replay this one seed and print its full trace")
)

func replayCommand(seed uint64) string {
	return fmt.Sprintf("go test ./internal/sim -run 'TestSim$' -sim.seed=%d -v", seed)
}

// TestSim runs the seeds and checks every property on each (see
// check.go); a failing seed is run again with its trace, which must fail
// the same way (the run is deterministic).
func TestSim(t *testing.T) {
	if *flagSeed >= 0 {
		seed := uint64(*flagSeed)
		res, err := Run(ConfigFor(seed), true)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("seed %d, config %+v\n%s\n%s", seed, ConfigFor(seed), res.Trace, res.Stats)
		for _, p := range res.Problems {
			t.Errorf("seed %d: %s", seed, p)
		}
		return
	}
	start := time.Now()
	seeds := make(chan uint64)
	type failure struct {
		seed     uint64
		problems []string
	}
	var (
		mu       sync.Mutex
		total    Stats
		failures []failure
	)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for seed := range seeds {
				res, err := Run(ConfigFor(seed), false)
				if err != nil {
					t.Errorf("seed %d: %v", seed, err)
					continue
				}
				mu.Lock()
				total.add(res.Stats)
				if len(res.Problems) > 0 {
					failures = append(failures, failure{seed, res.Problems})
				}
				mu.Unlock()
			}
		})
	}
	n := *flagSeeds
	if n <= 0 {
		n = 2000
		if raceEnabled || testing.Short() {
			n = 150
		}
	}
	for i := range n {
		seeds <- *flagFrom + uint64(i)
	}
	close(seeds)
	wg.Wait()
	slices.SortFunc(failures, func(a, b failure) int { return cmp.Compare(a.seed, b.seed) })
	t.Logf("seeds %d..%d in %v: %s", *flagFrom, *flagFrom+uint64(n)-1, time.Since(start).Round(time.Millisecond), total)
	for i, f := range failures {
		if i >= 3 {
			t.Errorf("seed %d fails (replay: %s): %s", f.seed, replayCommand(f.seed), strings.Join(f.problems, "; "))
			continue
		}
		again, err := Run(ConfigFor(f.seed), true)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(again.Problems, f.problems) {
			t.Errorf("seed %d is not deterministic: first run %q, traced run %q", f.seed, f.problems, again.Problems)
		}
		t.Errorf("seed %d fails (replay: %s):\n  %s\ntrace (last 150 lines):\n%s", f.seed, replayCommand(f.seed),
			strings.Join(f.problems, "\n  "), tail(again.Trace, 150))
	}
	if n >= 2000 {
		// Enough seeds that every fault and every path between the
		// coordinators happens: a harness that stops making one would
		// pass without testing it.
		for _, k := range []string{"kill", "pause", "lease expired while dead", "lease expired while paused", "reload", "router panic",
			"tablet panic", "scan server panic", "skewed run", "coordinator silent to a client"} {
			if total.Kinds[k] == 0 {
				t.Errorf("no %q in %d seeds", k, n)
			}
		}
		for what, v := range map[string]uint64{"forwarded request": total.Forwarded,
			"request rerouted from a stopped tablet actor": total.Rerouted, "direct request": total.Direct, "actor failure": total.ActorFailures} {
			if v == 0 {
				t.Errorf("no %s in %d seeds", what, n)
			}
		}
	}
	if live := total.Scans - total.Abandoned; live > 0 && total.OK*10 < live*7 {
		t.Errorf("only %d of %d scans completed: the fault mix is too harsh for the runs to say much", total.OK, live)
	}
}

// TestSameSeedSameTrace runs seeds of every class twice, traced, first
// all at once and then one by one, and compares the traces' hashes: a run
// depends on its seed alone, not on the runs beside it or before it.
func TestSameSeedSameTrace(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	first := make([]*Result, len(seeds))
	var wg sync.WaitGroup
	for i, seed := range seeds {
		wg.Go(func() {
			res, err := Run(ConfigFor(seed), true)
			if err != nil {
				t.Error(err)
				return
			}
			first[i] = res
		})
	}
	wg.Wait()
	for i, seed := range seeds {
		a := first[i]
		if a == nil {
			t.FailNow()
		}
		b, err := Run(ConfigFor(seed), true)
		if err != nil {
			t.Fatal(err)
		}
		if a.TraceHash != b.TraceHash {
			t.Fatalf("seed %d: trace hashes %x and %x differ; first difference:\n%s", seed, a.TraceHash, b.TraceHash, firstDiff(a.Trace, b.Trace))
		}
	}
}

func firstDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return fmt.Sprintf("line %d:\n  %s\n  %s", i+1, la[i], lb[i])
		}
	}
	return fmt.Sprintf("one trace has %d lines, the other %d", len(la), len(lb))
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... %d lines before", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// TestForwardsToADeadOwner kills a coordinator while clients send their
// requests to another, which forwards those of the dead one's tablets to
// it until its lease expires: the forwards come back as dead letters and
// the forwarding coordinator routes them again, and every scan still gets
// exactly its rows or a named error.
func TestForwardsToADeadOwner(t *testing.T) {
	var total Stats
	seeds := uint64(150)
	if testing.Short() {
		seeds = 30
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		cfg := ConfigFor(seed)
		cfg.Coordinators, cfg.Clients, cfg.ScansPerClient = 3, 2, 4
		cfg.Net = NetFaults{MinDelay: cfg.Net.MinDelay, MaxDelay: cfg.Net.MaxDelay, LateMax: cfg.Net.LateMax}
		cfg.Faults = ProcFaults{CoordKills: 1, Window: cfg.ScanStartMax, RestartMin: time.Second, RestartMax: 5 * time.Second,
			DetectMax: cfg.Faults.DetectMax, LeaseTTL: cfg.Faults.LeaseTTL}
		res, err := run(cfg, false, mutations{client: func(c *clientProc) { c.byOwner = false }})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range res.Problems {
			t.Errorf("seed %d: %s (replay with its trace: adapt this test to run it traced)", seed, p)
		}
		total.add(res.Stats)
	}
	if total.Reforwarded == 0 {
		t.Fatalf("no request was forwarded to a dead owner: %s", total)
	}
	t.Logf("%s", total)
}
