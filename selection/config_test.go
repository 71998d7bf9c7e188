package selection

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	good := map[string]time.Duration{
		"33ms": 33 * time.Millisecond, "5m": 5 * time.Minute, "2h": 2 * time.Hour, "36500d": 36500 * 24 * time.Hour,
		"10": 10 * time.Second, "10s": 10 * time.Second, "0": 0, "0ms": 0,
	}
	for in, want := range good {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "ms", "1.5s", "1.5", "-1s", "+1s", "1 s", "1S", "1us", "1w", "abc", "99999999999999999999d", "300000d"} {
		if _, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) accepted", in)
		}
	}
	if _, err := ParseDuration("1.5s"); err == nil || !strings.Contains(err.Error(), "decimals") {
		t.Errorf("decimal error should say so: %v", err)
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "0s", 33 * time.Millisecond: "33ms", 5 * time.Minute: "5m",
		36500 * 24 * time.Hour: "36500d", 90 * time.Second: "90s", 1500 * time.Microsecond: "1.5ms"} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestServerCount(t *testing.T) {
	cases := []struct {
		in    string
		total int
		want  int
	}{
		{"3", 10, 3}, {"3", 2, 2}, {"13", 13, 13}, {"100%", 7, 7}, {"50%", 7, 4}, {"50%", 5, 3},
		{"1%", 10, 1}, {"10%", 4, 1}, {"25%", 10, 3}, {"3", 0, 0}, {"100%", 0, 0}, {"33%", 1000, 330},
	}
	for _, c := range cases {
		sc, err := ParseServerCount(c.in)
		if err != nil {
			t.Fatalf("%q: %v", c.in, err)
		}
		if got := sc.Count(c.total); got != c.want {
			t.Errorf("%q of %d = %d, want %d", c.in, c.total, got, c.want)
		}
		if sc.String() != c.in {
			t.Errorf("String %q != %q", sc.String(), c.in)
		}
	}
	for _, in := range []string{"0", "-1", "0%", "101%", "1.5", "", "%", "a", " 3", "3 "} {
		if _, err := ParseServerCount(in); err == nil {
			t.Errorf("ParseServerCount(%q) accepted", in)
		}
	}
}

func TestParseAccumuloDefaultUnchanged(t *testing.T) {
	ps, err := ParseProfiles([]byte(DefaultProfilesJSON))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps.List) != 1 {
		t.Fatalf("profiles %d", len(ps.List))
	}
	p := ps.List[0]
	if p.Name != "default" || !p.IsDefault || p.Group != "default" || p.Policy != "accumulo" ||
		p.MaxBusyTimeout != 5*time.Minute || p.BusyTimeoutMultiplier != 8 ||
		p.TimeToWaitForScanServers != 36500*24*time.Hour || len(p.AttemptPlans) != 3 {
		t.Fatalf("bad profile %+v", p)
	}
	for i, want := range defaultPlans {
		if p.AttemptPlans[i] != want {
			t.Errorf("plan %d = %+v want %+v", i, p.AttemptPlans[i], want)
		}
	}
	if _, ok := ps.Policy(p).(accumuloPolicy); !ok {
		t.Errorf("policy %T", ps.Policy(p))
	}
	// DefaultProfiles is the same document with policy accumulo-host.
	d := DefaultProfiles().List[0]
	if d.Policy != PolicyAccumuloHost || d.MaxBusyTimeout != p.MaxBusyTimeout || d.BusyTimeoutMultiplier != 8 ||
		d.TimeToWaitForScanServers != p.TimeToWaitForScanServers || d.Name != "default" || d.Group != "default" {
		t.Errorf("DefaultProfiles %+v", d)
	}
	for i := range defaultPlans {
		if d.AttemptPlans[i] != p.AttemptPlans[i] {
			t.Errorf("plan %d differs", i)
		}
	}
	if _, ok := DefaultProfiles().Policy(d).(accumuloHostPolicy); !ok {
		t.Errorf("default policy %T", DefaultProfiles().Policy(d))
	}
}

func TestParseProfilesFull(t *testing.T) {
	doc := `{"profiles": [
	 {"isDefault": true, "attemptPlans": [{"servers": "100%", "busyTimeout": "1s"}]},
	 {"name": "fast", "scanTypeActivations": ["quick", "tiny"], "group": "g1", "policy": "accumulo-host",
	  "timeToWaitForScanServers": 0, "maxBusyTimeout": "10m", "busyTimeoutMultiplier": "4",
	  "attemptPlans": [{"servers": 2, "busyTimeout": 33, "salt": "a"}, {"servers": "50%", "busyTimeout": "100ms"}]},
	 {"scanTypeActivations": ["big"], "policy": "accumulo", "attemptPlans": [{"servers": "3", "busyTimeout": "33ms"}]}
	]}`
	ps, err := ParseProfiles([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	fast := ps.List[1]
	if fast.Name != "fast" || fast.Group != "g1" || fast.TimeToWaitForScanServers != 0 || fast.MaxBusyTimeout != 10*time.Minute ||
		fast.BusyTimeoutMultiplier != 4 || fast.AttemptPlans[0] != (AttemptPlan{ServerCount{N: 2}, 33 * time.Second, "a"}) ||
		fast.AttemptPlans[1] != (AttemptPlan{ServerCount{Percent: 50}, 100 * time.Millisecond, ""}) {
		t.Errorf("fast = %+v", fast)
	}
	if ps.List[2].Name != "big" || ps.List[0].Name != "default" {
		t.Errorf("derived names %q %q", ps.List[0].Name, ps.List[2].Name)
	}
	if ps.List[0].MaxBusyTimeout != 0 || ps.List[0].BusyTimeoutMultiplier != 0 {
		t.Errorf("absent multiplier/max must be 0: %+v", ps.List[0])
	}
	for hint, want := range map[string]string{"quick": "fast", "tiny": "fast", "big": "big", "other": "default", "": "default"} {
		if got := ps.ForHints(map[string]string{"scan_type": hint}).Name; got != want {
			t.Errorf("ForHints(%q) = %q, want %q", hint, got, want)
		}
	}
	if ps.ForHints(nil).Name != "default" || ps.ForHints(map[string]string{"x": "quick"}).Name != "default" {
		t.Error("no hint must give the default profile")
	}
	if got := ps.Summary(); len(got) != 3 || !strings.HasPrefix(got[1], "fast: policy=accumulo-host group=g1") ||
		!strings.Contains(got[1], "plans=[2/33s/a 50%/100ms]") || !strings.Contains(got[0], " isDefault ") || !strings.Contains(got[0], "maxBusyTimeout=none") {
		t.Errorf("summary %q", got)
	}
}

func TestParseProfilesOptions(t *testing.T) {
	doc := `[
	 {"isDefault": true, "policy": "clickhouse-first_or_random", "hedge": true, "hedgedConnectionTimeout": "20ms",
	  "errorHalfLife": "30s", "errorCap": 50, "maxIgnoredErrors": 2, "firstOffset": 1},
	 {"name": "bk", "scanTypeActivations": ["bk"], "policy": "bookkeeper", "reorderThresholdPendingRequests": 5,
	  "speculativeReadTimeout": "100ms", "maxSpeculativeReadTimeout": "1s", "speculativeBackoffMultiplier": 1.5, "writeSetSize": 0},
	 {"name": "rz", "scanTypeActivations": ["rz"], "policy": "ribbon-zone", "zoneTriggerLoad": 0.5, "zoneBlackoutPercent": 0.9,
	  "activeConnectionsLimit": 8, "subsetSize": 5, "breakerFailureThreshold": 4},
	 {"name": "ad", "scanTypeActivations": ["ad"], "policy": "adaptive", "hedgeBudget": 0.1, "hedgeDelayMin": "2ms",
	  "errorHalfLife": "30s", "errorCap": 50},
	 {"name": "ad2", "scanTypeActivations": ["ad2"], "policy": "adaptive", "hedge": false}
	]`
	ps, err := ParseProfiles([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	ch := ps.List[0].Options
	if !ch.Hedge || ch.HedgedConnectionTimeout != 20*time.Millisecond || ch.ReceiveDataTimeout != 2*time.Second ||
		ch.ErrorHalfLife != 30*time.Second || ch.ErrorCap != 50 || ch.MaxIgnoredErrors != 2 || ch.FirstOffset != 1 {
		t.Errorf("clickhouse options %+v", ch)
	}
	bk := ps.List[1].Options
	if bk.ReorderThresholdPendingRequests != 5 || bk.SpeculativeReadTimeout != 100*time.Millisecond ||
		bk.MaxSpeculativeReadTimeout != time.Second || bk.SpeculativeBackoffMultiplier != 1.5 || bk.WriteSetSize != 0 {
		t.Errorf("bookkeeper options %+v", bk)
	}
	rz := ps.List[2].Options
	if rz.ZoneTriggerLoad != 0.5 || rz.ZoneBlackoutPercent != 0.9 || rz.ActiveConnectionsLimit != 8 || rz.SubsetSize != 5 || rz.BreakerFailureThreshold != 4 {
		t.Errorf("ribbon options %+v", rz)
	}
	ad := ps.List[3].Options
	if !ad.Hedge || ad.HedgeBudget != 0.1 || ad.HedgeDelayMin != 2*time.Millisecond || ad.ZoneBlackoutPercent != 0.5 {
		t.Errorf("adaptive options %+v", ad)
	}
	if ps.List[4].Options.Hedge {
		t.Error("hedge false ignored")
	}
	// clickhouse-* read plain tallies (clickhouseTally) and halve them on
	// their own pool clock.
	want := []DecayParams{DefaultDecay, {}, {HalfLife: 30 * time.Second, Cap: 50}, {HalfLife: 5 * time.Second, Cap: 1000}}
	got := ps.Decays()
	if !slices.Equal(got, want) {
		t.Errorf("Decays = %v, want %v", got, want)
	}
	if s := ps.Summary()[0]; !strings.Contains(s, "hedge=true") || !strings.Contains(s, "firstOffset=1") || !strings.Contains(s, "errorHalfLife=30s") {
		t.Errorf("summary %q", s)
	}
}

func TestParseProfilesErrors(t *testing.T) {
	plans := `"attemptPlans":[{"servers":"3","busyTimeout":"33ms"}]`
	cases := []struct {
		name, doc string
		want      []string // substrings of the error
		unknown   bool     // wraps ErrUnknownPolicy
	}{
		{"empty", ``, []string{"empty"}, false},
		{"not json", `[{`, []string{"want a JSON array"}, false},
		{"not array", `"x"`, []string{"want a JSON array"}, false},
		{"no profiles", `[]`, []string{"no default profile"}, false},
		{"no default", `[{` + plans + `}]`, []string{"no default profile"}, false},
		{"two defaults", `[{"isDefault":true,` + plans + `},{"isDefault":true,"name":"b",` + plans + `}]`,
			[]string{`profile 1 ("b")`, `"isDefault"`, "multiple default profiles"}, false},
		{"dup scan type", `[{"isDefault":true,"scanTypeActivations":["x"],` + plans + `},{"name":"b","scanTypeActivations":["y","x"],` + plans + `}]`,
			[]string{`profile 1 ("b")`, `"scanTypeActivations"`, `"x"`, `profile "default"`}, false},
		{"dup scan type same profile", `[{"isDefault":true,"scanTypeActivations":["x","x"],` + plans + `}]`,
			[]string{`profile 0 ("default")`, `"x" listed twice`}, false},
		{"bad duration", `[{"isDefault":true,"name":"p","attemptPlans":[{"servers":"3","busyTimeout":"1.5s"}]}]`,
			[]string{`profile 0 ("p")`, `field "attemptPlans[0].busyTimeout"`, "decimals"}, false},
		{"bad max duration", `[{"isDefault":true,"maxBusyTimeout":"5x",` + plans + `}]`,
			[]string{`field "maxBusyTimeout"`, `"5x"`}, false},
		{"bad wait", `[{"isDefault":true,"timeToWaitForScanServers":"-1",` + plans + `}]`,
			[]string{`field "timeToWaitForScanServers"`}, false},
		{"decimal number duration", `[{"isDefault":true,"maxBusyTimeout":1.5,` + plans + `}]`,
			[]string{`field "maxBusyTimeout"`, "decimals"}, false},
		{"bad servers", `[{"isDefault":true,"attemptPlans":[{"servers":"0","busyTimeout":"1s"}]}]`,
			[]string{`field "attemptPlans[0].servers"`, `"0"`}, false},
		{"bad percent", `[{"isDefault":true,"attemptPlans":[{"servers":"150%","busyTimeout":"1s"}]}]`,
			[]string{`field "attemptPlans[0].servers"`, "150%"}, false},
		{"missing servers", `[{"isDefault":true,"attemptPlans":[{"busyTimeout":"1s"}]}]`,
			[]string{`field "attemptPlans[0].servers"`, "missing"}, false},
		{"missing busy", `[{"isDefault":true,"attemptPlans":[{"servers":"1"}]}]`,
			[]string{`field "attemptPlans[0].busyTimeout"`, "missing"}, false},
		{"missing plans", `[{"isDefault":true}]`, []string{`field "attemptPlans"`, "missing"}, false},
		{"empty plans", `[{"isDefault":true,"attemptPlans":[]}]`, []string{`field "attemptPlans"`, "at least one"}, false},
		{"bad multiplier", `[{"isDefault":true,"busyTimeoutMultiplier":2.5,` + plans + `}]`,
			[]string{`field "busyTimeoutMultiplier"`}, false},
		{"multiplier inf", `[{"isDefault":true,"busyTimeoutMultiplier":"inf",` + plans + `}]`,
			[]string{`field "busyTimeoutMultiplier"`}, false},
		{"multiplier Infinity", `[{"isDefault":true,"busyTimeoutMultiplier":"Infinity",` + plans + `}]`,
			[]string{`field "busyTimeoutMultiplier"`}, false},
		{"negative multiplier", `[{"isDefault":true,"busyTimeoutMultiplier":-1,` + plans + `}]`,
			[]string{`field "busyTimeoutMultiplier"`}, false},
		{"bad isDefault", `[{"isDefault":1,` + plans + `}]`, []string{`field "isDefault"`}, false},
		// Gson reads "yes" as false (Boolean.parseBoolean): no default then.
		{"isDefault yes", `[{"isDefault":"yes",` + plans + `}]`, []string{"no default profile"}, false},
		{"NaN percent", `[{'isDefault':true,'attemptPlans':[{'servers':'NaN%','busyTimeout':'60s'}]}]`,
			[]string{`field "attemptPlans[0].servers"`, "NaN%"}, false},
		{"Infinity percent", `[{"isDefault":true,"attemptPlans":[{"servers":"Infinity%","busyTimeout":"60s"}]}]`,
			[]string{`field "attemptPlans[0].servers"`}, false},
		{"decimal servers", `[{"isDefault":true,"attemptPlans":[{"servers":"2.5","busyTimeout":"60s"}]}]`,
			[]string{`field "attemptPlans[0].servers"`, `"2.5"`}, false},
		{"servers over int32", `[{"isDefault":true,"attemptPlans":[{"servers":"2147483648","busyTimeout":"60s"}]}]`,
			[]string{`field "attemptPlans[0].servers"`}, false},
		{"servers object", `[{"isDefault":true,"attemptPlans":[{"servers":{},"busyTimeout":"60s"}]}]`,
			[]string{`field "attemptPlans[0].servers"`}, false},
		{"unterminated single quote", `[{'isDefault:true}]`, []string{"unterminated string"}, false},
		{"unknown policy", `[{"isDefault":true,"policy":"fastest",` + plans + `}]`,
			[]string{`profile 0 ("default")`, `field "policy"`, `"fastest"`, "accumulo-host"}, true},
		{"option of other policy", `[{"isDefault":true,"hedge":true,` + plans + `}]`,
			[]string{`profile 0 ("default")`, `field "hedge"`, `not an option of policy "accumulo"`}, false},
		{"option of other policy 2", `[{"isDefault":true,"policy":"accumulo-host","subsetSize":3,` + plans + `}]`,
			[]string{`field "subsetSize"`, `policy "accumulo-host"`}, false},
		{"duplicate name", `[{"isDefault":true,"name":"a",` + plans + `},{"name":"a",` + plans + `}]`,
			[]string{`profile 1 ("a")`, "duplicate profile name"}, false},
		{"empty group", `[{"isDefault":true,"group":"",` + plans + `}]`, []string{`field "group"`}, false},
		{"top level unknown", `{"profiles":[],"x":1}`, []string{`unknown field "x"`}, false},
		{"trailing", `[{"isDefault":true,` + plans + `}] x`, []string{"want a JSON array"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseProfiles([]byte(c.doc))
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrBadConfig) {
				t.Errorf("%v does not wrap ErrBadConfig", err)
			}
			if c.unknown != errors.Is(err, ErrUnknownPolicy) {
				t.Errorf("%v: ErrUnknownPolicy = %v, want %v", err, errors.Is(err, ErrUnknownPolicy), c.unknown)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestOptionValidation(t *testing.T) {
	cases := []struct{ policy, opt, val, want string }{
		{"bookkeeper", "speculativeBackoffMultiplier", "0.5", "out of range"},
		{"ribbon-zone", "zoneBlackoutPercent", "0", "out of range"},
		{"ribbon-zone", "zoneBlackoutPercent", "1.5", "out of range"},
		{"adaptive", "hedgeBudget", "2", "out of range"},
		{"adaptive", "hedge", `"yes"`, "true or false"},
		{"clickhouse-random", "errorCap", "-1", "out of range"},
		{"clickhouse-random", "errorHalfLife", `"1.5m"`, "decimals"},
		{"clickhouse-random", "firstOffset", "1", "not an option"},
		{"ribbon-zone", "subsetSize", "2.5", "integer"},
		{"bookkeeper", "maxSpeculativeReadTimeout", `"1s"`, "less than speculativeReadTimeout"},
	}
	for _, c := range cases {
		doc := `[{"isDefault":true,"policy":"` + c.policy + `","` + c.opt + `":` + c.val + `}]`
		_, err := ParseProfiles([]byte(doc))
		if err == nil || !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), c.want) ||
			!strings.Contains(err.Error(), `"`+c.opt+`"`) || !strings.Contains(err.Error(), `profile 0 ("default")`) {
			t.Errorf("%s %s=%s: %v (want %q)", c.policy, c.opt, c.val, err, c.want)
		}
	}
}

// Every option of the table is documented in doc.go with its default.
func TestOptionsDocumented(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{} // option → cells of its row in the table
	for _, line := range strings.Split(string(doc), "\n") {
		line, ok := strings.CutPrefix(line, "//\t|")
		if !ok {
			continue
		}
		cells := strings.Split(line, "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows[cells[0]] = cells
	}
	// sameValue: the doc's "2.0" is the code's "2", "60s" is "1m".
	sameValue := func(doc, code string) bool {
		if doc == code {
			return true
		}
		if a, err := strconv.ParseFloat(doc, 64); err == nil {
			b, err := strconv.ParseFloat(code, 64)
			return err == nil && a == b
		}
		a, errA := ParseDuration(doc)
		b, errB := ParseDuration(code)
		return errA == nil && errB == nil && a == b
	}
	for _, s := range optionSpecs {
		cells, ok := rows[s.name]
		if !ok || len(cells) < 4 {
			t.Errorf("option %q missing from the table in doc.go", s.name)
			continue
		}
		// The default column: "<default>[ (note)][; adaptive: <default>]",
		// matching DefaultOptions of the policies the option applies to.
		if got, want := cells[2], strings.Join(s.applies, ", "); got != want {
			t.Errorf("option %q: doc.go says it applies to %q, the code to %q", s.name, got, want)
		}
		generic, adaptive, hasAdaptive := strings.Cut(cells[1], "; adaptive: ")
		generic, _, _ = strings.Cut(generic, " ")
		first := strings.Replace(s.applies[0], "*", "random", 1)
		def, adDef := DefaultOptions(first), DefaultOptions(PolicyAdaptive)
		if want := s.get(&def); !sameValue(generic, want) {
			t.Errorf("option %q: doc.go default %q, DefaultOptions(%q) %q", s.name, generic, first, want)
		}
		if !s.appliesTo(PolicyAdaptive) || first == PolicyAdaptive {
			if hasAdaptive {
				t.Errorf("option %q: doc.go gives a separate adaptive default for an option adaptive does not take or takes alone", s.name)
			}
			continue
		}
		want := s.get(&adDef)
		switch {
		case hasAdaptive && !sameValue(adaptive, want):
			t.Errorf("option %q: doc.go adaptive default %q, DefaultOptions %q", s.name, adaptive, want)
		case !hasAdaptive && !sameValue(generic, want):
			t.Errorf("option %q: adaptive's default %q is not in doc.go", s.name, want)
		}
	}
	for _, n := range PolicyNames() {
		if !strings.Contains(string(doc), n) {
			t.Errorf("policy %q not documented in doc.go", n)
		}
	}
}

func TestPolicyNames(t *testing.T) {
	names := PolicyNames()
	// 10 policies of their own plus the ClickHouse modes.
	if len(names) != 10+len(clickhouseModes) || len(clickhouseModes) != 9 {
		t.Errorf("names %v", names)
	}
	for _, n := range names {
		if _, err := NewPolicy(&Profile{Policy: n}); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if _, err := NewPolicy(&Profile{Policy: "nope"}); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("unknown: %v", err)
	}
}

// TestServerCountAccumuloRounding: Accumulo's AttemptPlan.getNumServers is
// max(1, (int) Math.round(percent / 100.0 * total)) in doubles, and its
// parse() reads the percentage with Double.parseDouble and the count with
// Integer.parseInt.
func TestServerCountAccumuloRounding(t *testing.T) {
	cases := []struct {
		in    string
		total int
		want  int
	}{
		{"29%", 50, 14},    // 0.29*50 = 14.499999999999998 (exactly 14.5)
		{"50%", 5, 3},      // 2.5 rounds half up
		{"10%", 1000, 100}, // ConfigurableScanServerSelectorTest.testOpts, profile "long" attempt 3
		{"50%", 1000, 500}, // testOpts, default profile attempt 3
		{"12.5%", 8, 1},
		{"12.5%", 20, 3}, // 2.5 → 3
		{"0.1%", 10, 1},  // max(1, …)
		{" 50 %", 10, 5}, // Double.parseDouble trims
		{"5e1%", 10, 5},
		{"50.%", 10, 5},
		{".5%", 1000, 5},
		{"50d%", 10, 5},
		{"+50%", 10, 5},
		{"0x1.9p5%", 100, 50}, // hexadecimal 50
		{"+3", 10, 3},         // Integer.parseInt takes a sign
		{"3", 2, 2},
	}
	for _, c := range cases {
		sc, err := ParseServerCount(c.in)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if got := sc.Count(c.total); got != c.want {
			t.Errorf("%q of %d = %d, want %d", c.in, c.total, got, c.want)
		}
	}
	// What Accumulo's parse() rejects.
	for _, in := range []string{"NaN%", "Infinity%", "-Infinity%", "-5%", "0.0%", "100.1%", "1e3%",
		"5 0%", "0x10%", "1_0%", "++3", "-3", "3.0", "2147483648", " 3", "1e1", "five"} {
		if sc, err := ParseServerCount(in); err == nil {
			t.Errorf("ParseServerCount(%q) = %v, want an error", in, sc)
		}
	}
}

// accumuloTestProfiles are the three profiles of
// ConfigurableScanServerSelectorTest.testOpts, in its single-quoted form
// (the test replaces ' by " before parsing; Gson takes either).
const accumuloTestProfiles = `[{'scanTypeActivations':['long','st9'],'maxBusyTimeout':'30m',
 'busyTimeoutMultiplier':4, 'attemptPlans':[{'servers':'2', 'busyTimeout':'10s'},
 {'servers':'4', 'busyTimeout':'2m'},{'servers':'10%', 'busyTimeout':'5m'}]},
 {'isDefault':true,'maxBusyTimeout':'5m','busyTimeoutMultiplier':4, 'attemptPlans':
 [{'servers':'5', 'busyTimeout':'5ms'},{'servers':'20', 'busyTimeout':'33ms'},
 {'servers':'50%', 'busyTimeout':'100ms'},{'servers':'100%', 'busyTimeout':'200ms'}]},
 {'scanTypeActivations':['mega'],'maxBusyTimeout':'60m','busyTimeoutMultiplier':2,
 'attemptPlans':[{'servers':'100%', 'busyTimeout':'10m'}]}]`

// TestAccumuloOpts ports the parsing side of
// ConfigurableScanServerSelectorTest.testOpts: which profile a scan type
// picks and how many of 1000 servers and which busy timeout each plan
// gives (attempts past the last plan reuse it; the multiplier is the
// selector's business).
func TestAccumuloOpts(t *testing.T) {
	for _, doc := range []string{accumuloTestProfiles, strings.ReplaceAll(accumuloTestProfiles, "'", `"`)} {
		ps, err := ParseProfiles([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if w := ps.Warnings(); len(w) != 0 {
			t.Errorf("warnings: %q", w)
		}
		cases := []struct {
			scanType string
			servers  []int
			busy     []time.Duration
			maxBusy  time.Duration
			mult     int
		}{
			{"", []int{5, 20, 500, 1000}, []time.Duration{5 * time.Millisecond, 33 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}, 5 * time.Minute, 4},
			{"st7", []int{5, 20, 500, 1000}, []time.Duration{5 * time.Millisecond, 33 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}, 5 * time.Minute, 4},
			{"long", []int{2, 4, 100}, []time.Duration{10 * time.Second, 2 * time.Minute, 5 * time.Minute}, 30 * time.Minute, 4},
			{"st9", []int{2, 4, 100}, []time.Duration{10 * time.Second, 2 * time.Minute, 5 * time.Minute}, 30 * time.Minute, 4},
			{"mega", []int{1000}, []time.Duration{10 * time.Minute}, time.Hour, 2},
		}
		for _, c := range cases {
			p := ps.ForHints(map[string]string{"scan_type": c.scanType})
			if len(p.AttemptPlans) != len(c.servers) {
				t.Fatalf("scan type %q: profile %q has %d plans, want %d", c.scanType, p.Name, len(p.AttemptPlans), len(c.servers))
			}
			for i, ap := range p.AttemptPlans {
				if got := ap.Servers.Count(1000); got != c.servers[i] {
					t.Errorf("scan type %q plan %d: %d servers, want %d", c.scanType, i, got, c.servers[i])
				}
				if ap.BusyTimeout != c.busy[i] {
					t.Errorf("scan type %q plan %d: busy %v, want %v", c.scanType, i, ap.BusyTimeout, c.busy[i])
				}
			}
			if p.MaxBusyTimeout != c.maxBusy || p.BusyTimeoutMultiplier != c.mult {
				t.Errorf("scan type %q: maxBusy %v mult %d, want %v %d", c.scanType, p.MaxBusyTimeout, p.BusyTimeoutMultiplier, c.maxBusy, c.mult)
			}
		}
	}
}

// TestAccumuloIncorrectOptions ports
// ConfigurableScanServerSelectorTest.testIncorrectOptions: a scan type in
// two profiles is rejected naming it, and so is a document without a
// default profile.
func TestAccumuloIncorrectOptions(t *testing.T) {
	def := `{'isDefault':true,'maxBusyTimeout':'5m','busyTimeoutMultiplier':4, 'attemptPlans':[{'servers':'5', 'busyTimeout':'5ms'},{'servers':'20', 'busyTimeout':'33ms'},{'servers':'50%', 'busyTimeout':'100ms'},{'servers':'100%', 'busyTimeout':'200ms'}]}`
	p1 := `{'scanTypeActivations':['long','mega'],'maxBusyTimeout':'30m','busyTimeoutMultiplier':4, 'attemptPlans':[{'servers':'2', 'busyTimeout':'10s'},{'servers':'4', 'busyTimeout':'2m'},{'servers':'10%', 'busyTimeout':'5m'}]}`
	p2 := `{'scanTypeActivations':['mega'],'maxBusyTimeout':'60m','busyTimeoutMultiplier':2, 'attemptPlans':[{'servers':'100%', 'busyTimeout':'10m'}]}`
	for _, c := range []struct{ doc, want string }{
		{"[" + def + ", " + p1 + "," + p2 + "]", `"mega"`},
		{"[" + p1 + "]", "default"},
	} {
		_, err := ParseProfiles([]byte(c.doc))
		if err == nil || !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want ErrBadConfig naming %s", c.doc, err, c.want)
		}
	}
}

// TestAccumuloLenient: documents Accumulo's parser (Gson, lenient) accepts
// parse the same way here. Cases from ConfigurableScanServerSelectorTest:
// testServerSetChanges and testPreviousFailures parse a single-quoted
// document (their replace applies to "]" only) with a numeric servers
// value; testNoScanServers has "isDefault":"true".
func TestAccumuloLenient(t *testing.T) {
	cases := []struct {
		name, doc string
		summary   string   // Summary()[0]
		warnings  []string // substrings, one per warning, in order
	}{
		{"testServerSetChanges", `[{'isDefault':true,'maxBusyTimeout':'5m','busyTimeoutMultiplier':4,'timeToWaitForScanServers':'120s','attemptPlans':[{'servers':3, 'busyTimeout':'60s'}]}]`,
			"default: policy=accumulo group=default isDefault scanTypes=[] plans=[3/1m] maxBusyTimeout=5m busyTimeoutMultiplier=4 timeToWait=2m", nil},
		{"testNoScanServers", `[{"isDefault":"true","maxBusyTimeout":"60m","busyTimeoutMultiplier":2, "timeToWaitForScanServers": "0s","attemptPlans":[{"servers":"100%", "busyTimeout":"10m"}]}]`,
			"default: policy=accumulo group=default isDefault scanTypes=[] plans=[100%/10m] maxBusyTimeout=1h busyTimeoutMultiplier=2 timeToWait=0s", nil},
		{"isDefault TRUE string", `[{"isDefault":"TRUE","attemptPlans":[{"servers":"1","busyTimeout":"1s"}]}]`,
			"default: policy=accumulo group=default isDefault scanTypes=[] plans=[1/1s] maxBusyTimeout=none busyTimeoutMultiplier=0 timeToWait=36500d", nil},
		{"numeric salt and multiplier as string", `[{"isDefault":true,"busyTimeoutMultiplier":"8","attemptPlans":[{"servers":"1","busyTimeout":"1s","salt":42}]}]`,
			"default: policy=accumulo group=default isDefault scanTypes=[] plans=[1/1s/42] maxBusyTimeout=none busyTimeoutMultiplier=8 timeToWait=36500d", nil},
		{"multiplier 8e0 string", `[{"isDefault":true,"busyTimeoutMultiplier":"8e0","attemptPlans":[{"servers":"1","busyTimeout":"1s"}]}]`,
			"default: policy=accumulo group=default isDefault scanTypes=[] plans=[1/1s] maxBusyTimeout=none busyTimeoutMultiplier=8 timeToWait=36500d", nil},
		{"integral double multiplier", `[{"isDefault":true,"busyTimeoutMultiplier":8.0,"attemptPlans":[{"servers":"1","busyTimeout":"1s","salt":true}]}]`,
			"default: policy=accumulo group=default isDefault scanTypes=[] plans=[1/1s/true] maxBusyTimeout=none busyTimeoutMultiplier=8 timeToWait=36500d", nil},
		{"unquoted, comments, = and ;", "// profiles\n[{isDefault=true; # the default\n group=>g1, /* plans */ attemptPlans:[{servers:'12.5%';busyTimeout:33ms}]}]",
			"default: policy=accumulo group=g1 isDefault scanTypes=[] plans=[12.5%/33ms] maxBusyTimeout=none busyTimeoutMultiplier=0 timeToWait=36500d", nil},
		{"unknown fields", `[{"isDefault":true,"bogus":1,"attemptPlans":[{"servers":"+3","busyTimeout":"1s","x":{"y":[1]}}]}]`,
			"default: policy=accumulo group=default isDefault scanTypes=[] plans=[3/1s] maxBusyTimeout=none busyTimeoutMultiplier=0 timeToWait=36500d",
			[]string{`profile 0 ("default"): field "bogus": unknown field, ignored`, `profile 0 ("default"): field "attemptPlans[0].x": unknown field, ignored`}},
		{"escapes", `[{'isDefault':true,'group':'\u00e9\'\ud83d\ude00','attemptPlans':[{'servers':'1','busyTimeout':'1s'}]}]`,
			"default: policy=accumulo group=é'😀 isDefault scanTypes=[] plans=[1/1s] maxBusyTimeout=none busyTimeoutMultiplier=0 timeToWait=36500d", nil},
		{"key twice, last wins", `[{"isDefault":true,"group":"a","group":"b","attemptPlans":[{"servers":"1","busyTimeout":"1s"}]}]`,
			"default: policy=accumulo group=b isDefault scanTypes=[] plans=[1/1s] maxBusyTimeout=none busyTimeoutMultiplier=0 timeToWait=36500d",
			[]string{`profile 0 ("default"): field "group": given twice; the last value is used`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ps, err := ParseProfiles([]byte(c.doc))
			if err != nil {
				t.Fatal(err)
			}
			if got := ps.Summary()[0]; got != c.summary {
				t.Errorf("summary\n got %s\nwant %s", got, c.summary)
			}
			w := ps.Warnings()
			if len(w) != len(c.warnings) {
				t.Fatalf("warnings %q, want %d", w, len(c.warnings))
			}
			for i := range w {
				if !strings.Contains(w[i], c.warnings[i]) {
					t.Errorf("warning %q does not contain %q", w[i], c.warnings[i])
				}
			}
		})
	}
}

// TestProfileNamesNotUnique: in Accumulo profiles have no names, so a
// non-default profile activated by scan type "default", or one activated
// by "profile0" next to an unnamed profile 0, is valid. Generated names
// are made unique; explicit "name"s must still be unique.
func TestProfileNamesNotUnique(t *testing.T) {
	plans := `"attemptPlans":[{"servers":"1","busyTimeout":"1s"}]`
	cases := []struct {
		doc   string
		names []string
	}{
		{`[{"scanTypeActivations":["default"],` + plans + `},{"isDefault":true,` + plans + `}]`, []string{"profile0", "default"}},
		{`[{"isDefault":true,` + plans + `},{"scanTypeActivations":["default"],` + plans + `}]`, []string{"default", "profile1"}},
		{`[{"isDefault":true,"scanTypeActivations":["x"],` + plans + `},{` + plans + `},{"scanTypeActivations":["profile1"],` + plans + `}]`,
			[]string{"default", "profile1", "profile2"}},
		{`[{"isDefault":true,` + plans + `},{"scanTypeActivations":["profile2"],` + plans + `},{` + plans + `}]`,
			[]string{"default", "profile2", "profile2-2"}},
		{`[{"isDefault":true,"name":"profile1",` + plans + `},{` + plans + `}]`, []string{"profile1", "profile1-2"}},
	}
	for _, c := range cases {
		ps, err := ParseProfiles([]byte(c.doc))
		if err != nil {
			t.Errorf("%s: %v", c.doc, err)
			continue
		}
		var got []string
		for _, p := range ps.List {
			got = append(got, p.Name)
		}
		if strings.Join(got, ",") != strings.Join(c.names, ",") {
			t.Errorf("%s: names %q, want %q", c.doc, got, c.names)
		}
	}
	ps, err := ParseProfiles([]byte(`[{"scanTypeActivations":["default"],"busyTimeoutMultiplier":3,` + plans + `},{"isDefault":true,` + plans + `}]`))
	if err != nil {
		t.Fatal(err)
	}
	if p := ps.ForHints(map[string]string{"scan_type": "default"}); p.BusyTimeoutMultiplier != 3 {
		t.Errorf("scan_type=default picked %q, want profile0", p.Name)
	}
	if p := ps.ForHints(nil); !p.IsDefault {
		t.Errorf("no hint picked %q, want the default profile", p.Name)
	}
}

// TestEmptyScanTypeActivation: Accumulo's parseProfiles puts every entry of
// scanTypeActivations, the empty string included, in its scan type map,
// and selectServers looks the hint up there, so a profile activated by ""
// is what a scan hinted scan_type="" gets. A profile whose first scan
// type is "" is named profile<i>; "" in two profiles is a duplicate like
// any other scan type.
func TestEmptyScanTypeActivation(t *testing.T) {
	plans := `"attemptPlans":[{"servers":"1","busyTimeout":"1s"}]`
	ps, err := ParseProfiles([]byte(`[{"isDefault":true,` + plans + `},
	 {"scanTypeActivations":["","blank"],"busyTimeoutMultiplier":3,` + plans + `}]`))
	if err != nil {
		t.Fatalf("scan type \"\" rejected: %v", err)
	}
	empty := ps.List[1]
	if empty.Name != "profile1" {
		t.Errorf("name %q, want profile1", empty.Name)
	}
	for _, c := range []struct {
		hints map[string]string
		want  *Profile
	}{
		{map[string]string{"scan_type": ""}, empty},
		{map[string]string{"scan_type": "blank"}, empty},
		{map[string]string{"scan_type": "other"}, ps.List[0]},
		{map[string]string{}, ps.List[0]},
		{nil, ps.List[0]},
	} {
		if got := ps.ForHints(c.hints); got != c.want {
			t.Errorf("ForHints(%v) = %q, want %q", c.hints, got.Name, c.want.Name)
		}
	}
	_, err = ParseProfiles([]byte(`[{"isDefault":true,"scanTypeActivations":[""],` + plans + `},{"scanTypeActivations":[""],` + plans + `}]`))
	if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), `scan type "" is also activated by profile "default"`) {
		t.Errorf("\"\" in two profiles: %v", err)
	}
}
