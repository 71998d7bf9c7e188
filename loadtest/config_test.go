package loadtest

import (
	"errors"
	"strings"
	"testing"
	"time"

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

func TestParseFaultAndPolicy(t *testing.T) {
	kinds, err := ParseFault("slow-server+hot-tablet+none")
	if err != nil || strings.Join(kinds, "+") != "hot-tablet+slow-server" {
		t.Errorf("ParseFault = %v, %v", kinds, err)
	}
	if _, err := ParseFault("slow-server+bogus"); err == nil {
		t.Error("unknown fault kind accepted")
	}
	for spec, want := range map[string]PolicySpec{
		"clickhouse-random":         {Label: "clickhouse-random", Policy: "clickhouse-random", Hedge: true},
		"clickhouse-random:nohedge": {Label: "clickhouse-random:nohedge", Policy: "clickhouse-random"},
		"adaptive":                  {Label: "adaptive", Policy: "adaptive", Hedge: true},
		"random":                    {Label: "random", Policy: "random"},
	} {
		if got, err := ParsePolicy(spec); err != nil || got != want {
			t.Errorf("ParsePolicy(%q) = %+v, %v; want %+v", spec, got, err, want)
		}
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
