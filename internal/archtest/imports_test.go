package archtest

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/scanplane/scanplane/"

// allowed lists, per package (path relative to the module), the packages
// of ours it may import directly. Packages not listed here fail the test,
// so a new package has to decide its place.
var allowed = map[string][]string{
	"messages":            {},
	"tablets":             {"messages"},
	"selection":           {"tablets"},
	"cache":               {"tablets"},
	"bus":                 {"messages"},
	"actors":              {"messages", "tablets", "selection", "cache", "bus", "internal/remotestop"},
	"client":              {"messages", "tablets", "bus", "internal/remotestop"},
	"loadtest":            {"client", "messages", "tablets", "bus", "selection", "localcluster"},
	"localcluster":        {"messages", "internal/cliutil"},
	"internal/cliutil":    {},
	"internal/archtest":   {},
	"internal/remotestop": {}, // race-free protoactor remote shutdown
	"internal/protosim":   {"actors", "client", "messages", "selection", "tablets"},
	"e2e":                 {},

	"internal/placementsim": {"selection", "tablets"}, // pure simulation (issue 8)
	"deploy/deploytest":     {},                       // tests only: deploy/ files against real processes (issue 10)

	// test support: local clusters of real processes, for _test.go files only (issue 11)
	"internal/clustertest": {"bus", "client", "internal/cliutil", "localcluster", "messages", "tablets"},
}

// pure packages must not depend, even indirectly, on these.
var pure = map[string][]string{
	"selection": {"github.com/asynkron/protoactor-go", "github.com/nats-io/", mod + "actors", mod + "bus", mod + "client"},
	"tablets":   {"github.com/asynkron/protoactor-go", "github.com/nats-io/", mod + "actors", mod + "bus", mod + "client"},
}

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func list(t *testing.T) []pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", mod+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func TestImportRules(t *testing.T) {
	pkgs := list(t)
	if len(pkgs) < 10 {
		t.Fatalf("only %d packages listed", len(pkgs))
	}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(p.ImportPath, mod)
		if strings.HasPrefix(rel, "cmd/") {
			continue // commands wire everything
		}
		ok, known := allowed[rel]
		if !known {
			t.Errorf("package %s has no import rule: add it to allowed (docs/architecture.md, packages)", rel)
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, mod) {
				continue
			}
			dep := strings.TrimPrefix(imp, mod)
			if !contains(ok, dep) {
				t.Errorf("%s imports %s; it may import only %v (docs/architecture.md, packages)", rel, dep, ok)
			}
		}
		for _, bad := range pure[rel] {
			for _, d := range p.Deps {
				if strings.HasPrefix(d, bad) {
					t.Errorf("%s must stay pure but depends on %s", rel, d)
				}
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
