package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// The --json forms of scanctl status, tables and route: one JSON document
// each, for programs. Keys are written as scanctl prints them (printable
// bytes as they are, others as \xNN, tablets.FormatKey); durations are
// in milliseconds; the coordinators' status is client.Status's JSON, with
// the field names and values of the coordinators' HTTP /status.

// writeJSON writes v as one indented JSON document and a newline.
func writeJSON(out io.Writer, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", data)
	return err
}

// statusJSON is scanctl status --json.
type statusJSON struct {
	// Coordinators: every coordinator lease and configured coordinator,
	// as the coordinators table lists them.
	Coordinators []coordJSON `json:"coordinators"`
	// Status: the status of the coordinator the client asked.
	Status json.RawMessage `json:"status"`
}

type coordJSON struct {
	Address string          `json:"address"`
	Member  string          `json:"member,omitempty"`
	Alive   bool            `json:"alive"`
	Version string          `json:"version,omitempty"`
	Status  json.RawMessage `json:"status,omitempty"` // absent: it did not answer
	Problem string          `json:"problem,omitempty"`
}

func printStatusJSON(out io.Writer, coords []coordRow, st *client.Status) error {
	doc := statusJSON{Coordinators: []coordJSON{}}
	var err error
	if doc.Status, err = json.Marshal(st); err != nil {
		return err
	}
	for _, r := range coords {
		c := coordJSON{Address: r.addr, Member: r.leased().MemberID, Alive: r.lease != nil, Version: r.leased().Version, Problem: r.problem}
		if r.status != nil {
			if c.Status, err = json.Marshal(r.status); err != nil {
				return err
			}
			if v := r.status.Version; v != "" {
				c.Version = v
			}
		}
		doc.Coordinators = append(doc.Coordinators, c)
	}
	return writeJSON(out, doc)
}

// generationJSON is one element of scanctl tables --json: a stored
// generation of a table, or a table that could not be read (Error).
type generationJSON struct {
	Table      string `json:"table"`
	Generation uint64 `json:"generation,omitempty"`
	Current    bool   `json:"current"`
	Tablets    int    `json:"tablets"`
	Rows       uint64 `json:"rows"`
	Bytes      uint64 `json:"bytes"`
	Created    string `json:"created,omitempty"` // RFC 3339
	Error      string `json:"error,omitempty"`
}

// generationsJSON lists what printGenerations prints, newest generation
// first per table.
func generationsJSON(metas map[string][]*messages.TableMeta, current map[string]uint64, errs map[string]error, names []string) []generationJSON {
	out := []generationJSON{}
	for _, n := range names {
		if err := errs[n]; err != nil {
			out = append(out, generationJSON{Table: n, Error: err.Error()})
			continue
		}
		ms := metas[n]
		for i := len(ms) - 1; i >= 0; i-- {
			t := ms[i]
			out = append(out, generationJSON{Table: n, Generation: t.GetGeneration(), Current: t.GetGeneration() == current[n],
				Tablets: len(t.GetTablets()), Rows: t.GetRows(), Bytes: t.GetBytes(),
				Created: time.UnixMilli(t.GetCreatedUnixMs()).UTC().Format(time.RFC3339)})
		}
	}
	return out
}

// routeJSON is scanctl route --json.
type routeJSON struct {
	Table        string    `json:"table"`
	Generation   uint64    `json:"generation"`
	Tablet       uint32    `json:"tablet"`
	Start        string    `json:"start"` // "" = the table's start
	End          string    `json:"end"`   // "" = the table's end
	Profile      string    `json:"profile"`
	Policy       string    `json:"policy"`
	PlanIndex    int       `json:"plan_index"`
	Tried        []string  `json:"tried"`
	Candidates   []string  `json:"candidates"`
	Scores       []float64 `json:"scores,omitempty"`
	Choice       string    `json:"choice"`
	BusyTimeout  float64   `json:"busy_timeout_ms"`
	Delay        float64   `json:"delay_ms"`
	HedgeDelayMs float64   `json:"hedge_delay_ms"` // 0: no hedge
}

func printRouteJSON(out io.Writer, r *client.Route) error {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	t := r.Tablet
	doc := routeJSON{Table: t.Table, Generation: t.Generation, Tablet: t.Index, Start: tablets.FormatKey(t.Range.Start), End: tablets.FormatKey(t.Range.End),
		Profile: r.Profile, Policy: r.Policy, PlanIndex: r.PlanIndex, Tried: append([]string{}, r.Tried...), Candidates: append([]string{}, r.Candidates...),
		Scores: r.Scores, Choice: r.Choice, BusyTimeout: ms(r.BusyTimeout), Delay: ms(r.Delay), HedgeDelayMs: ms(r.HedgeDelay)}
	return writeJSON(out, doc)
}
