package scanserver

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/scanplane/scanplane/tablets"
)

// FaultConfig is test and load-test fault injection for scan servers. The
// zero value injects nothing.
type FaultConfig struct {
	// PauseFor and PauseEvery: the server stops serving for PauseFor at the
	// start of every PauseEvery period, like a stop-the-world GC pause:
	// its actor does not process messages and its workers neither read
	// blocks nor send batches. Both 0 = off.
	PauseFor   time.Duration
	PauseEvery time.Duration
	// SlowFactor > 1 makes every block read take SlowFactor× longer: after
	// a read that took d, the reader waits (SlowFactor−1)×max(d, SlowFloor).
	// The floor keeps a slow disk slow even when the block is cached.
	SlowFactor float64
	// SlowFloor: minimum base read time for SlowFactor (default 500µs).
	SlowFloor time.Duration
	// Lie makes the server answer its scans falsely, one lie per scan in
	// turn (ParseLie): a lying scan server, for attack tests. The block
	// proofs it sends stay the honest ones.
	Lie []Lie
}

// Lie is one way a lying scan server answers a scan.
type Lie string

// The lies of FaultConfig.Lie.
const (
	LieForge   Lie = "forge"   // the first row of each batch gets the value "EVIL"
	LieDrop    Lie = "drop"    // the second row of each batch is left out
	LieAdd     Lie = "add"     // a made-up row follows the first row of each batch
	LieEmpty   Lie = "empty"   // the scan succeeds with no row and no proof
	LieCorrupt Lie = "corrupt" // the scan fails with CORRUPT_BLOCK
	// LieCount: a count-only scan leaves out the proof of its first
	// counted block (a count short by that block's rows); other scans
	// are answered honestly.
	LieCount Lie = "count"
)

// ParseLie parses a comma-separated list of lies, e.g. "forge,empty".
func ParseLie(s string) ([]Lie, error) {
	var out []Lie
	for _, m := range strings.Split(s, ",") {
		switch l := Lie(strings.TrimSpace(m)); l {
		case LieForge, LieDrop, LieAdd, LieEmpty, LieCorrupt, LieCount:
			out = append(out, l)
		default:
			return nil, fmt.Errorf("fault lie %q: want a comma-separated list of forge, drop, add, empty, corrupt, count", m)
		}
	}
	return out, nil
}

// Validate checks the fault config.
func (f FaultConfig) Validate() error {
	if (f.PauseFor > 0) != (f.PauseEvery > 0) {
		return fmt.Errorf("scanserver: fault pause needs both duration and period, got %v/%v", f.PauseFor, f.PauseEvery)
	}
	if f.PauseFor < 0 || f.PauseEvery < 0 {
		return fmt.Errorf("scanserver: fault pause must not be negative")
	}
	if f.PauseEvery > 0 && f.PauseFor >= f.PauseEvery {
		return fmt.Errorf("scanserver: fault pause %v must be shorter than its period %v", f.PauseFor, f.PauseEvery)
	}
	if f.SlowFactor != 0 && f.SlowFactor < 1 {
		return fmt.Errorf("scanserver: fault slow factor %v must be >= 1", f.SlowFactor)
	}
	if f.SlowFloor < 0 {
		return fmt.Errorf("scanserver: fault slow floor must not be negative")
	}
	return nil
}

// ParsePause parses "DUR/EVERY", e.g. "150ms/1s".
func ParsePause(s string) (pauseFor, every time.Duration, err error) {
	a, b, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, fmt.Errorf("fault pause %q: want DUR/EVERY, e.g. 150ms/1s", s)
	}
	if pauseFor, err = time.ParseDuration(a); err != nil {
		return 0, 0, fmt.Errorf("fault pause %q: duration: %v", s, err)
	}
	if every, err = time.ParseDuration(b); err != nil {
		return 0, 0, fmt.Errorf("fault pause %q: period: %v", s, err)
	}
	f := FaultConfig{PauseFor: pauseFor, PauseEvery: every}
	if pauseFor <= 0 || every <= 0 {
		return 0, 0, fmt.Errorf("fault pause %q: both must be > 0", s)
	}
	return pauseFor, every, f.Validate()
}

// ParseSlow parses a slow factor like "10" or "2.5".
func ParseSlow(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 1 {
		return 0, fmt.Errorf("fault slow %q: want a factor >= 1", s)
	}
	return f, nil
}

// pauseGate blocks callers during pause windows.
type pauseGate struct {
	pauseFor, every time.Duration
	origin          time.Time
}

func newPauseGate(f FaultConfig, origin time.Time) *pauseGate {
	if f.PauseFor <= 0 || f.PauseEvery <= 0 {
		return nil
	}
	return &pauseGate{pauseFor: f.PauseFor, every: f.PauseEvery, origin: origin}
}

// remaining is how long the pause in force at now lasts (0 = not paused).
func (g *pauseGate) remaining(now time.Time) time.Duration {
	if g == nil {
		return 0
	}
	phase := now.Sub(g.origin) % g.every
	if phase < g.pauseFor {
		return g.pauseFor - phase
	}
	return 0
}

// wait blocks while paused (or until ctx is done).
func (g *pauseGate) wait(ctx context.Context) {
	if g == nil {
		return
	}
	for {
		d := g.remaining(time.Now())
		if d <= 0 {
			return
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// faultyFetcher applies pauses and slowness to block reads.
type faultyFetcher struct {
	inner  tablets.BlockFetcher
	gate   *pauseGate
	factor float64
	floor  time.Duration
}

func (f *faultyFetcher) FetchBlock(ctx context.Context, key string) ([]byte, bool, error) {
	f.gate.wait(ctx)
	start := time.Now()
	data, cached, err := f.inner.FetchBlock(ctx, key)
	f.slow(ctx, start)
	return data, cached, err
}

// FetchDecoded implements tablets.DecodingFetcher with the same faults.
func (f *faultyFetcher) FetchDecoded(ctx context.Context, key string, decode func([]byte) (any, int64, error)) (any, bool, error) {
	f.gate.wait(ctx)
	start := time.Now()
	v, cached, err := tablets.FetchDecoded(ctx, f.inner, key, decode)
	f.slow(ctx, start)
	return v, cached, err
}

// slow stretches a read that began at start by the slowness factor.
func (f *faultyFetcher) slow(ctx context.Context, start time.Time) {
	if f.factor > 1 {
		d := time.Since(start)
		if d < f.floor {
			d = f.floor
		}
		extra := time.Duration(float64(d) * (f.factor - 1))
		t := time.NewTimer(extra)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}
