package loadtest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/scanserver"
	"github.com/scanplane/scanplane/selection"
)

func TestConfigValidate(t *testing.T) {
	for name, c := range map[string]Config{"default": DefaultConfig(), "quick": QuickConfig()} {
		if err := c.Validate(); err != nil {
			t.Errorf("%s config: %v", name, err)
		}
	}
	cases := []struct {
		field string
		edit  func(*Config)
	}{
		{"Hosts", func(c *Config) { c.Hosts = 0 }},
		{"ServersPerHost", func(c *Config) { c.ServersPerHost = -1 }},
		{"Zones", func(c *Config) { c.Zones = 5 }},
		{"Coordinator", func(c *Config) { c.Coordinator = "127.0.0.1:1" }},
		{"Table", func(c *Config) { c.Table = "bad table" }},
		{"Rows", func(c *Config) { c.Rows = 0 }},
		{"Tablets", func(c *Config) { c.Tablets = c.Rows + 1 }},
		{"Clients", func(c *Config) { c.Clients = 0 }},
		{"Rate", func(c *Config) { c.Rate = -1 }},
		{"Zipf", func(c *Config) { c.Zipf = 1 }},
		{"ScanRows", func(c *Config) { c.ScanRows = 0 }},
		{"FullTablet", func(c *Config) { c.FullTablet = 1.5 }},
		{"Duration", func(c *Config) { c.Duration = 0 }},
		{"Warmup", func(c *Config) { c.Warmup = -time.Second }},
		{"Faults", func(c *Config) { c.Faults = nil }},
		{"Faults", func(c *Config) { c.Faults = []string{"slow-disk"} }},
		{"Faults", func(c *Config) { c.Faults = []string{"none", "none"} }},
		{"FaultHost", func(c *Config) { c.FaultHost = c.Hosts }},
		{"Coordinators", func(c *Config) { c.Coordinators = 10 }},
		{"Coordinators", func(c *Config) { c.Coordinators, c.Faults = 1, []string{FaultCrashCoordinator} }},
		{"Coordinators", func(c *Config) {
			c.NATS, c.Policies, c.Coordinators = "nats://127.0.0.1:4222", []string{PolicyCurrent}, 3
		}},
		{"FaultCoordinator", func(c *Config) { c.Coordinators, c.FaultCoordinator = 3, 3 }},
		{"FaultCoordinator", func(c *Config) { c.FaultCoordinator = 1 }}, // one coordinator (auto, no coordinator fault)
		{"Faults", func(c *Config) {
			c.NATS, c.Policies, c.Faults = "nats://127.0.0.1:4222", []string{PolicyCurrent}, []string{FaultHungCoordinator}
		}},
		{"FaultAfter", func(c *Config) { c.FaultAfter, c.FaultFor = c.Duration, time.Second }},
		{"SlowPause", func(c *Config) { c.SlowPause = "1s/150ms" }},
		{"SlowFactor", func(c *Config) { c.SlowFactor = 0.5 }},
		{"HotShare", func(c *Config) { c.HotShare = 2 }},
		{"HotTablet", func(c *Config) { c.HotTablet = c.Tablets }},
		{"Workers", func(c *Config) { c.Workers = 0 }},
		{"Workers", func(c *Config) { c.Workers, c.Faults = 1, []string{FaultHeterogeneous} }},
		{"Faults", func(c *Config) { c.Faults = []string{"heterogenous"} }},
		{"Faults", func(c *Config) { c.Faults = []string{FaultNone, FaultAntagonist + "+antagonists"} }},
		{"Faults", func(c *Config) {
			c.NATS, c.Policies, c.Faults = "nats://127.0.0.1:4222", []string{PolicyCurrent}, []string{FaultAntagonist}
		}},
		{"Faults", func(c *Config) {
			c.NATS, c.Policies, c.Faults = "nats://127.0.0.1:4222", []string{PolicyCurrent}, []string{FaultHeterogeneous}
		}},
		{"AntagonistThreads", func(c *Config) { c.AntagonistThreads = 0 }},
		{"AntagonistThreads", func(c *Config) { c.AntagonistThreads = 65 }},
		{"AntagonistCPU", func(c *Config) { c.AntagonistCPU = -2 }},
		{"AntagonistCPU", func(c *Config) { c.AntagonistCPU = 1024 }},
		{"AntagonistCPU", func(c *Config) { c.AntagonistCPU, c.Faults = 1023, []string{FaultAntagonist} }}, // not ours
		{"Policies", func(c *Config) { c.Policies = nil }},
		{"Policies", func(c *Config) { c.Policies = []string{"fastest"} }},
		{"Policies", func(c *Config) { c.Policies = []string{"random:hedge"} }},
		{"Policies", func(c *Config) { c.Policies = []string{"adaptive", "adaptive"} }},
		{"Policies", func(c *Config) { c.Policies = []string{PolicyCurrent} }},
		{"ProfilesFile", func(c *Config) { c.NATS, c.Faults = "nats://127.0.0.1:4222", []string{"none"} }},
		{"Faults", func(c *Config) { c.NATS, c.Policies = "nats://127.0.0.1:4222", []string{PolicyCurrent} }},
	}
	for _, tc := range cases {
		c := DefaultConfig()
		tc.edit(&c)
		err := c.Validate()
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: Validate = %v, want an ErrBadConfig naming %s", tc.field, err, tc.field)
		}
	}
	c := DefaultConfig()
	c.NATS, c.Policies, c.Faults = "nats://127.0.0.1:4222", []string{PolicyCurrent}, []string{"none", "hot-tablet"}
	if err := c.Validate(); err != nil {
		t.Errorf("running cluster with current profiles: %v", err)
	}
}

// TestCoordinatorsAuto: Coordinators 0 means 3 when a fault spec hits a
// coordinator, else 1; an explicit count stays.
func TestCoordinatorsAuto(t *testing.T) {
	c := DefaultConfig()
	if got := c.coordinators(); got != 1 {
		t.Errorf("default faults: %d coordinators, want 1", got)
	}
	c.Faults = []string{FaultNone, "hot-tablet+" + FaultHungCoordinator}
	if got := c.coordinators(); got != 3 {
		t.Errorf("faults %v: %d coordinators, want 3", c.Faults, got)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("faults %v: %v", c.Faults, err)
	}
	c.Coordinators = 2
	if got := c.coordinators(); got != 2 {
		t.Errorf("explicit 2: %d coordinators", got)
	}
}

// TestNewFaultsConfig: heterogeneous and antagonist parse, alone and
// combined; a CPU outside ours is refused only when the antagonist fault
// is asked for; the default comparison covers every policy and fault of
// DefaultPolicies and DefaultFaults while --quick stays small.
func TestNewFaultsConfig(t *testing.T) {
	for spec, want := range map[string]string{
		"heterogeneous":                  "heterogeneous",
		"antagonist":                     "antagonist",
		"antagonist+hung-server":         "antagonist+hung-server",
		" heterogeneous + antagonist ":   "antagonist+heterogeneous",
		"none+heterogeneous+slow-server": "heterogeneous+slow-server",
	} {
		kinds, err := ParseFault(spec)
		if err != nil || strings.Join(kinds, "+") != want {
			t.Errorf("ParseFault(%q) = %v, %v; want %s", spec, kinds, err, want)
		}
	}
	for _, k := range []string{FaultHeterogeneous, FaultAntagonist} {
		if !slices.Contains(FaultNames(), k) || !slices.Contains(processFaults, k) {
			t.Errorf("%s: not in FaultNames or processFaults", k)
		}
	}
	if !slices.Contains(flagFaults, FaultHeterogeneous) || !slices.Contains(timedFaults, FaultAntagonist) {
		t.Error("heterogeneous must be a flag fault (the whole phase), antagonist a timed one (the fault window)")
	}
	c := DefaultConfig()
	c.Faults, c.AntagonistCPU = []string{FaultNone, FaultHeterogeneous}, 1023
	if err := c.Validate(); err != nil {
		t.Errorf("AntagonistCPU without the antagonist fault: %v", err)
	}
	c.Faults, c.AntagonistCPU, c.Workers = []string{FaultHeterogeneous + "+" + FaultAntagonist}, 0, 2
	if err := c.Validate(); err != nil {
		t.Errorf("heterogeneous+antagonist, Workers 2, CPU 0: %v", err)
	}

	d := DefaultConfig()
	for _, p := range []string{"random", "accumulo-host", "bookkeeper", "clickhouse-random", "ribbon-zone", "peak-ewma", "c3", "adaptive"} {
		if !slices.Contains(d.Policies, p) {
			t.Errorf("default policies %v lack %s", d.Policies, p)
		}
	}
	if slices.Contains(d.Policies, "prequal") != slices.Contains(selection.PolicyNames(), "prequal") {
		t.Errorf("default policies %v: prequal in them iff selection knows it", d.Policies)
	}
	if d.Policies[len(d.Policies)-1] != selection.PolicyAdaptive {
		t.Errorf("default policies %v: adaptive is not last", d.Policies)
	}
	for _, f := range []string{"none", "slow-server", "hung-server", "slow-host", "antagonist", "heterogeneous"} {
		if !slices.Contains(d.Faults, f) {
			t.Errorf("default faults %v lack %s", d.Faults, f)
		}
	}
	q := QuickConfig()
	if phases := len(q.Policies) * len(q.Faults); phases > 2 || q.Duration+q.Warmup > 5*time.Second {
		t.Errorf("quick config: %d phases of %v: too long for 30 s", phases, q.Duration+q.Warmup)
	}
}

// TestHostArgsWorkers: every host gets --workers Workers; under
// heterogeneous the fault host gets half.
func TestHostArgsWorkers(t *testing.T) {
	workers := func(args []string) string {
		i := slices.Index(args, "--workers")
		if i < 0 || i+1 >= len(args) {
			return ""
		}
		return args[i+1]
	}
	cfg := DefaultConfig()
	cfg.FaultHost = 1
	tg := &target{cfg: cfg, cacheBytes: 1 << 20}
	for i := range cfg.Hosts {
		if w := workers(tg.hostArgs(i)); w != "4" {
			t.Errorf("no fault: host %d --workers %q, want 4", i, w)
		}
	}
	tg.flagFaults = []string{FaultHeterogeneous}
	for i := range cfg.Hosts {
		want := "4"
		if i == cfg.FaultHost {
			want = "2"
		}
		if w := workers(tg.hostArgs(i)); w != want {
			t.Errorf("heterogeneous: host %d --workers %q, want %s", i, w, want)
		}
	}
	tg.cfg.Workers = 5
	if w := workers(tg.hostArgs(cfg.FaultHost)); w != "2" {
		t.Errorf("heterogeneous, Workers 5: fault host --workers %q, want 2", w)
	}
	// Workers' default is the scanserver's own.
	if def := scanserver.DefaultHostAgentConfig().Server.Workers; cfg.Workers != def {
		t.Errorf("DefaultConfig().Workers %d, scanserver default %d", cfg.Workers, def)
	}
}

func TestParseFaultAndPolicy(t *testing.T) {
	kinds, err := ParseFault("slow-server+hot-tablet+none")
	if err != nil || strings.Join(kinds, "+") != "hot-tablet+slow-server" {
		t.Errorf("ParseFault = %v, %v", kinds, err)
	}
	if _, err := ParseFault("slow-server+bogus"); err == nil {
		t.Error("unknown fault kind accepted")
	}
	for spec, want := range map[string]PolicySpec{
		"clickhouse-random":            {Label: "clickhouse-random", Policy: "clickhouse-random", Hedge: true},
		"clickhouse-random:nohedge":    {Label: "clickhouse-random:nohedge", Policy: "clickhouse-random"},
		"adaptive":                     {Label: "adaptive", Policy: "adaptive", Hedge: true},
		"random":                       {Label: "random", Policy: "random"},
		"adaptive:cacheAffinity=false": {Label: "adaptive:cacheAffinity=false", Policy: "adaptive", Hedge: true, Options: "cacheAffinity=false"},
		"c3:c3Clients=4":               {Label: "c3:c3Clients=4", Policy: "c3", Options: "c3Clients=4"},
	} {
		if got, err := ParsePolicy(spec); err != nil || got != want {
			t.Errorf("ParsePolicy(%q) = %+v, %v; want %+v", spec, got, err, want)
		}
	}
	for spec, want := range map[string]string{
		"adaptive:bogus=1":           "bogus",
		"random:cacheAffinity=false": "cacheAffinity",
		"adaptive:homeBand=x":        "homeBand",
		"adaptive:=1":                "not name=value",
		"adaptive:sometimes":         "suffix must be",
	} {
		if _, err := ParsePolicy(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParsePolicy(%q) = %v; want an error naming %q", spec, err, want)
		}
	}
	ps, err := ParsePolicy("adaptive:cacheAffinity=false+hedgeBudget=0.1")
	if err != nil {
		t.Fatal(err)
	}
	data, err := ProfilesJSON(ps, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"cacheAffinity": false`) || !strings.Contains(string(data), `"hedgeBudget": 0.1`) {
		t.Errorf("profiles for %s lack its options:\n%s", ps.Label, data)
	}
}

// TestProfilesJSON: every policy's generated profiles document parses, and
// hedging is on where asked.
func TestProfilesJSON(t *testing.T) {
	for _, name := range selection.PolicyNames() {
		ps, err := ParsePolicy(name)
		if err != nil {
			t.Fatal(err)
		}
		data, err := ProfilesJSON(ps, 2)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		profs, err := selection.ParseProfiles(data)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !summaryHasPolicy(strings.Join(profs.Summary(), "\n"), name) {
			t.Errorf("%s: summary %q does not name the policy", name, profs.Summary())
		}
		if strings.Contains(string(data), `"hedge": true`) != hedgeable(name) {
			t.Errorf("%s: hedge option wrong in\n%s", name, data)
		}
	}
}
