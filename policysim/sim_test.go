package policysim

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func small(t testing.TB) Config {
	t.Helper()
	cs, err := Presets("small")
	if err != nil {
		t.Fatal(err)
	}
	return cs[0]
}

func run(t testing.TB, cfg Config, policy string) *Result {
	t.Helper()
	doc, err := ProfilesJSON(policy, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(cfg, policy, doc)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDeterministic: the same seed gives the same latencies, another seed
// other ones.
func TestDeterministic(t *testing.T) {
	cfg := small(t)
	cfg.Requests = 5000
	for _, p := range []string{"adaptive", "prequal"} {
		a, b := run(t, cfg, p), run(t, cfg, p)
		if !slices.Equal(a.Latencies, b.Latencies) || a.Events != b.Events {
			t.Errorf("%s: two runs with seed %d differ: %d and %d events", p, cfg.Seed, a.Events, b.Events)
		}
		cfg2 := cfg
		cfg2.Seed++
		if c := run(t, cfg2, p); slices.Equal(a.Latencies, c.Latencies) {
			t.Errorf("%s: seeds %d and %d give the same latencies", p, cfg.Seed, cfg2.Seed)
		}
	}
}

// TestConservation: every request that arrives completes exactly once
// (Run panics on a second completion), counted ones with data or failed,
// also when a server hangs and its attempts time out, stall or are lost.
func TestConservation(t *testing.T) {
	for _, fault := range []Fault{FaultNone, FaultHung} {
		for _, p := range []string{"adaptive", "bookkeeper", "random"} {
			cfg := small(t)
			cfg.Requests, cfg.Fault = 8000, fault
			r := run(t, cfg, p)
			if r.Completions != r.Arrivals || r.Completed+r.Failed != r.Requests || len(r.Latencies) != r.Completed ||
				r.Requests != cfg.Requests {
				t.Errorf("%s %q: %d arrivals, %d completions; %d measured = %d completed + %d failed; %d latencies",
					p, fault, r.Arrivals, r.Completions, r.Requests, r.Completed, r.Failed, len(r.Latencies))
			}
			if r.Failed > 0 {
				t.Errorf("%s %q: %d of %d requests failed; a replica was always left", p, fault, r.Failed, r.Requests)
			}
			if fault == FaultHung && r.Timeouts == 0 {
				t.Errorf("%s: a hung server caused no busy timeout", p)
			}
		}
	}
}

// TestSingleServerIsMM1 compares one server with one worker, exponential
// service and Poisson arrivals, no network, with the M/M/1 queue: the
// response time is exponential with rate μ − λ.
func TestSingleServerIsMM1(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Clients, cfg.Servers, cfg.Workers, cfg.Replication, cfg.Keys = 1, 1, 1, 1, 1
	cfg.RateSwitch, cfg.OneWay, cfg.ServiceMean = 0, 0, time.Millisecond
	cfg.Utilization, cfg.Requests, cfg.Warmup = 0.5, 100000, time.Second
	r := run(t, cfg, "random")
	rate := (1 - cfg.Utilization) / cfg.ServiceMean.Seconds() // μ − λ per second
	for _, q := range []float64{0.5, 0.9, 0.99} {
		want := -math.Log(1-q) / rate * 1000
		got := float64(r.Quantile(q).Microseconds()) / 1000
		if math.Abs(got-want)/want > 0.07 {
			t.Errorf("p%g = %.3f ms, M/M/1 says %.3f ms", q*100, got, want)
		}
	}
}

// TestRandomLosesToLeastOutstanding: with rates switching between μ and
// 3μ, counting outstanding requests finds the fast replicas and random
// does not (a simulator in which they tie models no queues).
func TestRandomLosesToLeastOutstanding(t *testing.T) {
	cfg := small(t)
	cfg.Utilization = 0.7
	rnd, lo := run(t, cfg, "random"), run(t, cfg, LeastOutstanding)
	if rp, lp := rnd.Quantile(0.99), lo.Quantile(0.99); rp < lp*3/2 {
		t.Errorf("p99: random %v, least-outstanding %v; want random at least 1.5× worse", rp, lp)
	}
}

func TestValidateNamesTheValue(t *testing.T) {
	for _, tc := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.Servers = 0 }, "Servers 0"},
		{func(c *Config) { c.ServersPerHost = 7 }, "ServersPerHost 7"},
		{func(c *Config) { c.Utilization = 1.5 }, "Utilization 1.5"},
		{func(c *Config) { c.Replication = 51 }, "Replication 51"},
		{func(c *Config) { c.Fault = "melted" }, `Fault "melted"`},
		{func(c *Config) { c.Fault = FaultSlowHost }, "ServersPerHost >= 2"},
		{func(c *Config) { c.Flow.MaxAttempts = 0 }, "MaxAttempts"},
	} {
		c := DefaultConfig()
		tc.set(&c)
		err := c.Validate()
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want ErrBadConfig naming %q", err, tc.want)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

func TestProfilesJSONOptions(t *testing.T) {
	cfg := DefaultConfig()
	if _, err := ProfilesJSON("adaptive:spillCost=0+hedgeBudget=0.1", cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := ProfilesJSON("adaptive:spillCost", cfg); err == nil || !strings.Contains(err.Error(), `"spillCost"`) {
		t.Errorf("option without value: %v", err)
	}
	if _, err := ProfilesJSON("adaptive:noSuchOption=1", cfg); err == nil {
		t.Error("unknown option accepted")
	}
	if !KnownPolicy("least-outstanding") || !KnownPolicy("c3:c3Clients=2") || KnownPolicy("fastest") {
		t.Error("KnownPolicy")
	}
}

func BenchmarkSmall(b *testing.B) {
	cfg := small(b)
	for b.Loop() {
		run(b, cfg, "adaptive")
	}
}

func BenchmarkScale1000(b *testing.B) {
	cs, err := Presets("scale")
	if err != nil {
		b.Fatal(err)
	}
	cfg := cs[2]
	cfg.Requests, cfg.Warmup = 20000, 100*time.Millisecond
	for b.Loop() {
		run(b, cfg, "adaptive")
	}
}

// TestLoadtestPreset: in the load tester's setting with a slow host, the
// policies that read load (c3, adaptive) keep the tail off the slow host's
// servers and random does not, as on the load tester's real processes.
func TestLoadtestPreset(t *testing.T) {
	cs, err := Presets("loadtest")
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || cs[1].Fault != FaultSlowHost || cs[1].Servers != 6 || cs[1].Servers/cs[1].ServersPerHost != 3 {
		t.Fatalf("loadtest preset: %+v", cs)
	}
	cfg := cs[1]
	cfg.Requests = 20000
	rnd := run(t, cfg, "random").Quantile(0.99)
	for _, p := range []string{"c3", "adaptive"} {
		if got := run(t, cfg, p).Quantile(0.99); got*2 > rnd {
			t.Errorf("slow host: %s p99 %v, random %v; want %s at least 2× lower", p, got, rnd, p)
		}
	}
}
