package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
)

// scanctl status --json is one document: every coordinator row with its
// own status (the HTTP /status mapping: field names as in the .proto, integers as numbers) or its
// problem, and the asked coordinator's status.
func TestPrintStatusJSON(t *testing.T) {
	st := &client.Status{Address: "a:1", Version: "v1.4.0", ScansStarted: 7, Tables: []client.TableStatus{{Name: "demo", CurrentGeneration: 3}}}
	rows := []coordRow{
		{lease: &client.CoordinatorLease{MemberID: "m1", Version: "v1.3.0"}, addr: "a:1", status: st},
		{addr: "b:1", problem: "no answer"},
	}
	var out bytes.Buffer
	if err := printStatusJSON(&out, rows, st); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Coordinators []struct {
			Address, Member, Version, Problem string
			Alive                             bool
			Status                            map[string]any
		}
		Status map[string]any
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	if len(doc.Coordinators) != 2 {
		t.Fatalf("coordinators %+v", doc.Coordinators)
	}
	a, b := doc.Coordinators[0], doc.Coordinators[1]
	if a.Address != "a:1" || a.Member != "m1" || !a.Alive || a.Version != "v1.4.0" || a.Status["scans_started"] != float64(7) {
		t.Errorf("first coordinator %+v", a)
	}
	if b.Address != "b:1" || b.Alive || b.Problem != "no answer" || b.Status != nil {
		t.Errorf("second coordinator %+v", b)
	}
	if doc.Status["address"] != "a:1" || doc.Status["scans_started"] != float64(7) {
		t.Errorf("status %+v", doc.Status)
	}
}

// scanctl route --json carries every field the text form prints, keys
// escaped as scanctl prints them and durations in milliseconds.
func TestPrintRouteJSON(t *testing.T) {
	r := &client.Route{Tablet: client.Tablet{Table: "t", Generation: 2, Index: 3, Range: client.Range{Start: []byte("a\tb"), End: nil}},
		Profile: "default", Policy: "adaptive", PlanIndex: 1, Tried: []string{"s1=busy"}, Candidates: []string{"s1", "s2"}, Scores: []float64{0.5, 1},
		Choice: "s2", BusyTimeout: 33 * time.Millisecond, Delay: 0, HedgeDelay: 1500 * time.Microsecond}
	var out bytes.Buffer
	if err := printRouteJSON(&out, r); err != nil {
		t.Fatal(err)
	}
	var got routeJSON
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	if got.Table != "t" || got.Generation != 2 || got.Tablet != 3 || got.Start != `a\x09b` || got.End != "" || got.Policy != "adaptive" ||
		got.PlanIndex != 1 || len(got.Tried) != 1 || got.Choice != "s2" || len(got.Scores) != 2 || got.BusyTimeout != 33 || got.HedgeDelayMs != 1.5 {
		t.Errorf("route --json: %+v\n%s", got, out.String())
	}
}
