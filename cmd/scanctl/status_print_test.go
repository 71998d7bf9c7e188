package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/scanplane/scanplane/client"
)

// scanctl status prints the coordinator it asked, by address, with its
// version on the first line, the tables of its metadata view with their
// generations, and every coordinator's counters and version in the
// coordinators table, with their totals.
func TestPrintStatusVersionAndTables(t *testing.T) {
	st := &client.Status{Address: "a:1", Version: "v1.4.0", ScansStarted: 7, TabletActors: 2, DirectRequests: 5, Rerouted: 1, Tables: []client.TableStatus{
		{Name: "demo", CurrentGeneration: 3, CachedGenerations: []uint64{2, 3}},
		{Name: "gone", CachedGenerations: []uint64{}},
	}}
	var out bytes.Buffer
	printStatus(&out, st)
	lines := strings.Split(out.String(), "\n")
	if !strings.HasPrefix(lines[0], "coordinator a:1: version=v1.4.0 scans=7 ") {
		t.Errorf("first line %q", lines[0])
	}
	for _, want := range []string{`(?m)^coordinator a:1: tablet_actors=2 direct_requests=5 rerouted=1 `, `(?m)^TABLE\s+CURRENT-GEN\s+CACHED-GENS$`, `(?m)^demo\s+3\s+2,3$`, `(?m)^gone\s+0\s+-$`} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("output does not match %s:\n%s", want, out.String())
		}
	}
	out.Reset()
	printStatus(&out, &client.Status{})
	if strings.Contains(out.String(), "TABLE") || !strings.HasPrefix(out.String(), "coordinator -: version=- ") {
		t.Errorf("no tables, no version:\n%s", out.String())
	}

	out.Reset()
	printCoordinators(&out, []coordRow{
		{lease: &client.CoordinatorLease{MemberID: "m1", Version: "v1.3.0"}, addr: "a:1", status: &client.Status{Version: "v1.4.0", ScansStarted: 5, Flows: 1}},
		{lease: &client.CoordinatorLease{MemberID: "m3", Version: "v1.4.0"}, addr: "c:1", status: &client.Status{Version: "v1.4.0", ScansStarted: 7, ScansFailed: 1}},
		{lease: &client.CoordinatorLease{MemberID: "m2", Version: "v1.3.0"}, addr: "b:1", problem: "no answer"},
	})
	for _, want := range []string{`(?m)^COORDINATOR\s.*\sSCANS\s+FAILED\s.*\sVERSION\s+NOTE$`, `(?m)^a:1\s+m1\s+yes\s+0\s+5\s+0\s+1\s.*\sv1\.4\.0\s*$`,
		`(?m)^b:1\s+m2\s.*\sv1\.3\.0\s+no answer$`, `(?m)^total \(2 answered\)\s+0\s+12\s+1\s+1\s`} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("coordinators table does not match %s:\n%s", want, out.String())
		}
	}
}
