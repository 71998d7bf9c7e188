package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/selection"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/tablets/rowfmt"
)

func runScan(ctx context.Context, g *globals, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("scan", flag.ContinueOnError)
	table := fs.String("table", "", "table `NAME` (required)")
	start := fs.String("start", "", "first `KEY` (inclusive; escapes \\xNN); empty = from the beginning")
	end := fs.String("end", "", "end `KEY` (exclusive); empty = to the end")
	limit := fs.Uint64("limit", 0, "stop after `N` rows (0 = all)")
	count := fs.Bool("count", false, "print only the number of rows")
	format := fs.String("format", "tsv", "output `FORMAT`: tsv (key<TAB>value, escapes \\t \\n \\r \\\\ \\xNN), csv, jsonl or parquet; what scanctl ingest reads back")
	keyColumn := fs.String("key-column", "", "`NAME` of the key column (csv, parquet; default key)")
	valueColumn := fs.String("value-column", "", "`NAME` of the value column (csv, parquet; default value)")
	parallel := fs.Int("parallel", 0, "read `N` tablets at once, rows still in key order (0 = the client's default; 1 = one at a time)")
	h := hints{}
	fs.Var(h, "hint", "scan hint `KEY=VALUE`, e.g. scan_type=batch (repeatable)")
	var v viaFlags
	v.register(fs)
	if _, err := parse("scan", g, fs, args, out); err != nil {
		return err
	}
	if *table == "" {
		return usageError{fmt.Errorf("--table is required")}
	}
	rng, err := tablets.ParseRange(*start, *end)
	if err != nil {
		return usageError{err}
	}
	rf := rowfmt.Config{KeyColumn: *keyColumn, ValueColumn: *valueColumn}
	if rf.Format, err = rowfmt.Parse(*format); err != nil {
		return usageError{fmt.Errorf("--format: %w", err)}
	}
	if err := rf.Validate(); err != nil {
		return usageError{err}
	}
	opts := client.ScanOptions{Hints: h, Limit: *limit, Parallel: *parallel}
	if err := opts.Validate(); err != nil {
		return usageError{fmt.Errorf("--parallel: %w", err)}
	}
	if err := v.check(fs, *parallel); err != nil {
		return err
	}
	if v.via == viaAPI {
		return withAPI(ctx, g, &v, errOut, func(ctx context.Context, a *client.API) error {
			return printScan(ctx, apiScanner{a}, out, *table, rng, opts, *count, rf)
		})
	}
	return withClient(ctx, g, errOut, func(ctx context.Context, c *client.Client) error {
		return printScan(ctx, actorScanner{c}, out, *table, rng, opts, *count, rf)
	})
}

// scanner is what printScan needs of a client: the rows of a range, or
// their number counted at the scan servers.
type scanner interface {
	count(ctx context.Context, table string, rng tablets.Range, opts client.ScanOptions) (uint64, error)
	scan(ctx context.Context, table string, rng tablets.Range, opts client.ScanOptions) rowsIter
}

// rowsIter is a scan's rows (client.Rows, client.APIRows).
type rowsIter interface {
	Next() bool
	Row() client.Row
	Err() error
	Close() error
}

// actorScanner scans through the actor remote.
type actorScanner struct{ c *client.Client }

func (s actorScanner) count(ctx context.Context, table string, rng tablets.Range, opts client.ScanOptions) (uint64, error) {
	return s.c.Count(ctx, table, rng, opts)
}

func (s actorScanner) scan(ctx context.Context, table string, rng tablets.Range, opts client.ScanOptions) rowsIter {
	return s.c.Scan(ctx, table, rng, opts)
}

// apiScanner scans through the public API.
type apiScanner struct{ a *client.API }

func (s apiScanner) count(ctx context.Context, table string, rng tablets.Range, opts client.ScanOptions) (uint64, error) {
	return s.a.Count(ctx, table, rng, opts)
}

func (s apiScanner) scan(ctx context.Context, table string, rng tablets.Range, opts client.ScanOptions) rowsIter {
	return s.a.Scan(ctx, table, rng, opts)
}

func printScan(ctx context.Context, c scanner, out io.Writer, table string, rng tablets.Range, opts client.ScanOptions, count bool, rf rowfmt.Config) error {
	if count {
		// Answered at the scan servers: whole blocks are proven by count.
		n, err := c.count(ctx, table, rng, opts)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(out, n)
		return err
	}
	rows := c.scan(ctx, table, rng, opts)
	defer rows.Close()
	w := bufio.NewWriterSize(out, 64<<10)
	defer w.Flush()
	rw, err := rowfmt.NewWriter(w, rf)
	if err != nil {
		return err
	}
	for rows.Next() {
		r := rows.Row()
		if err := rw.Write(r.Key, r.Value); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return rw.Close()
}

func runStatus(ctx context.Context, g *globals, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	var w watchFlags
	w.register(fs)
	asJSON := fs.Bool("json", false, "print one JSON document (for programs) instead of the tables")
	if _, err := parse("status", g, fs, args, out); err != nil {
		return err
	}
	if err := w.check(fs); err != nil {
		return err
	}
	if w.watch && *asJSON {
		return usageError{fmt.Errorf("--json and --watch cannot be used together")}
	}
	if w.watch {
		return watchStatus(ctx, g, w, out, errOut, isTerminal(out))
	}
	return withClient(ctx, g, errOut, func(ctx context.Context, c *client.Client) error {
		return printFullStatus(ctx, c, out, *asJSON)
	})
}

// printFullStatus prints the coordinators table and the status of the
// coordinator c asks, or both as one JSON document.
func printFullStatus(ctx context.Context, c *client.Client, out io.Writer, asJSON bool) error {
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	coords, err := coordinatorRows(ctx, c)
	if err != nil {
		return err
	}
	if asJSON {
		return printStatusJSON(out, coords, st)
	}
	printCoordinators(out, coords)
	printStatus(out, st)
	return nil
}

// coordRow is one line of the coordinators table of scanctl status.
type coordRow struct {
	lease   *client.CoordinatorLease // nil: a configured coordinator without a lease
	addr    string
	status  *client.Status // nil: did not answer
	problem string
}

// coordStatusWait bounds each coordinator's own status request in
// scanctl status (they run in parallel).
const coordStatusWait = 2 * time.Second

// leased is the row's lease, zero without one.
func (r coordRow) leased() client.CoordinatorLease {
	if r.lease == nil {
		return client.CoordinatorLease{}
	}
	return *r.lease
}

// coordinatorRows lists every coordinator lease (alive: it is renewed)
// and the configured coordinators that have none, each with its own
// status if it answers within coordStatusWait.
func coordinatorRows(ctx context.Context, c *client.Client) ([]coordRow, error) {
	leases, err := c.CoordinatorLeases(ctx)
	if err != nil {
		return nil, err
	}
	var rows []coordRow
	seen := map[string]bool{}
	for _, l := range leases {
		rows = append(rows, coordRow{lease: &l, addr: l.Address})
		seen[l.Address] = true
	}
	addrs, _ := c.Coordinators()
	for _, a := range addrs {
		if !seen[a] {
			rows = append(rows, coordRow{addr: a, problem: "no lease"})
		}
	}
	var wg sync.WaitGroup
	for i := range rows {
		wg.Add(1)
		go func(r *coordRow) {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, coordStatusWait)
			defer cancel()
			st, err := c.StatusOf(sctx, r.addr)
			if err != nil {
				if r.problem == "" {
					r.problem = "no status answer"
				}
				return
			}
			r.status = st
		}(&rows[i])
	}
	wg.Wait()
	return rows, nil
}

func printCoordinators(out io.Writer, rows []coordRow) {
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COORDINATOR	MEMBER	ALIVE	TABLETS	SCANS	FAILED	IN-FLIGHT	DISPATCHES	HEDGES	OVERLOADED	NATS-NODE	HTTP	VERSION	NOTE")
	var total client.Status
	answered := 0
	for _, r := range rows {
		alive, tabs, note, version := "no", "-", r.problem, r.leased().Version
		counters := "-\t-\t-\t-\t-\t-"
		if r.lease != nil {
			alive = "yes"
			tabs = strconv.Itoa(r.lease.TabletActors) + " (lease)"
		}
		if st := r.status; st != nil {
			answered++
			tabs = strconv.FormatUint(uint64(st.TabletActors), 10)
			version = st.Version
			counters = fmt.Sprintf("%d\t%d\t%d\t%d\t%d\t%d", st.ScansStarted, st.ScansFailed, st.Flows, st.Dispatches,
				st.Hedges, st.Overloaded)
			total.TabletActors += st.TabletActors
			total.ScansStarted += st.ScansStarted
			total.ScansFailed += st.ScansFailed
			total.Flows += st.Flows
			total.Dispatches += st.Dispatches
			total.Hedges += st.Hedges
			total.Overloaded += st.Overloaded
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.addr, orDash(r.leased().MemberID), alive, tabs, counters,
			orDash(r.leased().NATSNode), orDash(r.leased().HTTPAddress), orDash(version), note)
	}
	if answered > 1 {
		fmt.Fprintf(tw, "total (%d answered)\t\t\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\t\t\t\n", answered, total.TabletActors, total.ScansStarted,
			total.ScansFailed, total.Flows, total.Dispatches, total.Hedges, total.Overloaded)
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printStatus(out io.Writer, st *client.Status) {
	who := "coordinator " + orDash(st.Address)
	fmt.Fprintf(out, "%s: version=%s scans=%d failed=%d dispatches=%d hedges=%d busy=%d timeouts=%d\n",
		who, orDash(st.Version), st.ScansStarted, st.ScansFailed, st.Dispatches, st.Hedges, st.Busy, st.Timeouts)
	fmt.Fprintf(out, "%s: flows=%d host_actors=%d dead_letters=%d publish_errors=%d bad_messages=%d overloaded=%d\n",
		who, st.Flows, st.HostActors, st.DeadLetters, st.PublishErrors, st.BadMessages, st.Overloaded)
	fmt.Fprintf(out, "%s: tablet_actors=%d direct_requests=%d rerouted=%d reforwarded=%d progress_sent=%d actor_failures=%d\n",
		who, st.TabletActors, st.DirectRequests, st.Rerouted, st.Reforwarded, st.ProgressSent, st.ActorFailures)
	fmt.Fprintf(out, "the servers and tables as %s sees them:\n", who)
	for _, l := range strings.Split(st.ProfilesSummary, "\n") {
		if l != "" {
			fmt.Fprintf(out, "profile: %s\n", l)
		}
	}
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tZONE\tSERVER\tALIVE\tQUEUE\tIN-FLIGHT\tDISPATCHED\tBUSY\tTIMEOUTS\tERRORS\tSTART-LAT\tCACHE-HIT")
	for _, s := range st.Servers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%d\t%d\t%d\t%d\t%d\t%.0f\t%v\t%.1f%%\n", s.Host, s.Zone, s.ID, s.Alive, s.QueueLen, s.InFlight,
			s.Dispatched, s.BusyTotal, s.Timeouts, s.Errors, us(s.StartLatencyUs).Round(10*time.Microsecond), 100*s.CacheHitRatio)
	}
	tw.Flush()
	if len(st.Tables) == 0 {
		return
	}
	fmt.Fprintln(tw, "TABLE\tCURRENT-GEN\tCACHED-GENS")
	for _, t := range st.Tables {
		gens := make([]string, len(t.CachedGenerations))
		for i, g := range t.CachedGenerations {
			gens[i] = strconv.FormatUint(g, 10)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", t.Name, t.CurrentGeneration, orDash(strings.Join(gens, ",")))
	}
	tw.Flush()
}

func runRoute(ctx context.Context, g *globals, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("route", flag.ContinueOnError)
	table := fs.String("table", "", "table `NAME` (required)")
	row := fs.String("row", "", "row `KEY` (required; escapes \\xNN)")
	attempts := fs.String("attempts", "", "`RESULTS` of earlier attempts, e.g. busy,busy or error")
	h := hints{}
	fs.Var(h, "hint", "scan hint `KEY=VALUE` (repeatable)")
	asJSON := fs.Bool("json", false, "print one JSON document (for programs)")
	if _, err := parse("route", g, fs, args, out); err != nil {
		return err
	}
	if *table == "" || *row == "" {
		return usageError{fmt.Errorf("--table and --row are required")}
	}
	key, err := tablets.ParseKey(*row)
	if err != nil {
		return usageError{err}
	}
	q := client.RouteQuery{Table: *table, Row: key, Hints: h}
	if *attempts != "" {
		for _, a := range strings.Split(*attempts, ",") {
			a = strings.TrimSpace(a)
			if _, err := selection.ParseAttemptResult(a); err != nil {
				return usageError{fmt.Errorf("--attempts: %v (want busy, error, timeout or stalled)", err)}
			}
			q.Attempts = append(q.Attempts, a)
		}
	}
	return withClient(ctx, g, errOut, func(ctx context.Context, c *client.Client) error {
		r, err := c.Route(ctx, q)
		if err != nil {
			return err
		}
		if *asJSON {
			return printRouteJSON(out, r)
		}
		printRoute(out, r)
		return nil
	})
}

func printRoute(out io.Writer, r *client.Route) {
	t := r.Tablet
	fmt.Fprintf(out, "tablet:      %s/g%d/t%d [%s, %s)\n", t.Table, t.Generation, t.Index, keyOr(t.Range.Start, "-inf"), keyOr(t.Range.End, "+inf"))
	fmt.Fprintf(out, "profile:     %s\npolicy:      %s\nplan index:  %d\n", r.Profile, r.Policy, r.PlanIndex)
	for _, tr := range r.Tried {
		fmt.Fprintf(out, "tried:       %s\n", tr)
	}
	cands := r.Candidates
	if len(r.Scores) == len(cands) {
		cands = make([]string, len(r.Candidates))
		for i, c := range r.Candidates {
			cands[i] = fmt.Sprintf("%s(%.2f)", c, r.Scores[i])
		}
	}
	fmt.Fprintf(out, "candidates:  %s\n", strings.Join(cands, " "))
	fmt.Fprintf(out, "choice:      %s\n", r.Choice)
	fmt.Fprintf(out, "busy timeout %v, delay %v, hedge after %v\n", r.BusyTimeout, r.Delay, r.HedgeDelay)
}

func us(v int64) time.Duration { return time.Duration(v) * time.Microsecond }

func keyOr(k []byte, open string) string {
	if len(k) == 0 {
		return open
	}
	return tablets.FormatKey(k)
}

func runReload(ctx context.Context, g *globals, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("reload", flag.ContinueOnError)
	if _, err := parse("reload", g, fs, args, out); err != nil {
		return err
	}
	return withClient(ctx, g, errOut, func(ctx context.Context, c *client.Client) error {
		results, err := c.ReloadAll(ctx)
		if err != nil {
			return err
		}
		var failed []string
		for _, r := range results {
			if r.Err != nil {
				failed = append(failed, r.Coordinator)
				fmt.Fprintf(out, "%s: %v\n", r.Coordinator, r.Err)
				continue
			}
			fmt.Fprintf(out, "%s: %s\n", r.Coordinator, r.Message)
		}
		if len(failed) > 0 {
			return fmt.Errorf("reload: %d of %d coordinators did not reload: %s", len(failed), len(results), strings.Join(failed, ", "))
		}
		return nil
	})
}
