package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/scanplane/scanplane/"

// allowed lists, per package (path relative to the module), the packages
// of ours it may import directly. Packages not listed here fail the test,
// so a new package has to decide its place.
var allowed = map[string][]string{
	"messages":                            {},
	"wire":                                {"messages", "tablets"},
	"tablets":                             {"messages"},
	"tablets/storetest":                   {"messages", "tablets"}, // test support: the MetaStore conformance suite
	"tablets/rowfmt":                      {"tablets"},             // row formats of scanctl; never the client's
	"selection":                           {"tablets"},
	"cache":                               {"tablets"},
	"bus":                                 {"messages", "tablets", "internal/backoff", "internal/netlimit"},
	"internal/remoting":                   {"internal/netlimit", "internal/grants"},
	"internal/metrics":                    {"messages"},
	"scanserver":                          {"wire", "messages", "tablets", "cache", "bus", "internal/remoting", "internal/metrics", "internal/actorenv"},
	"scanflow":                            {"messages", "selection"},
	"coordinator":                         {"wire", "messages", "tablets", "selection", "scanflow", "bus", "internal/remoting", "internal/metrics", "internal/actorenv"},
	"client":                              {"wire", "messages", "tablets", "bus", "internal/remoting", "internal/secrets", "internal/tabletstream", "internal/clientsys", "internal/actorenv", "api/scanplane/v1", "api/scanplane/v1/scanplanev1connect"},
	"internal/tabletstream":               {"wire", "messages", "tablets"},
	"internal/clientsys":                  {},
	"gateway":                             {"client", "tablets", "api/scanplane/v1", "api/scanplane/v1/scanplanev1connect"},
	"api/scanplane/v1":                    {},
	"api/scanplane/v1/scanplanev1connect": {"api/scanplane/v1"},
	"loadtest":                            {"client", "messages", "tablets", "bus", "selection", "localcluster"},
	"localcluster":                        {"messages", "internal/secrets", "internal/readyfile", "internal/backoff", "internal/freeport", "internal/procstop"},
	"internal/cliutil":                    {"internal/secrets", "internal/netlimit"},
	"internal/secrets":                    {"internal/grants"},
	"internal/grants":                     {},
	"internal/readyfile":                  {},
	"internal/archtest":                   {},
	"internal/backoff":                    {},
	"internal/netlimit":                   {},
	"internal/freeport":                   {},
	"internal/procstop":                   {},
	"internal/testutil":                   {}, // imported by tests only: no package lists it
	"internal/actorenv":                   {},
	"e2e":                                 {},
	"internal/doctest":                    {}, // tests of the documentation

	// the embedded NATS server: only cmd/coordinator (and tests) import it
	"internal/natsserver": {"bus"},

	// deterministic harnesses and test scaffolding: anything
	"internal/sim":                  {"coordinator", "scanserver", "internal/tabletstream", "wire", "messages", "selection", "tablets", "internal/actorenv", "internal/remoting"},
	"internal/sim/placementsim":     {"selection", "tablets"},
	"policysim":                     {"selection", "scanflow", "messages"},
	"internal/testutil/clustertest": {"bus", "client", "internal/secrets", "localcluster", "messages", "tablets"},
	"internal/testutil/servertest":  {"scanserver", "tablets", "wire"},
	// the connection-limit checks the HTTP endpoints' and the remote's tests share
	"internal/testutil/connlimittest": {"internal/testutil"},
}

// apart lists, per package, packages of ours it must not depend on at all,
// not even indirectly or from its tests: a process's code never links the
// other process's, and the client library links neither.
var apart = map[string][]string{
	"scanserver":      {"coordinator"},
	"coordinator":     {"scanserver"},
	"client":          {"coordinator", "scanserver", "tablets/rowfmt"},
	"cmd/scanserver":  {"coordinator"},
	"cmd/coordinator": {"scanserver"},
}

// pure packages must not depend, even indirectly, on these.
var pure = map[string][]string{
	"selection": {"github.com/asynkron/protoactor-go", "github.com/nats-io/", mod + "coordinator", mod + "scanserver", mod + "bus", mod + "client"},
	"scanflow":  {"github.com/asynkron/protoactor-go", "github.com/nats-io/", mod + "coordinator", mod + "scanserver", mod + "bus", mod + "client"},
	"policysim": {"github.com/asynkron/protoactor-go", "github.com/nats-io/", mod + "coordinator", mod + "scanserver", mod + "bus", mod + "client"},
	"tablets":   {"github.com/asynkron/protoactor-go", "github.com/nats-io/", mod + "coordinator", mod + "scanserver", mod + "bus", mod + "client"},
	// The client library stays lean: Parquet is scanctl's alone, and the
	// public API's server (the gateway, reflection) the coordinator's;
	// the client's API type links only connect-go's client and the
	// generated code.
	"client": {"github.com/parquet-go/", "connectrpc.com/grpcreflect", mod + "gateway"},
}

// natsServer is the module path of the NATS server library; embedsNATS
// lists the only packages that may link it: the embedded server and the
// coordinator's command that runs it. The client library, the scan server
// and the bus client code reach NATS as clients only.
const natsServer = "github.com/nats-io/nats-server/"

var embedsNATS = []string{"internal/natsserver", "cmd/coordinator"}

type pkg struct {
	ImportPath   string
	Imports      []string
	Deps         []string
	TestImports  []string
	XTestImports []string
}

func list(t *testing.T) []pkg {
	t.Helper()
	// Output fills (*exec.ExitError).Stderr: go list's own message
	// (a module it cannot download, a package that does not build).
	out, err := exec.Command("go", "list", "-json", mod+"...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			t.Fatalf("go list: %v\n%s", err, bytes.TrimSpace(ee.Stderr))
		}
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

// TestProcessesApart checks apart: the dependencies of each listed
// package, and the imports of its tests (the coordinator's tests run
// real scan-server actors through internal/testutil/servertest).
func TestProcessesApart(t *testing.T) {
	byPath := map[string]pkg{}
	for _, p := range list(t) {
		byPath[strings.TrimPrefix(p.ImportPath, mod)] = p
	}
	for rel, banned := range apart {
		p, ok := byPath[rel]
		if !ok {
			t.Errorf("package %s is not in the module", rel)
			continue
		}
		for _, b := range banned {
			if contains(p.Deps, mod+b) {
				t.Errorf("%s depends on %s (go list -deps ./%s)", rel, b, rel)
			}
			for _, imp := range append(p.TestImports, p.XTestImports...) {
				if imp == mod+b || strings.HasPrefix(imp, mod+b+"/") {
					t.Errorf("tests of %s import %s", rel, b)
				}
			}
		}
	}
}

// TestNATSServerOnlyInCoordinator checks embedsNATS: no other package
// depends on the NATS server, not even indirectly (their tests may start
// one).
func TestNATSServerOnlyInCoordinator(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range list(t) {
		rel := strings.TrimPrefix(p.ImportPath, mod)
		seen[rel] = true
		for _, d := range p.Deps {
			if strings.HasPrefix(d, natsServer) && !contains(embedsNATS, rel) {
				t.Errorf("%s depends on %s: only %v may link the NATS server (docs/architecture.md, packages)", rel, d, embedsNATS)
				break
			}
		}
	}
	for _, rel := range []string{"client", "scanserver", "cmd/scanserver", "bus"} {
		if !seen[rel] {
			t.Errorf("package %s is not in the module", rel)
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
