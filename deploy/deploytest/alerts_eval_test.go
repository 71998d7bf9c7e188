package deploytest

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
)

// alertCase is one alert's expr evaluated over series written in
// Prometheus's series notation (as in its promqltest "load" command: one
// sample a minute from time 0; "0+60x20" is a counter growing by 60 a
// minute, 1/s, for 20 minutes), at minute at.
type alertCase struct {
	alert  string
	series string
	at     int // minutes
	fires  bool
	why    string
}

// alertCases: for every alert of alerts.yml, series where it must fire and
// series where it must stay quiet, built from the thresholds
// docs/operations.md (Alerts and dashboard) documents. `for:` is not evaluated here, only the expr.
var alertCases = []alertCase{
	{"ScanplaneScanServerErrorRate", `
		scanplane_scanserver_scans_finished_total{job="scanplane-scanserver",instance="s1:8101",host="h1",server="a/0",outcome="ok"} 0+600x20
		scanplane_scanserver_scans_finished_total{job="scanplane-scanserver",instance="s1:8101",host="h1",server="a/0",outcome="storage"} 0+60x20
		scanplane_scanserver_scans_finished_total{job="scanplane-scanserver",instance="s1:8101",host="h1",server="a/1",outcome="ok"} 0+600x20`,
		10, true, "a/0: 60 storage errors in 660 scans a minute (9%)"},
	{"ScanplaneScanServerErrorRate", `
		scanplane_scanserver_scans_finished_total{job="scanplane-scanserver",instance="s1:8101",host="h1",server="a/0",outcome="ok"} 0+600x20
		scanplane_scanserver_scans_finished_total{job="scanplane-scanserver",instance="s1:8101",host="h1",server="a/0",outcome="storage"} 0+6x20
		scanplane_scanserver_scans_finished_total{job="scanplane-scanserver",instance="s1:8101",host="h1",server="a/0",outcome="cancelled"} 0+300x20`,
		10, false, "1% errors; cancelled scans (hedge losers) are not errors"},
	{"ScanplaneScanServerErrorRate", `
		scanplane_scanserver_scans_finished_total{job="scanplane-scanserver",instance="s1:8101",host="h1",server="a/0",outcome="ok"} 0+2x20
		scanplane_scanserver_scans_finished_total{job="scanplane-scanserver",instance="s1:8101",host="h1",server="a/0",outcome="storage"} 0+1x20`,
		10, false, "a third fail, but 3 scans a minute is below the traffic floor"},

	{"ScanplaneScanServerBusy", `
		scanplane_scanserver_busy_total{job="scanplane-scanserver",instance="s1:8101",host="h1",server="a/0"} 0+120x20
		scanplane_scanserver_scans_total{job="scanplane-scanserver",instance="s1:8101",host="h1",server="a/0"} 0+60x20`,
		10, true, "2 of 3 attempts busy"},
	{"ScanplaneScanServerBusy", `
		scanplane_scanserver_busy_total{job="scanplane-scanserver",instance="s1:8101",host="h1",server="a/0"} 0+20x20
		scanplane_scanserver_scans_total{job="scanplane-scanserver",instance="s1:8101",host="h1",server="a/0"} 0+60x20`,
		10, false, "1 of 4 attempts busy"},

	{"ScanplaneBlockFetchP99High", blockFetch("jetstream", 97, 97, 100), 10, true, "3% of store reads take 0.25-0.5 s"},
	{"ScanplaneBlockFetchP99High", blockFetch("jetstream", 100, 100, 100), 10, false, "every store read under 100 ms"},
	{"ScanplaneBlockFetchP99High", blockFetch("cache", 90, 90, 100), 10, false, "slow cache hits are not store reads"},

	{"ScanplaneCacheHitRatioLow", `
		scanplane_cache_hits_total{job="scanplane-scanserver",instance="s1:8101"} 0+30x40
		scanplane_cache_misses_total{job="scanplane-scanserver",instance="s1:8101"} 0+120x40`,
		30, true, "a hit ratio of 20% at 2 misses/s"},
	{"ScanplaneCacheHitRatioLow", `
		scanplane_cache_hits_total{job="scanplane-scanserver",instance="s1:8101"} 0+600x40
		scanplane_cache_misses_total{job="scanplane-scanserver",instance="s1:8101"} 0+120x40`,
		30, false, "a hit ratio of 83%"},

	{"ScanplaneScanServerProcessDown", `up{job="scanplane-scanserver",instance="s1:8101"} 1x5 0x5`, 10, true, "scrapes fail"},
	{"ScanplaneScanServerProcessDown", `
		up{job="scanplane-scanserver",instance="s1:8101"} 1x10
		up{job="other",instance="x:1"} 0x10`, 10, false, "only another job is down"},

	{"ScanplaneScanFirstRowP99High", firstRow("ok", 97, 97, 100), 10, true, "3% of scans wait 1-2.5 s for their first row"},
	{"ScanplaneScanFirstRowP99High", firstRow("ok", 100, 100, 100), 10, false, "every first row within 0.5 s"},
	{"ScanplaneScanFirstRowP99High", firstRow("ok", 2, 2, 4), 10, false, "half are slow, but 4 scans a minute is below the traffic floor"},
	{"ScanplaneScanFirstRowP99High", firstRow("deadline_exceeded", 0, 0, 100), 10, false, "failed scans are not latency"},

	{"ScanplaneScanServersLeftView", `scanplane_coordinator_live_servers{job="scanplane-coordinator",instance="c1:8091"} 6x10 4x10`, 15, true, "6 live servers, then 4"},
	{"ScanplaneScanServersLeftView", `scanplane_coordinator_live_servers{job="scanplane-coordinator",instance="c1:8091"} 4x10 6x10`, 15, false, "servers joined"},

	{"ScanplaneNoLiveScanServers", `scanplane_coordinator_live_servers{job="scanplane-coordinator",instance="c1:8091"} 6x5 0x5`, 10, true, "no live server"},
	{"ScanplaneNoLiveScanServers", `scanplane_coordinator_live_servers{job="scanplane-coordinator",instance="c1:8091"} 1x10`, 10, false, "one live server"},

	{"ScanplaneCoordinatorDown", `up{job="scanplane-coordinator",instance="c1:8091"} 0x10`, 10, true, "scrapes fail"},
	{"ScanplaneCoordinatorDown", `up{job="scanplane-coordinator",instance="c1:8091"} 1x10`, 10, false, "scrapes succeed"},

	{"ScanplaneScanFailureRate", `
		scanplane_coordinator_scans_total{job="scanplane-coordinator",instance="c1:8091"} 0+600x20
		scanplane_coordinator_scans_failed_total{job="scanplane-coordinator",instance="c1:8091"} 0+12x20`,
		10, true, "2% of scan requests fail"},
	{"ScanplaneScanFailureRate", `
		scanplane_coordinator_scans_total{job="scanplane-coordinator",instance="c1:8091"} 0+600x20
		scanplane_coordinator_scans_failed_total{job="scanplane-coordinator",instance="c1:8091"} 0+3x20`,
		10, false, "0.5% fail"},

	{"ScanplaneAttemptTimeouts", `
		scanplane_coordinator_dispatches_total{job="scanplane-coordinator",instance="c1:8091"} 0+600x20
		scanplane_coordinator_timeouts_total{job="scanplane-coordinator",instance="c1:8091"} 0+60x20`,
		10, true, "10% of dispatches time out"},
	{"ScanplaneAttemptTimeouts", `
		scanplane_coordinator_dispatches_total{job="scanplane-coordinator",instance="c1:8091"} 0+600x20
		scanplane_coordinator_timeouts_total{job="scanplane-coordinator",instance="c1:8091"} 0+6x20`,
		10, false, "1% time out"},

	{"ScanplaneCoordinatorOverloaded", `scanplane_coordinator_overloaded_total{job="scanplane-coordinator",instance="c1:8091"} 0+5x20`, 10, true, "requests refused"},
	{"ScanplaneCoordinatorOverloaded", `scanplane_coordinator_overloaded_total{job="scanplane-coordinator",instance="c1:8091"} 7x20`, 10, false, "none refused lately"},

	{"ScanplaneLoadSignalPublishErrors", `scanplane_coordinator_nats_errors_total{job="scanplane-coordinator",instance="c1:8091",op="publish"} 0+1x20`, 10, true, "publishes fail"},
	{"ScanplaneLoadSignalPublishErrors", `scanplane_coordinator_nats_errors_total{job="scanplane-coordinator",instance="c1:8091",op="publish"} 0x20
		scanplane_coordinator_nats_errors_total{job="scanplane-coordinator",instance="c1:8091",op="disconnect"} 0+1x20`, 10, false, "no publish failure, other NATS errors"},
}

// blockFetch is the classic buckets of a block fetch histogram from source
// with, per minute, le100ms, le250ms and all (=le500ms=+Inf) fetches.
func blockFetch(source string, le100ms, le250ms, all int) string {
	line := func(le string, n int) string {
		return "\n\t\tscanplane_scanserver_block_fetch_seconds_bucket{job=\"scanplane-scanserver\",instance=\"s1:8101\",source=\"" + source + "\",le=\"" + le + "\"} 0+" + strconv.Itoa(n) + "x20"
	}
	return line("0.1", le100ms) + line("0.25", le250ms) + line("0.5", all) + line("+Inf", all)
}

// firstRow is the classic buckets of a coordinator's first-row histogram
// of profile "default" with outcome, with, per minute, le500ms, le1s and
// all (=le2.5s=+Inf) scans, and its _count.
func firstRow(outcome string, le500ms, le1s, all int) string {
	series := func(name, le string, n int) string {
		l := ""
		if le != "" {
			l = ",le=\"" + le + "\""
		}
		return "\n\t\tscanplane_coordinator_scan_first_row_seconds_" + name + "{job=\"scanplane-coordinator\",instance=\"c1:8091\",profile=\"default\",policy=\"accumulo\",outcome=\"" + outcome + "\"" + l + "} 0+" + strconv.Itoa(n) + "x20"
	}
	return series("bucket", "0.5", le500ms) + series("bucket", "1", le1s) + series("bucket", "2.5", all) + series("bucket", "+Inf", all) + series("count", "", all)
}

// labelRefRE finds the labels an annotation template shows.
var labelRefRE = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)

// TestAlertsFire evaluates every alert's expr of alerts.yml with
// Prometheus's PromQL engine over series where it must fire and series
// where it must not (every alert needs both kinds of case), and checks
// that a firing alert has every label its annotations show.
func TestAlertsFire(t *testing.T) {
	exprs := map[string]string{}
	templated := map[string][]string{} // alert → labels its annotations show
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			exprs[r.Alert] = r.Expr
			for _, a := range r.Annotations {
				for _, m := range labelRefRE.FindAllStringSubmatch(a, -1) {
					templated[r.Alert] = append(templated[r.Alert], m[1])
				}
			}
		}
	}
	covered := map[string][2]bool{}
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e6, Timeout: 10 * time.Second, LookbackDelta: 5 * time.Minute, Parser: promqlParser})
	defer engine.Close()
	for _, c := range alertCases {
		expr, ok := exprs[c.alert]
		if !ok {
			t.Errorf("case for %s: no such alert in %s", c.alert, alertsFile)
			continue
		}
		cov := covered[c.alert]
		if c.fires {
			cov[0] = true
		} else {
			cov[1] = true
		}
		covered[c.alert] = cov
		db, err := loadSeries(c.series)
		if err != nil {
			t.Fatalf("%s (%s): %v", c.alert, c.why, err)
		}
		q, err := engine.NewInstantQuery(context.Background(), db, nil, expr, time.Unix(int64(c.at*60), 0))
		if err != nil {
			t.Fatalf("%s: %v", c.alert, err)
		}
		res := q.Exec(context.Background())
		if res.Err != nil {
			t.Fatalf("%s: %v", c.alert, res.Err)
		}
		v, err := res.Vector()
		if err != nil {
			t.Fatalf("%s: %v", c.alert, err)
		}
		q.Close()
		if fired := len(v) > 0; fired != c.fires {
			t.Errorf("%s (%s): fired %v, want %v; result %v", c.alert, c.why, fired, c.fires, v)
		}
		for _, sample := range v {
			for _, l := range templated[c.alert] {
				if !sample.Metric.Has(l) {
					t.Errorf("%s (%s): its annotations show $labels.%s, which the alert %v lacks", c.alert, c.why, l, sample.Metric)
				}
			}
		}
	}
	for name := range exprs {
		if cov := covered[name]; !cov[0] || !cov[1] {
			t.Errorf("alert %s: needs a case where it fires and one where it does not (have %v)", name, cov)
		}
	}
}

// memSeries is an in-memory storage.Queryable of float series, enough for
// the engine to evaluate a query.
type memSeries []storage.Series

// loadSeries parses one series per non-empty line, each sample one minute
// after the last, from time 0.
func loadSeries(text string) (memSeries, error) {
	var db memSeries
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		lset, values, err := promqlParser.ParseSeriesDesc(line)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", line, err)
		}
		var samples []chunks.Sample
		for i, v := range values {
			if !v.Omitted {
				samples = append(samples, floatSample{t: int64(i) * time.Minute.Milliseconds(), f: v.Value})
			}
		}
		db = append(db, storage.NewListSeries(lset, samples))
	}
	sort.Slice(db, func(i, j int) bool { return labels.Compare(db[i].Labels(), db[j].Labels()) < 0 })
	return db, nil
}

// Querier implements storage.Queryable.
func (db memSeries) Querier(int64, int64) (storage.Querier, error) {
	return &storage.MockQuerier{SelectMockFunction: func(_ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
		out := &seriesSet{}
	next:
		for _, s := range db {
			for _, m := range ms {
				if !m.Matches(s.Labels().Get(m.Name)) {
					continue next
				}
			}
			out.series = append(out.series, s)
		}
		return out
	}}, nil
}

// seriesSet iterates over series (storage.SeriesSet).
type seriesSet struct {
	series []storage.Series
	i      int // 0 before the first Next
}

func (s *seriesSet) Next() bool                      { s.i++; return s.i <= len(s.series) }
func (s *seriesSet) At() storage.Series              { return s.series[s.i-1] }
func (*seriesSet) Err() error                        { return nil }
func (*seriesSet) Warnings() annotations.Annotations { return nil }

// floatSample is a float chunks.Sample.
type floatSample struct {
	t int64
	f float64
}

func (s floatSample) T() int64                    { return s.t }
func (floatSample) ST() int64                     { return 0 }
func (s floatSample) F() float64                  { return s.f }
func (floatSample) H() *histogram.Histogram       { return nil }
func (floatSample) FH() *histogram.FloatHistogram { return nil }
func (floatSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s floatSample) Copy() chunks.Sample         { return s }
