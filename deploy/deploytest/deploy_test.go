package deploytest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

// The files under test, relative to this package's directory.
var (
	alertsFile     = filepath.Join("..", "prometheus", "alerts.yml")
	prometheusFile = filepath.Join("..", "prometheus", "prometheus.yml")
	dashboardFile  = filepath.Join("..", "grafana", "scanplane.json")
)

var promqlParser = parser.NewParser(parser.Options{})

// loadRules parses alerts.yml with Prometheus's own rule-file parser, as
// `promtool check rules` and the Prometheus server do (unknown fields are
// errors).
func loadRules(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	groups, errs := rulefmt.ParseFile(alertsFile, false, model.LegacyValidation, promqlParser, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	return groups
}

// query is one PromQL expression of the files under test and where it is.
type query struct {
	where string
	expr  string
}

// ruleQueries returns every rule's expr.
func ruleQueries(t *testing.T) []query {
	var qs []query
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			qs = append(qs, query{where: fmt.Sprintf("%s: group %s, alert %s", alertsFile, g.Name, r.Alert+r.Record), expr: r.Expr})
		}
	}
	return qs
}

// dashboard is the part of Grafana's dashboard JSON model this test reads.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID      int     `json:"id"`
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"` // a collapsed row's panels
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// grafanaVars replaces the dashboard's variables by values PromQL parses:
// Grafana's interval variables by durations, $host (a multi-value regex
// variable) by a regex matching every host.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", `"$host"`, `".*"`)

var labelValuesRE = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// dashboardQueries returns every panel target's expr and every query
// variable's label_values() selector (as `selector` with the label in
// a by clause, so that the label is checked too), with Grafana's
// variables replaced.
func dashboardQueries(t *testing.T, d dashboard) []query {
	var qs []query
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				qs = append(qs, query{where: fmt.Sprintf("%s: panel %d %q, target %s", dashboardFile, p.ID, p.Title, tg.RefID), expr: grafanaVars.Replace(tg.Expr)})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q := v.Query
		if m, ok := q.(map[string]any); ok {
			q = m["query"]
		}
		s, _ := q.(string)
		m := labelValuesRE.FindStringSubmatch(s)
		if m == nil {
			t.Errorf("%s: variable %s: query %v: want label_values(selector, label)", dashboardFile, v.Name, v.Query)
			continue
		}
		qs = append(qs, query{where: fmt.Sprintf("%s: variable %s", dashboardFile, v.Name), expr: fmt.Sprintf("count by (%s) (%s)", m[2], m[1])})
	}
	return qs
}

// scrapeJobs returns the job names of prometheus.yml.
func scrapeJobs(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(prometheusFile)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName string `yaml:"job_name"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("%s: %v", prometheusFile, err)
	}
	if len(cfg.RuleFiles) != 1 || cfg.RuleFiles[0] != filepath.Base(alertsFile) {
		t.Errorf("%s: rule_files %v, want [%s]", prometheusFile, cfg.RuleFiles, filepath.Base(alertsFile))
	}
	var jobs []string
	for _, sc := range cfg.ScrapeConfigs {
		jobs = append(jobs, sc.JobName)
	}
	return jobs
}

// TestFilesParse checks the rules with Prometheus's rule parser and every
// dashboard query with its PromQL parser, without a cluster.
func TestFilesParse(t *testing.T) {
	groups := loadRules(t)
	alerts := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("%s: alert %s: want a severity label and a summary annotation", alertsFile, r.Alert)
			}
		}
	}
	if alerts < 4 {
		t.Errorf("%s: %d alerts", alertsFile, alerts)
	}
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("%s: title %q uid %q: want both", dashboardFile, d.Title, d.UID)
	}
	ids := map[int]bool{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("%s: panel id %d twice", dashboardFile, p.ID)
			}
			ids[p.ID] = true
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("%s: panel %d %q has no query", dashboardFile, p.ID, p.Title)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	qs := dashboardQueries(t, d)
	if len(qs) < 10 {
		t.Errorf("%s: %d queries", dashboardFile, len(qs))
	}
	for _, q := range qs {
		if strings.Contains(q.expr, "$") {
			t.Errorf("%s: a Grafana variable this test does not know: %s", q.where, q.expr)
			continue
		}
		if _, err := promqlParser.ParseExpr(q.expr); err != nil {
			t.Errorf("%s: %v", q.where, err)
		}
	}
	if jobs := scrapeJobs(t); len(jobs) != 2 {
		t.Errorf("%s: jobs %v", prometheusFile, jobs)
	}
}

// TestMetricNamesExist starts a real coordinator and scanserver (with
// --http), ingests a small table and scans it twice (so the block fetch
// histogram has cache and store series), scrapes both /metrics, and checks
// that every metric, label and label value that a rule or dashboard query
// selects or groups by is exposed: a renamed metric or label fails here.
func TestMetricNamesExist(t *testing.T) {
	exp, jobs := scrapeCluster(t)
	qs := append(ruleQueries(t), dashboardQueries(t, loadDashboard(t))...)
	for _, q := range qs {
		for _, err := range exp.check(q.expr, jobs) {
			t.Errorf("%s: %v\n\t%s", q.where, err, q.expr)
		}
	}
	// The coordinator's scan, selection, per-server and NATS metrics
	// (docs/operations.md, Metrics), with their labels, after the scans.
	for name, lbls := range map[string][]string{
		"scanplane_coordinator_scan_seconds_bucket":           {"profile", "policy", "outcome", "le"},
		"scanplane_coordinator_scan_first_row_seconds_bucket": {"profile", "policy", "outcome", "le"},
		"scanplane_coordinator_selection_seconds_bucket":      {"policy", "le"},
		"scanplane_coordinator_load_view_rebuilds_total":      nil,
		"scanplane_coordinator_load_view_rebuild_seconds_sum": nil,
		"scanplane_coordinator_dead_letters_total":            nil,
		"scanplane_coordinator_nats_errors_total":             {"op"},
		"scanplane_coordinator_server_dispatches_total":       {"server", "host", "zone"},
		"scanplane_coordinator_server_hedges_total":           {"server", "host", "zone"},
		"scanplane_coordinator_server_busy_total":             {"server", "host", "zone"},
		"scanplane_coordinator_server_timeouts_total":         {"server", "host", "zone"},
		"scanplane_coordinator_server_errors_total":           {"server", "host", "zone"},
		"scanplane_coordinator_server_in_flight":              {"server", "host", "zone"},
		"scanplane_coordinator_server_start_latency_seconds":  {"server", "host", "zone"},
		"scanplane_coordinator_server_alive":                  {"server", "host", "zone"},
	} {
		have, ok := exp[name]
		if !ok {
			t.Errorf("the coordinator does not expose %s after scans", name)
			continue
		}
		for _, l := range lbls {
			if len(have[l]) == 0 && l != "le" {
				t.Errorf("%s: no label %s (has %v)", name, l, keys(have))
			}
		}
	}
	if got := exp["scanplane_coordinator_scan_seconds_bucket"]["outcome"]; !got["ok"] {
		t.Errorf("scan_seconds outcomes %v after successful scans, want ok", keys(got))
	}
	if got := exp["scanplane_coordinator_server_dispatches_total"]["server"]; len(got) != 2 {
		t.Errorf("per-server series for servers %v, want the cluster's 2", keys(got))
	}
	// The server label is "<host>/<index>", stable over restarts, never
	// the process's ephemeral actor address; server_info maps each
	// server to its address.
	stable := regexp.MustCompile(`^[A-Za-z0-9_-]+/[0-9]+$`)
	for _, name := range []string{"scanplane_scanserver_workers", "scanplane_scanserver_server_info",
		"scanplane_coordinator_server_alive", "scanplane_coordinator_server_info"} {
		got := exp[name]["server"]
		if len(got) != 2 {
			t.Errorf("%s: servers %v, want the cluster's 2", name, keys(got))
		}
		for s := range got {
			if !stable.MatchString(s) {
				t.Errorf("%s{server=%q}: want <host>/<index>", name, s)
			}
		}
	}
	for _, name := range []string{"scanplane_scanserver_server_info", "scanplane_coordinator_server_info"} {
		if addrs := exp[name]["address"]; len(addrs) != 1 || !strings.Contains(keys(addrs)[0], ":") {
			t.Errorf("%s: addresses %v, want the scan-server process's one host:port", name, keys(addrs))
		}
	}
	// The checker itself: each of these must be refused.
	for _, bad := range []string{
		`scanplane_coordinator_no_such_total`,
		`rate(scanplane_scanserver_busy_total{hots="host1"}[5m])`,
		`sum by (hots) (scanplane_scanserver_busy_total)`,
		`scanplane_scanserver_scans_finished_total{outcome="okay"}`,
		`scanplane_scanserver_scans_finished_total{outcome!~"ok|canceled"}`,
		`histogram_quantile(0.99, sum by (le) (rate(scanplane_scanserver_scans_total_bucket[5m])))`,
		`up{job="scanplane"}`,
		`up`,
	} {
		if errs := exp.check(bad, jobs); len(errs) == 0 {
			t.Errorf("check(%s) found nothing wrong", bad)
		}
	}
}

// exposition is what the scraped processes expose: metric name → label
// name → values seen. A histogram family adds its _bucket (with le),
// _sum and _count series, and itself (a native histogram's name).
type exposition map[string]map[string]map[string]bool

func (e exposition) add(mf *dto.MetricFamily) {
	names := []string{mf.GetName()}
	switch mf.GetType() {
	case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
		names = append(names, mf.GetName()+"_bucket", mf.GetName()+"_sum", mf.GetName()+"_count")
	case dto.MetricType_SUMMARY:
		names = append(names, mf.GetName()+"_sum", mf.GetName()+"_count")
	}
	for _, n := range names {
		if e[n] == nil {
			e[n] = map[string]map[string]bool{}
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if e[n][l.GetName()] == nil {
					e[n][l.GetName()] = map[string]bool{}
				}
				e[n][l.GetName()][l.GetValue()] = true
			}
		}
		if strings.HasSuffix(n, "_bucket") {
			e[n]["le"] = map[string]bool{}
		}
	}
}

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = map[string]bool{"job": true, "instance": true}

var simpleAlternatives = regexp.MustCompile(`^[a-z0-9_]+(\|[a-z0-9_]+)*$`)

// check parses expr and returns what it selects that e does not have: an
// unknown metric, a matcher or grouping on a label the metric lacks, an
// equality (or a plain a|b regex) on a label value never seen; `up` must
// select one of jobs.
func (e exposition) check(expr string, jobs []string) []error {
	root, err := promqlParser.ParseExpr(expr)
	if err != nil {
		return []error{err}
	}
	var errs []error
	parser.Inspect(root, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			errs = append(errs, e.checkSelector(n, jobs)...)
		case *parser.AggregateExpr:
			if n.Without || len(n.Grouping) == 0 {
				return nil
			}
			have := map[string]bool{"job": true, "instance": true}
			parser.Inspect(n.Expr, func(inner parser.Node, _ []parser.Node) error {
				if vs, ok := inner.(*parser.VectorSelector); ok {
					for l := range e[vs.Name] {
						have[l] = true
					}
				}
				return nil
			})
			for _, l := range n.Grouping {
				if !have[l] {
					errs = append(errs, fmt.Errorf("groups by label %q, which no series it aggregates has", l))
				}
			}
		}
		return nil
	})
	return errs
}

func (e exposition) checkSelector(vs *parser.VectorSelector, jobs []string) []error {
	if vs.Name == "up" {
		for _, m := range vs.LabelMatchers {
			if m.Name != "job" {
				continue
			}
			n := 0
			for _, j := range jobs {
				if m.Matches(j) {
					n++
				}
			}
			if n > 0 && !m.Matches("") && !m.Matches("some-other-job") {
				return nil
			}
			return []error{fmt.Errorf("up selects job %s, want one or more of the scrape jobs %v of %s", m, jobs, prometheusFile)}
		}
		return []error{fmt.Errorf("up without a job matcher: want one of the scrape jobs %v of %s", jobs, prometheusFile)}
	}
	lbls, ok := e[vs.Name]
	if !ok {
		return []error{fmt.Errorf("metric %q is not exposed by a coordinator or scanserver (renamed?)", vs.Name)}
	}
	var errs []error
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName || targetLabels[m.Name] {
			continue
		}
		values, ok := lbls[m.Name]
		if !ok {
			errs = append(errs, fmt.Errorf("%s has no label %q (it has %v)", vs.Name, m.Name, keys(lbls)))
			continue
		}
		var want []string
		switch {
		case (m.Type == labels.MatchEqual || m.Type == labels.MatchNotEqual) && m.Value != "":
			want = []string{m.Value}
		case (m.Type == labels.MatchRegexp || m.Type == labels.MatchNotRegexp) && simpleAlternatives.MatchString(m.Value):
			want = strings.Split(m.Value, "|")
		}
		for _, v := range want {
			if !values[v] {
				errs = append(errs, fmt.Errorf("%s{%s}: no series has %s=%q (seen: %v)", vs.Name, m, m.Name, v, keys(values)))
			}
		}
	}
	return errs
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// scrapeCluster runs one coordinator and one scanserver (two scan
// servers, --http on), ingests and scans a small table, and returns the
// union of both processes' /metrics and the scrape jobs of prometheus.yml.
func scrapeCluster(t *testing.T) (exposition, []string) {
	t.Helper()
	bin := binaries(t) // built before the cluster's own time starts
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := clustertest.Start(t, ctx, localcluster.Config{BinDir: bin, Hosts: 1, ServersPerHost: 2,
		Heartbeat: 200 * time.Millisecond, HostArgs: func(int) []string { return []string{"--http", "127.0.0.1:0"} }})
	defer cl.Close()
	if cl.Host(0).Ready.HTTP == "" {
		t.Fatal("scanserver started with --http 127.0.0.1:0 reports no http address")
	}

	rows := tablets.GenerateRows(5000)
	clustertest.Ingest(t, ctx, cl.NATSURL(), nil, "deploytest", rows, 2)
	c := clustertest.Client(t, ctx, cl.NATSURL(), nil)
	defer c.Close()
	// Twice: the first scan reads the blocks from JetStream, the second
	// finds them in the host cache (ristretto may refuse a block, so poll).
	for i := 0; ; i++ {
		n, err := scanAll(ctx, c)
		if err != nil || n != len(rows) {
			t.Fatalf("scan %d: %d rows of %d, %v", i, n, len(rows), err)
		}
		exp := exposition{}
		for _, addr := range []string{cl.HTTPAddr(0), cl.Host(0).Ready.HTTP} {
			if err := scrape(ctx, addr, exp); err != nil {
				t.Fatal(err)
			}
		}
		if src := exp["scanplane_scanserver_block_fetch_seconds_bucket"]["source"]; src["cache"] && src["jetstream"] {
			return exp, scrapeJobs(t)
		}
		if i == 20 {
			t.Fatalf("after %d scans the block fetch histogram has sources %v, want cache and jetstream", i+1, keys(exp["scanplane_scanserver_block_fetch_seconds_bucket"]["source"]))
		}
	}
}

func scanAll(ctx context.Context, c *client.Client) (int, error) {
	rs := c.Scan(ctx, "deploytest", tablets.Range{}, client.ScanOptions{})
	defer rs.Close()
	n := 0
	for rs.Next() {
		n++
	}
	return n, rs.Err()
}

// scrape reads http://addr/metrics in the text format and adds it to exp.
func scrape(ctx context.Context, addr string, exp exposition) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 1024))
		return fmt.Errorf("GET %s/metrics: %s: %s", addr, res.Status, b)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		return fmt.Errorf("GET %s/metrics: %w", addr, err)
	}
	if len(fams) == 0 {
		return errors.New("GET " + addr + "/metrics: no metrics")
	}
	for _, mf := range fams {
		exp.add(mf)
	}
	return nil
}
