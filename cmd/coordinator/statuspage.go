package main

import (
	"bytes"
	"cmp"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/wire"
)

// The coordinator's HTML status page (GET /): the same StatusReply as
// /status, for a person. It reloads itself every 2 seconds. Cells carry
// data-field attributes naming the StatusReply field they show (the test
// and scripts read them); hosts aggregate their servers.

// pageHost is one row of the hosts table.
type pageHost struct {
	Host, Zone          string
	Alive, Servers      int
	Queue, InFlight     uint64
	Dispatched, Busy    uint64
	Timeouts            uint64
	CacheHitRatio       float64 // the highest of its servers' (they share one cache)
	LastHeartbeatMillis int64
}

// pageData is what the template renders.
type pageData struct {
	St          *messages.StatusReply
	Hosts       []pageHost
	Now         time.Time
	AliveCount  int
	ProfileList []string
	// Scheme of the links to the coordinators' pages: https when this
	// page was served over TLS (--secrets secures every coordinator of a
	// cluster alike), else http.
	Scheme string
	// Cluster: this coordinator's counters and every peer's that
	// answered (StatusReply.peers); Total sums them.
	Cluster []*messages.StatusReply
	Total   *messages.StatusReply
}

// clusterRows lists st and its peers, and their sum.
func clusterRows(st *messages.StatusReply) ([]*messages.StatusReply, *messages.StatusReply) {
	rows := append([]*messages.StatusReply{st}, st.GetPeers()...)
	t := &messages.StatusReply{Address: "total"}
	for _, r := range rows {
		t.ScansStarted += r.GetScansStarted()
		t.ScansFailed += r.GetScansFailed()
		t.Flows += r.GetFlows()
		t.Dispatches += r.GetDispatches()
		t.Hedges += r.GetHedges()
		t.Overloaded += r.GetOverloaded()
		t.Reforwarded += r.GetReforwarded()
		t.ActorFailures += r.GetActorFailures()
		t.TabletActors += r.GetTabletActors()
	}
	return rows, t
}

// hostRows aggregates servers by host, sorted by host.
func hostRows(st *messages.StatusReply) []pageHost {
	var hosts []pageHost
	index := map[string]int{}
	for _, s := range st.Servers {
		i, ok := index[s.Host]
		if !ok {
			i = len(hosts)
			index[s.Host] = i
			hosts = append(hosts, pageHost{Host: s.Host, Zone: s.Zone})
		}
		h := &hosts[i]
		h.Servers++
		if s.Alive {
			h.Alive++
		}
		h.Queue += uint64(s.QueueLen)
		h.InFlight += uint64(s.InFlight)
		h.Dispatched += s.Dispatched
		h.Busy += s.BusyTotal
		h.Timeouts += s.Timeouts
		h.CacheHitRatio = max(h.CacheHitRatio, s.CacheHitRatio)
		h.LastHeartbeatMillis = max(h.LastHeartbeatMillis, s.LastHeartbeatUnixMs)
	}
	slices.SortStableFunc(hosts, func(a, b pageHost) int { return cmp.Compare(a.Host, b.Host) })
	return hosts
}

var pageFuncs = template.FuncMap{
	"yesno": func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	},
	"pct": func(r float64) string { return fmt.Sprintf("%.1f%%", 100*r) },
	// serverName is a server's stable name, host/index (its id and
	// incarnation are in the cell's title).
	"serverName": wire.ServerLabel,
	"gens":       formatGens,
	"errs":       func(e float64) string { return fmt.Sprintf("%.2f", e) },
	// us renders a start-latency estimate in microseconds.
	"us": func(us int64) string {
		if us <= 0 {
			return "-"
		}
		return (time.Duration(us) * time.Microsecond).Round(10 * time.Microsecond).String()
	},
	// ago renders how long before now a unix-millisecond time was.
	"ago": func(now time.Time, ms int64) string {
		if ms <= 0 {
			return "never"
		}
		d := now.Sub(time.UnixMilli(ms))
		if d < 0 {
			d = 0
		}
		return d.Round(100*time.Millisecond).String() + " ago"
	},
	"since": func(now time.Time, ms int64) string {
		if ms <= 0 {
			return "-"
		}
		return time.UnixMilli(ms).UTC().Format(time.RFC3339) + " (up " + now.Sub(time.UnixMilli(ms)).Round(time.Second).String() + ")"
	},
}

var statusPageTemplate = template.Must(template.New("status").Funcs(pageFuncs).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="2">
<title>scanplane coordinator {{.St.MemberId}}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.2em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.4em; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.45em; text-align: right; }
td { white-space: nowrap; }
th { background: #f0f0f0; font-weight: 600; vertical-align: bottom; }
td.text, th.text { text-align: left; }
td.wrap { white-space: normal; overflow-wrap: anywhere; max-width: 11em; }
tr.dead td { background: #fdd; } td.no { color: #b00; font-weight: bold; }
.muted { color: #777; font-size: 0.85em; }
</style>
</head>
<body>
<h1>scanplane coordinator</h1>
<p class="muted">version <span id="version" data-field="version">{{.St.Version}}</span> · member {{or .St.MemberId "-"}} · started {{since .Now .St.StartedUnixMs}} · {{.AliveCount}} of {{len .St.Servers}} scan servers alive · this page reloads every 2 s; the same data as JSON: <a href="status">/status</a>, metrics: <a href="metrics">/metrics</a></p>

<h2>Scans</h2>
<table id="summary">
<tr><th>scans started</th><th>failed</th><th>in flight</th><th>dispatches</th><th>hedges</th><th>busy</th><th>timeouts</th></tr>
<tr><td data-field="scans_started">{{.St.ScansStarted}}</td><td data-field="scans_failed">{{.St.ScansFailed}}</td><td data-field="flows">{{.St.Flows}}</td><td data-field="dispatches">{{.St.Dispatches}}</td><td data-field="hedges">{{.St.Hedges}}</td><td data-field="busy">{{.St.Busy}}</td><td data-field="timeouts">{{.St.Timeouts}}</td></tr>
<tr><th>tablet actors</th><th>host actors</th><th>dead letters</th><th>publish errors</th><th>bad messages</th><th>overloaded</th><th></th></tr>
<tr><td data-field="tablet_actors">{{.St.TabletActors}}</td><td data-field="host_actors">{{.St.HostActors}}</td><td data-field="dead_letters">{{.St.DeadLetters}}</td><td data-field="publish_errors">{{.St.PublishErrors}}</td><td data-field="bad_messages">{{.St.BadMessages}}</td><td data-field="overloaded">{{.St.Overloaded}}</td><td></td></tr>
</table>

<h2>Cluster</h2>
<table id="cluster">
<thead><tr><th class="text">coordinator</th><th class="text">version</th><th>scans started</th><th>failed</th><th>in flight</th><th>dispatches</th><th>hedges</th><th>overloaded</th><th>reforwarded</th><th>actor failures</th><th>tablet actors</th></tr></thead>
<tbody>
{{- range .Cluster}}
<tr><td class="text" data-field="address">{{.Address}}</td><td class="text wrap" data-field="version">{{.Version}}</td><td data-field="scans_started">{{.ScansStarted}}</td><td data-field="scans_failed">{{.ScansFailed}}</td><td data-field="flows">{{.Flows}}</td><td data-field="dispatches">{{.Dispatches}}</td><td data-field="hedges">{{.Hedges}}</td><td data-field="overloaded">{{.Overloaded}}</td><td data-field="reforwarded">{{.Reforwarded}}</td><td data-field="actor_failures">{{.ActorFailures}}</td><td data-field="tablet_actors">{{.TabletActors}}</td></tr>
{{- end}}
{{- with .Total}}
<tr class="total"><td class="text" data-field="address">{{.Address}}</td><td class="text wrap" data-field="version"></td><td data-field="scans_started">{{.ScansStarted}}</td><td data-field="scans_failed">{{.ScansFailed}}</td><td data-field="flows">{{.Flows}}</td><td data-field="dispatches">{{.Dispatches}}</td><td data-field="hedges">{{.Hedges}}</td><td data-field="overloaded">{{.Overloaded}}</td><td data-field="reforwarded">{{.Reforwarded}}</td><td data-field="actor_failures">{{.ActorFailures}}</td><td data-field="tablet_actors">{{.TabletActors}}</td></tr>
{{- end}}
</tbody>
</table>

<h2>Hosts</h2>
<table id="hosts">
<thead><tr><th class="text">host</th><th class="text">zone</th><th>servers alive</th><th>queue</th><th>in flight</th><th>dispatched</th><th>busy</th><th>timeouts</th><th>cache hit ratio</th><th>last heartbeat</th></tr></thead>
<tbody>
{{- range .Hosts}}
<tr{{if eq .Alive 0}} class="dead"{{end}}><td class="text" data-field="host">{{.Host}}</td><td class="text" data-field="zone">{{.Zone}}</td><td data-field="alive">{{.Alive}}/{{.Servers}}</td><td data-field="queue_len">{{.Queue}}</td><td data-field="in_flight">{{.InFlight}}</td><td data-field="dispatched">{{.Dispatched}}</td><td data-field="busy_total">{{.Busy}}</td><td data-field="timeouts">{{.Timeouts}}</td><td data-field="cache_hit_ratio">{{pct .CacheHitRatio}}</td><td data-field="last_heartbeat_unix_ms">{{ago $.Now .LastHeartbeatMillis}}</td></tr>
{{- end}}
</tbody>
</table>

<h2>Scan servers</h2>
<table id="servers">
<thead><tr><th class="text">server</th><th class="text">group</th><th>alive</th><th>queue</th><th>in flight</th><th>start latency</th><th>errors</th><th>dispatched</th><th>busy</th><th>timeouts</th><th>slowdowns</th><th>cache hit ratio</th><th>last heartbeat</th></tr></thead>
<tbody>
{{- range .St.Servers}}
<tr{{if not .Alive}} class="dead"{{end}}><td class="text" data-field="name" title="id {{.Id}}, incarnation {{.Incarnation}}">{{serverName .Host .Id}}</td><td class="text" data-field="group">{{.Group}}</td><td class="{{yesno .Alive}}" data-field="alive">{{yesno .Alive}}</td><td data-field="queue_len">{{.QueueLen}}</td><td data-field="in_flight">{{.InFlight}}</td><td data-field="start_latency_us">{{us .StartLatencyUs}}</td><td data-field="errors">{{errs .Errors}}</td><td data-field="dispatched">{{.Dispatched}}</td><td data-field="busy_total">{{.BusyTotal}}</td><td data-field="timeouts">{{.Timeouts}}</td><td data-field="slowdowns">{{.Slowdowns}}</td><td data-field="cache_hit_ratio">{{pct .CacheHitRatio}}</td><td data-field="last_heartbeat_unix_ms">{{ago $.Now .LastHeartbeatUnixMs}}</td></tr>
{{- end}}
</tbody>
</table>

<h2>Tables</h2>
<table id="tables">
<thead><tr><th class="text">table</th><th>current generation</th><th class="text">cached generations</th></tr></thead>
<tbody>
{{- range .St.Tables}}
<tr><td class="text" data-field="name">{{.Name}}</td><td data-field="current_generation">{{.CurrentGeneration}}</td><td class="text" data-field="cached_generations">{{gens .CachedGenerations}}</td></tr>
{{- end}}
</tbody>
</table>

<h2>Coordinators</h2>
<table id="coordinators">
<thead><tr><th class="text">member</th><th class="text">actor address</th><th class="text">http</th><th class="text">nats node</th><th class="text">version</th><th>tablet actors</th><th>lease renewed</th></tr></thead>
<tbody>
{{- range .St.Coordinators}}
<tr><td class="text" data-field="member_id">{{.MemberId}}</td><td class="text" data-field="coordinator_address">{{.CoordinatorAddress}}</td><td class="text" data-field="http_address">{{if .HttpAddress}}<a href="{{$.Scheme}}://{{.HttpAddress}}/">{{.HttpAddress}}</a>{{end}}</td><td class="text wrap" data-field="nats_node">{{.NatsNode}}</td><td class="text wrap" data-field="version">{{.Version}}</td><td data-field="tablet_actors">{{.TabletActors}}</td><td data-field="renewed_unix_ms">{{ago $.Now .RenewedUnixMs}}</td></tr>
{{- end}}
</tbody>
</table>

<h2>Profiles</h2>
<ul id="profiles">
{{- range .ProfileList}}
<li><code>{{.}}</code></li>
{{- end}}
</ul>
</body>
</html>
`))

// formatGens renders generations as "3 4", or "-" for none.
func formatGens(gens []uint64) string {
	if len(gens) == 0 {
		return "-"
	}
	s := make([]string, len(gens))
	for i, g := range gens {
		s[i] = strconv.FormatUint(g, 10)
	}
	return strings.Join(s, " ")
}

// writeStatusPage renders st as the HTML status page; its links to the
// coordinators use scheme (http or https).
func writeStatusPage(w http.ResponseWriter, st *messages.StatusReply, now time.Time, scheme string) {
	d := pageData{St: st, Hosts: hostRows(st), Now: now, Scheme: scheme}
	d.Cluster, d.Total = clusterRows(st)
	for _, s := range st.Servers {
		if s.Alive {
			d.AliveCount++
		}
	}
	for _, l := range strings.Split(st.ProfilesSummary, "\n") {
		if l != "" {
			d.ProfileList = append(d.ProfileList, l)
		}
	}
	var buf bytes.Buffer
	if err := statusPageTemplate.Execute(&buf, d); err != nil {
		http.Error(w, "rendering the status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}
