package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestJSONLines: -json prints one object per policy with the documented
// fields, and the better policy shows in them.
func TestJSONLines(t *testing.T) {
	var out, errs bytes.Buffer
	code := run([]string{"-preset", "small", "-json", "-requests", "4000", "-policies", "random,least-outstanding"}, &out, &errs)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %q", out.String())
	}
	for i, want := range []string{"random", "least-outstanding"} {
		var row map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &row); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"setting", "utilization", "servers", "policy", "p50_ms", "p99_ms", "p999_ms"} {
			if _, ok := row[k]; !ok {
				t.Errorf("line %d lacks %q: %s", i, k, lines[i])
			}
		}
		if row["policy"] != want || row["setting"] != "small" || row["servers"] != 12.0 {
			t.Errorf("line %d: %s", i, lines[i])
		}
		if p50, p99 := row["p50_ms"].(float64), row["p99_ms"].(float64); !(p50 > 0.5 && p99 > p50) {
			t.Errorf("line %d: p50 %v p99 %v", i, p50, p99)
		}
	}
}

func TestBadInputNamesIt(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-policies", "random,fastest"}, `"fastest"`},
		{[]string{"-preset", "huge"}, `"huge"`},
		{[]string{"-preset", "small", "-policies", "adaptive:spillcost=0"}, "spillcost"},
	} {
		var out, errs bytes.Buffer
		if code := run(tc.args, &out, &errs); code == 0 || !strings.Contains(errs.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want an error naming %s", tc.args, code, errs.String(), tc.want)
		}
	}
}

// TestDiagLines: -diag adds after each run's -json line one line naming
// the run and holding its Diag.
func TestDiagLines(t *testing.T) {
	var out, errs bytes.Buffer
	code := run([]string{"-preset", "small", "-json", "-diag", "-requests", "2000", "-policies", "random,adaptive"}, &out, &errs)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("want 4 lines, got %q", out.String())
	}
	for i, want := range []string{"random", "adaptive"} {
		var row struct {
			Setting string  `json:"setting"`
			Servers int     `json:"servers"`
			Policy  string  `json:"policy"`
			Util    float64 `json:"utilization"`
			Diag    *struct {
				Decisions int               `json:"decisions"`
				Classes   []json.RawMessage `json:"classes"`
			} `json:"diag"`
		}
		line := lines[2*i+1]
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if row.Policy != want || row.Setting != "small" || row.Servers != 12 || row.Util <= 0 ||
			row.Diag == nil || row.Diag.Decisions == 0 || len(row.Diag.Classes) == 0 {
			t.Errorf("line %d: %s", 2*i+1, line)
		}
		// The fields docs/policysim.md lists.
		var raw struct {
			Diag map[string]json.RawMessage `json:"diag"`
		}
		if err := json.Unmarshal([]byte(line), &raw); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"decisions", "not_shortest", "excess_scans", "picked_scans", "shortest_scans",
			"view_not_shortest", "view_bias_scans", "view_error_scans", "info_age_ms", "info_older_100ms",
			"home", "away", "home_longer_by_workers", "away_no_gain", "classes", "tail"} {
			if _, ok := raw.Diag[k]; !ok {
				t.Errorf("line %d: diag lacks %q: %s", 2*i+1, k, line)
			}
		}
	}
}

// TestServiceSeedFlag: -service-seed equal to -seed is the run without
// it, and another one gives the run other latencies.
func TestServiceSeedFlag(t *testing.T) {
	line := func(extra ...string) string {
		t.Helper()
		var out, errs bytes.Buffer
		args := append([]string{"-preset", "small", "-json", "-requests", "2000", "-policies", "c3", "-seed", "3"}, extra...)
		if code := run(args, &out, &errs); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs.String())
		}
		return strings.TrimSpace(out.String())
	}
	base := line()
	if same := line("-service-seed", "3"); same != base {
		t.Errorf("-service-seed 3 of -seed 3: %s, want the run without it: %s", same, base)
	}
	if other := line("-service-seed", "4"); other == base {
		t.Errorf("-service-seed 4 gave the run of -seed 3: %s", other)
	}
}
