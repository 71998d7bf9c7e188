package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/wire"
)

// TestStatusPage starts a real coordinator and two scanserver processes
// (two servers each, two zones), fetches the HTML page at / and checks its
// tables against /status: the same servers with the same fields, hosts
// aggregating them, the counters; then kills one scanserver and checks that
// the page shows its servers dead, as /status does.
func TestStatusPage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := clustertest.Start(t, ctx, localcluster.Config{Hosts: 2, ServersPerHost: 2, Zones: 2, Heartbeat: 200 * time.Millisecond})
	defer http.DefaultClient.CloseIdleConnections()
	addr := cl.HTTPAddr(0)

	scanSome(t, ctx, cl.NATSURL()) // so that counters, latencies and cache ratios are not all zero

	doc := fetchPage(t, ctx, addr)
	if c := attrOf(find(doc, func(n *html.Node) bool { return n.Data == "meta" && attrOf(n, "http-equiv") == "refresh" }), "content"); c != "2" {
		t.Errorf(`<meta http-equiv="refresh"> content %q, want "2"`, c)
	}
	st := samePage(t, ctx, addr, func(st *messages.StatusReply) bool { return aliveCount(st) == 4 })
	if len(st.Servers) != 4 || len(st.Coordinators) != 1 || st.Dispatches == 0 || st.ScansStarted == 0 {
		t.Fatalf("/status: %d servers, %d coordinators, %d dispatches, %d scans; want 4, 1 and some", len(st.Servers), len(st.Coordinators), st.Dispatches, st.ScansStarted)
	}
	// Version and tables: the one table scanSome ingested (generation 1),
	// whose metadata the scans loaded.
	if st.Version == "" || st.Version != st.Coordinators[0].Version {
		t.Errorf("/status version %q, its lease's %q: want the same build version", st.Version, st.Coordinators[0].Version)
	}
	if v := text(find(doc, func(n *html.Node) bool { return attrOf(n, "id") == "version" })); v != st.Version {
		t.Errorf("page version %q, /status %q", v, st.Version)
	}
	if len(st.Tables) != 1 || st.Tables[0].Name != "page" || st.Tables[0].CurrentGeneration != 1 ||
		!reflect.DeepEqual(st.Tables[0].CachedGenerations, []uint64{1}) {
		t.Errorf("/status tables %v, want page at generation 1, cached", st.Tables)
	}

	if err := cl.Kill(1); err != nil {
		t.Fatal(err)
	}
	st = samePage(t, ctx, addr, func(st *messages.StatusReply) bool { return aliveCount(st) == 2 })
	dead := 0
	for _, s := range st.Servers {
		if !s.Alive {
			dead++
			if s.Host != localcluster.HostName(1) {
				t.Errorf("server %s of %s is dead; only %s was killed", s.Id, s.Host, localcluster.HostName(1))
			}
		}
	}
	if dead != 2 {
		t.Errorf("%d dead servers in /status, want 2", dead)
	}
}

// scanSome ingests a small table into the cluster behind natsURL and scans
// it whole, twice.
func scanSome(t *testing.T, ctx context.Context, natsURL string) {
	t.Helper()
	rows := tablets.GenerateRows(4000)
	clustertest.Ingest(t, ctx, natsURL, nil, "page", rows, 4)
	c := clustertest.Client(t, ctx, natsURL, nil)
	defer c.Close()
	for range 2 {
		rs := c.Scan(ctx, "page", tablets.Range{}, client.ScanOptions{})
		n := 0
		for rs.Next() {
			n++
		}
		err := rs.Err()
		rs.Close()
		if err != nil || n != len(rows) {
			t.Fatalf("scan: %d rows of %d, %v", n, len(rows), err)
		}
	}
}

func aliveCount(st *messages.StatusReply) int {
	n := 0
	for _, s := range st.Servers {
		if s.Alive {
			n++
		}
	}
	return n
}

// samePage polls until /status satisfies ready and reads the same before
// and after a fetch of /, then requires the page's tables to show that
// status; it returns it.
func samePage(t *testing.T, ctx context.Context, addr string, ready func(*messages.StatusReply) bool) *messages.StatusReply {
	t.Helper()
	var before *messages.StatusReply
	var doc *html.Node
	testutil.EventuallyErr(t, 30*time.Second, "/status to settle", func() error {
		var err error
		if before, err = localcluster.FetchStatus(ctx, addr); err != nil {
			t.Fatal(err)
		}
		doc = fetchPage(t, ctx, addr)
		after, err := localcluster.FetchStatus(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		if !ready(before) || !reflect.DeepEqual(wantTables(before), wantTables(after)) {
			return fmt.Errorf("%d of %d servers alive", aliveCount(after), len(after.Servers))
		}
		return nil
	})
	want, got := wantTables(before), pageTables(doc)
	for _, table := range []string{"summary", "hosts", "servers", "tables", "coordinators"} {
		if !reflect.DeepEqual(got[table], want[table]) {
			t.Errorf("table %s of / is\n\t%v\nwant (from /status)\n\t%v", table, got[table], want[table])
		}
	}
	return before
}

// wantTables is what the page's tables must show for st: table id → rows
// → data-field → text. Fields whose text depends on the time of the
// request (heartbeat and lease ages) are left out.
func wantTables(st *messages.StatusReply) map[string][]map[string]string {
	u := func(v uint64) string { return fmt.Sprint(v) }
	out := map[string][]map[string]string{
		"summary": {{"scans_started": u(st.ScansStarted), "scans_failed": u(st.ScansFailed), "flows": fmt.Sprint(st.Flows),
			"dispatches": u(st.Dispatches), "hedges": u(st.Hedges), "busy": u(st.Busy), "timeouts": u(st.Timeouts)},
			{"tablet_actors": fmt.Sprint(st.TabletActors), "host_actors": fmt.Sprint(st.HostActors), "dead_letters": u(st.DeadLetters),
				"publish_errors": u(st.PublishErrors), "bad_messages": u(st.BadMessages), "overloaded": u(st.Overloaded)}},
	}
	type host struct {
		zone                                        string
		alive, servers                              int
		queue, inFlight, dispatched, busy, timeouts uint64
		hit                                         float64
	}
	hosts := map[string]*host{}
	var order []string
	for _, s := range st.Servers {
		alive := "no"
		if s.Alive {
			alive = "yes"
		}
		lat := "-"
		if s.StartLatencyUs > 0 {
			lat = (time.Duration(s.StartLatencyUs) * time.Microsecond).Round(10 * time.Microsecond).String()
		}
		out["servers"] = append(out["servers"], map[string]string{"name": wire.ServerLabel(s.Host, s.Id), "group": s.Group,
			"alive": alive, "queue_len": fmt.Sprint(s.QueueLen), "in_flight": fmt.Sprint(s.InFlight), "start_latency_us": lat,
			"errors": fmt.Sprintf("%.2f", s.Errors), "dispatched": u(s.Dispatched), "busy_total": u(s.BusyTotal),
			"timeouts": u(s.Timeouts), "slowdowns": fmt.Sprint(s.Slowdowns), "cache_hit_ratio": fmt.Sprintf("%.1f%%", 100*s.CacheHitRatio)})
		h := hosts[s.Host]
		if h == nil {
			h = &host{zone: s.Zone}
			hosts[s.Host] = h
			order = append(order, s.Host)
		}
		h.servers++
		if s.Alive {
			h.alive++
		}
		h.queue += uint64(s.QueueLen)
		h.inFlight += uint64(s.InFlight)
		h.dispatched += s.Dispatched
		h.busy += s.BusyTotal
		h.timeouts += s.Timeouts
		h.hit = max(h.hit, s.CacheHitRatio)
	}
	for _, name := range order { // /status sorts servers by host
		h := hosts[name]
		out["hosts"] = append(out["hosts"], map[string]string{"host": name, "zone": h.zone, "alive": fmt.Sprintf("%d/%d", h.alive, h.servers),
			"queue_len": u(h.queue), "in_flight": u(h.inFlight), "dispatched": u(h.dispatched), "busy_total": u(h.busy),
			"timeouts": u(h.timeouts), "cache_hit_ratio": fmt.Sprintf("%.1f%%", 100*h.hit)})
	}
	for _, tb := range st.Tables {
		gens := "-"
		if len(tb.CachedGenerations) > 0 {
			gens = strings.Trim(fmt.Sprint(tb.CachedGenerations), "[]")
		}
		out["tables"] = append(out["tables"], map[string]string{"name": tb.Name, "current_generation": u(tb.CurrentGeneration),
			"cached_generations": gens})
	}
	rows, total := clusterRows(st)
	for _, r := range append(rows, total) {
		version := r.Version
		if r == total {
			version = ""
		}
		out["cluster"] = append(out["cluster"], map[string]string{"address": r.Address, "version": version,
			"scans_started": u(r.ScansStarted), "scans_failed": u(r.ScansFailed), "flows": fmt.Sprint(r.Flows),
			"dispatches": u(r.Dispatches), "hedges": u(r.Hedges), "overloaded": u(r.Overloaded), "reforwarded": u(r.Reforwarded),
			"actor_failures": u(r.ActorFailures), "tablet_actors": fmt.Sprint(r.TabletActors)})
	}
	for _, c := range st.Coordinators {
		out["coordinators"] = append(out["coordinators"], map[string]string{"member_id": c.MemberId, "coordinator_address": c.CoordinatorAddress,
			"http_address": c.HttpAddress, "nats_node": c.NatsNode, "version": c.Version, "tablet_actors": fmt.Sprint(c.TabletActors)})
	}
	return out
}

// timeFields are cells whose text depends on when the page was rendered.
var timeFields = map[string]bool{"last_heartbeat_unix_ms": true, "renewed_unix_ms": true}

// pageTables reads every <table id=…> of doc: its rows (those with
// data-field cells) as data-field → text.
func pageTables(doc *html.Node) map[string][]map[string]string {
	out := map[string][]map[string]string{}
	walk(doc, func(n *html.Node) {
		if n.Type != html.ElementNode || n.Data != "table" || attrOf(n, "id") == "" {
			return
		}
		id := attrOf(n, "id")
		walk(n, func(tr *html.Node) {
			if tr.Type != html.ElementNode || tr.Data != "tr" {
				return
			}
			row := map[string]string{}
			for td := tr.FirstChild; td != nil; td = td.NextSibling {
				if f := attrOf(td, "data-field"); td.Type == html.ElementNode && td.Data == "td" && f != "" && !timeFields[f] {
					row[f] = strings.TrimSpace(text(td))
				}
			}
			if len(row) > 0 {
				out[id] = append(out[id], row)
			}
		})
	})
	return out
}

func fetchPage(t *testing.T, ctx context.Context, addr string) *html.Node {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		t.Fatalf("GET /: %s, %s: %s", res.Status, res.Header.Get("Content-Type"), b)
	}
	doc, err := html.Parse(res.Body)
	if err != nil {
		t.Fatalf("GET /: %v", err)
	}
	return doc
}

func walk(n *html.Node, f func(*html.Node)) {
	f(n)
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		walk(c, f)
	}
}

func find(doc *html.Node, pred func(*html.Node) bool) *html.Node {
	var found *html.Node
	walk(doc, func(n *html.Node) {
		if found == nil && n.Type == html.ElementNode && pred(n) {
			found = n
		}
	})
	return found
}

func attrOf(n *html.Node, key string) string {
	if n == nil {
		return ""
	}
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func text(n *html.Node) string {
	var b strings.Builder
	walk(n, func(c *html.Node) {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		}
	})
	return b.String()
}

func TestBuildVersion(t *testing.T) {
	if buildVersion() == "" {
		t.Error("buildVersion is empty")
	}
}
