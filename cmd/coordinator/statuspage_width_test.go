package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/wire"
)

// pageWidth is the narrowest window the status page must fit without
// scrolling sideways.
const pageWidth = 1280

// wideStatus is the status of a cluster whose names and numbers are as
// long as a real one's get: three coordinators with pseudo-versions and
// NATS server ids for node names (no --nats-name), six scan servers with
// address ids and incarnations, counters in the hundred millions.
func wideStatus(now time.Time) *messages.StatusReply {
	const version = "v0.0.0-20261204185430-eaa0fa1abcde+dirty"
	big := uint64(123456789)
	ms := now.Add(-1300 * time.Millisecond).UnixMilli()
	st := &messages.StatusReply{MemberId: "UR7nFYa6vTg4Ku9cTVxVYT", Version: version, StartedUnixMs: now.Add(-26 * time.Hour).UnixMilli(),
		Address: "10.20.30.41:8090", ScansStarted: big, ScansFailed: big, Flows: 12345, Dispatches: big, Hedges: big, Busy: big,
		Timeouts: big, TabletActors: 123456, HostActors: 1234, DeadLetters: big, PublishErrors: big, BadMessages: big, Overloaded: big,
		Reforwarded: big, ActorFailures: big,
		ProfilesSummary: "default: accumulo-host, 3 plans\nbatch: scan_type=batch, group batch, ribbon-zone"}
	for i := range 3 {
		addr := fmt.Sprintf("10.20.30.4%d", i+1)
		st.Coordinators = append(st.Coordinators, &messages.ClusterInfo{MemberId: fmt.Sprintf("UR7nFYa6vTg4Ku9cTVxVY%d", i),
			CoordinatorAddress: addr + ":8090", HttpAddress: addr + ":8091", NatsNode: fmt.Sprintf("ND5GTASO3YVKCDQNEJWYLFNOTJBCR2L6JBULSYGZYX5NKPSNSQT2VWX%d", i), Version: version,
			TabletActors: 123456, RenewedUnixMs: ms})
		if i > 0 {
			st.Peers = append(st.Peers, &messages.StatusReply{Address: addr + ":8090", Version: version, ScansStarted: big, ScansFailed: big,
				Flows: 12345, Dispatches: big, Hedges: big, Overloaded: big, Reforwarded: big, ActorFailures: big, TabletActors: 123456})
		}
	}
	for h := range 3 {
		for s := range 2 {
			st.Servers = append(st.Servers, &messages.ServerStatus{Id: fmt.Sprintf("10.20.30.%d:34083/%d", 51+h, s),
				Host: fmt.Sprintf("scanhost-%02d", h+1), Zone: fmt.Sprintf("zone-%c", 'a'+h), Group: "default", Alive: h != 2,
				QueueLen: 1234, InFlight: 1234, Errors: 12.25, BusyTotal: big, Dispatched: big, CacheHitRatio: 0.9994,
				LastHeartbeatUnixMs: ms, Incarnation: "3f9a0c7be21d4a58", Timeouts: big, Slowdowns: 1234, StartLatencyUs: 1234567})
		}
	}
	st.Tables = []*messages.TableStatus{{Name: "events_2026_12", CurrentGeneration: 12345, CachedGenerations: []uint64{12344, 12345}}}
	return st
}

// TestStatusPageFitsWidth: the status page of a large cluster fits a
// 1280 px window. Always checked statically: each table's width estimated
// from its cells' text (a cell's text does not wrap; a header's may, at
// spaces) at the page's font size must fit. When a headless Chromium is
// installed (chromium-headless-shell or chromium on PATH) the page is
// also laid out by it at 1280 px and must not scroll sideways.
func TestStatusPageFitsWidth(t *testing.T) {
	now := time.Now()
	rec := httptest.NewRecorder()
	writeStatusPage(rec, wideStatus(now), now, "https")
	page := rec.Body.Bytes()

	// The server column shows host/index; the id and incarnation, left
	// out of the table, are in the cell's title.
	doc, err := html.Parse(bytes.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	var titles []string
	walk(doc, func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "td" && attrOf(n, "data-field") == "name" {
			titles = append(titles, text(n)+" "+attrOf(n, "title"))
		}
	})
	for i, s := range wideStatus(now).GetServers() {
		if want := wire.ServerLabel(s.Host, s.Id) + " id " + s.Id + ", incarnation " + s.Incarnation; i >= len(titles) || titles[i] != want {
			t.Errorf("server %d: name and title %q, want %q", i, titles, want)
		}
	}

	for id, w := range estimatedTableWidths(t, page) {
		t.Logf("table %s: about %d px", id, w)
		if w > pageWidth-2*bodyMarginPx {
			t.Errorf("table %s is about %d px wide, more than the %d px of a %d px window", id, w, pageWidth-2*bodyMarginPx, pageWidth)
		}
	}

	browser := ""
	for _, b := range []string{"chromium-headless-shell", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(b); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		t.Log("no headless Chromium on PATH: checked the estimated widths only")
		return
	}
	scroll, tables := layOut(t, browser, page)
	t.Logf("%s at %d px: page %d px wide, tables %v", filepath.Base(browser), pageWidth, scroll, tables)
	if scroll > pageWidth {
		t.Errorf("the page is %d px wide in a %d px window (tables' right edges: %v)", scroll, pageWidth, tables)
	}
}

// Layout figures of the page's style sheet: body margin 1.2em of 16 px,
// tables at 0.85em (13.6 px) with cells padded 0.45em each side and a
// 1 px border; header cells wrap at spaces, other cells do not, but for
// versions and NATS node names (td.wrap), which wrap anywhere within
// 11em. charPx is the
// width of a digit of DejaVu Sans at 13.6 px, one of the widest
// sans-serif system fonts, rounded up (lower case is narrower);
// headerCharPx that of its semi-bold header text.
const (
	bodyMarginPx = 20
	charPx       = 9
	headerCharPx = 10
	cellExtraPx  = 2*7 + 1
	versionMaxPx = 150 // 11em
)

// estimatedTableWidths estimates each table's width: per column the
// widest cell (a td's whole text, a th's longest word, as headers wrap at
// spaces), as charPx per character plus padding and border.
func estimatedTableWidths(t *testing.T, page []byte) map[string]int {
	t.Helper()
	doc, err := html.Parse(bytes.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "table" {
			var cols []int
			var rows func(n *html.Node)
			rows = func(n *html.Node) {
				if n.Type == html.ElementNode && n.Data == "tr" {
					i := 0
					for c := n.FirstChild; c != nil; c = c.NextSibling {
						if c.Type != html.ElementNode || (c.Data != "td" && c.Data != "th") {
							continue
						}
						w := len([]rune(strings.TrimSpace(text(c)))) * charPx
						if c.Data == "td" && slices.Contains(strings.Fields(attrOf(c, "class")), "wrap") {
							w = min(w, versionMaxPx)
						}
						if c.Data == "th" {
							w = 0
							for _, word := range strings.Fields(text(c)) {
								w = max(w, len([]rune(word))*headerCharPx)
							}
						}
						if i == len(cols) {
							cols = append(cols, 0)
						}
						cols[i] = max(cols[i], w+cellExtraPx)
						i++
					}
					return
				}
				for c := n.FirstChild; c != nil; c = c.NextSibling {
					rows(c)
				}
			}
			rows(n)
			sum := 1
			for _, w := range cols {
				sum += w
			}
			out[attrOf(n, "id")] = sum
			return
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	if len(out) < 5 {
		t.Fatalf("found %d tables in the page, want its 6", len(out))
	}
	return out
}

// layOut has browser lay the page out in a pageWidth-wide window and
// returns the document's scroll width and each table's right edge, which
// a script added to the page writes into the DOM that --dump-dom prints.
func layOut(t *testing.T, browser string, page []byte) (int, map[string]int) {
	t.Helper()
	const probe = `<script>
document.body.setAttribute("data-scroll-width", document.documentElement.scrollWidth);
for (const tb of document.querySelectorAll("table")) tb.setAttribute("data-right", Math.ceil(tb.getBoundingClientRect().right));
</script>
</body>`
	dir := t.TempDir()
	file := filepath.Join(dir, "status.html")
	// No reload: the page refreshes itself every 2 s.
	p := strings.Replace(string(page), `<meta http-equiv="refresh" content="2">`, "", 1)
	if err := os.WriteFile(file, []byte(strings.Replace(p, "</body>", probe, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--user-data-dir="+filepath.Join(dir, "profile"), fmt.Sprintf("--window-size=%d,900", pageWidth), "--dump-dom", "file://"+file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", browser, err, stderr.String())
	}
	m := regexp.MustCompile(`data-scroll-width="(\d+)"`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("%s printed no data-scroll-width:\n%s\n%s", browser, out, stderr.String())
	}
	scroll, _ := strconv.Atoi(string(m[1]))
	tables := map[string]int{}
	for _, tm := range regexp.MustCompile(`<table id="(\w+)" data-right="(\d+)"`).FindAllSubmatch(out, -1) {
		tables[string(tm[1])], _ = strconv.Atoi(string(tm[2]))
	}
	return scroll, tables
}
