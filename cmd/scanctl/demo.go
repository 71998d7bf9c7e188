package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

func runDemo(ctx context.Context, g *globals, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	cfg := localcluster.Config{}
	fs.IntVar(&cfg.Coordinators, "coordinators", defaultCoordinators, "`N` coordinator processes (1..9; several: each embeds one node of a NATS cluster)")
	fs.IntVar(&cfg.Hosts, "hosts", 3, "`N` scanserver processes (hosts)")
	fs.IntVar(&cfg.ServersPerHost, "servers-per-host", 2, "`N` scan servers per host")
	rowsN := fs.Int("rows", 100000, "`N` rows of sample data")
	tabletsN := fs.Int("tablets", 8, "`N` tablets")
	scans := fs.Int("scans", 200, "`N` random range scans to run and verify")
	data := fs.String("data", "", "data `DIR` (default: a temporary directory, removed afterwards)")
	fs.StringVar(&cfg.BinDir, "bin", "", "`DIR` with the coordinator and scanserver executables (default: next to scanctl, on PATH, or built from source)")
	compare := fs.String("compare", "quick", "then compare the selection policies under faults with the load tester, `MODE`: quick (about 20 s), full (nine policies × six faults, about 11 min) or off")
	if _, err := parse("demo", g, fs, args, out); err != nil {
		return err
	}
	if err := checkSize(cfg.Hosts, cfg.ServersPerHost); err != nil {
		return err
	}
	if err := checkCoordinators(cfg.Coordinators); err != nil {
		return err
	}
	if *compare != "quick" && *compare != "full" && *compare != "off" {
		return usageError{fmt.Errorf("--compare %q: want quick, full or off", *compare)}
	}
	if *rowsN < 1 || *tabletsN < 1 || *scans < 0 {
		return usageError{fmt.Errorf("--rows and --tablets must be >= 1, --scans >= 0")}
	}
	cfg.DataDir = *data
	if cfg.DataDir == "" {
		dir, err := os.MkdirTemp("", "scanplane-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.DataDir = dir
	}
	step := func(format string, a ...any) { fmt.Fprintf(out, "==> "+format+"\n", a...) }

	step("starting a local cluster: %s + %d scanserver processes × %d servers", coordinatorsText(cfg.Coordinators), cfg.Hosts, cfg.ServersPerHost)
	t0 := time.Now()
	cl, err := localcluster.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer cl.Close()
	step("cluster ready in %v: nats %s, coordinators %s", time.Since(t0).Round(time.Millisecond), cl.NATSURL(), strings.Join(cl.CoordinatorAddrs(), ","))

	g.nats = cl.NATSURL()
	step("ingesting table demo: %d synthetic rows over %d tablets into JetStream", *rowsN, *tabletsN)
	truth := tablets.GenerateRows(*rowsN)
	ingestArgs := []string{"--table", "demo", "--generate", fmt.Sprint(*rowsN), "--splits", fmt.Sprint(*tabletsN), "--nats", cl.NATSURL()}
	if err := runIngest(ctx, &globals{}, ingestArgs, out, errOut); err != nil {
		return err
	}

	ccfg := client.DefaultConfig()
	ccfg.NATSURL = cl.NATSURL()
	c, err := client.Dial(ctx, ccfg)
	if err != nil {
		return err
	}
	defer c.Close()

	step("running %d random range scans + 1 full scan, each compared row by row with the ground truth", *scans)
	res := verifyScans(ctx, c, truth, *scans, 4)
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scans\trows\twrong\terrors\tp50\tp99\tmax\tscans/s\t")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%v\t%v\t%v\t%.0f\t\n", res.scans, res.rows, res.wrong, res.errors,
		res.quantile(0.50), res.quantile(0.99), res.quantile(1), float64(res.scans)/res.elapsed.Seconds())
	tw.Flush()
	if res.firstErr != nil {
		fmt.Fprintln(out, "first error:", res.firstErr)
	}

	step("a scan from row000000100 to row000000105:")
	rows := c.Scan(ctx, "demo", tablets.Range{Start: []byte("row000000100"), End: []byte("row000000105")}, client.ScanOptions{})
	for rows.Next() {
		r := rows.Row()
		fmt.Fprintf(out, "    %s\t%s\n", r.Key, r.Value)
	}
	if err := rows.Err(); err != nil {
		return err
	}

	step("cluster status (every coordinator, then the servers as one sees them):")
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	coords, err := coordinatorRows(ctx, c)
	if err != nil {
		return err
	}
	printCoordinators(out, coords)
	printStatus(out, st)
	if res.wrong > 0 || res.errors > 0 {
		return fmt.Errorf("%d scans returned wrong rows and %d failed", res.wrong, res.errors)
	}
	step("all %d scans returned exactly the right rows; stopping the cluster", res.scans)
	c.Close()
	cl.Close()
	if *compare == "off" {
		return nil
	}
	return runCompare(ctx, *compare, out, errOut)
}

// runCompare runs the load tester in a child process (a process may run
// only one protoactor remote, and this one already ran a client).
func runCompare(ctx context.Context, mode string, out, errOut io.Writer) error {
	bin, err := localcluster.FindTool(ctx, "loadtest")
	if err != nil {
		return err
	}
	args := []string{"--out", "", "--progress", "off"}
	what := "the default comparison (nine policies × six faults, about 11 minutes)"
	if mode == "quick" {
		args = append(args, "--quick")
		what = "a quick comparison (about 20 s; `go run ./cmd/loadtest` runs the full one)"
	}
	fmt.Fprintf(out, "==> comparing selection policies side by side under an injected fault: %s\n", what)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = out, errOut
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("load tester: %w", err)
	}
	return nil
}

type verifyResult struct {
	scans, wrong, errors int
	rows                 uint64
	lat                  []time.Duration
	elapsed              time.Duration
	firstErr             error
}

func (r *verifyResult) quantile(q float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := int(q * float64(len(r.lat)-1))
	return r.lat[i].Round(10 * time.Microsecond)
}

// verifyScans runs n random range scans (mostly short, some long) and one
// full scan with `workers` concurrent scanners and checks each result
// against truth (sorted).
func verifyScans(ctx context.Context, c *client.Client, truth []tablets.Entry, n, workers int) *verifyResult {
	res := &verifyResult{}
	var mu sync.Mutex
	jobs := make(chan [2]int)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				t := time.Now()
				got, err := scanIndexRange(ctx, c, truth, j[0], j[1])
				d := time.Since(t)
				mu.Lock()
				res.scans++
				res.lat = append(res.lat, d)
				switch {
				case err != nil:
					res.errors++
					if res.firstErr == nil {
						res.firstErr = err
					}
				case !got:
					res.wrong++
				default:
					res.rows += uint64(j[1] - j[0])
				}
				mu.Unlock()
			}
		}()
	}
	rng := rand.New(rand.NewPCG(42, 7))
	jobs <- [2]int{0, len(truth)}
	for i := 0; i < n; i++ {
		a := rng.IntN(len(truth))
		l := 1 + rng.IntN(100)
		if rng.IntN(10) == 0 {
			l = 1 + rng.IntN(20000)
		}
		jobs <- [2]int{a, min(a+l, len(truth))}
	}
	close(jobs)
	wg.Wait()
	res.elapsed = time.Since(start)
	sort.Slice(res.lat, func(i, j int) bool { return res.lat[i] < res.lat[j] })
	return res
}

// scanIndexRange scans [truth[a].Key, truth[b].Key) and reports whether the
// rows are exactly truth[a:b].
func scanIndexRange(ctx context.Context, c *client.Client, truth []tablets.Entry, a, b int) (bool, error) {
	rng := tablets.Range{Start: truth[a].Key}
	if a == 0 {
		rng.Start = nil
	}
	if b < len(truth) {
		rng.End = truth[b].Key
	}
	rows := c.Scan(ctx, "demo", rng, client.ScanOptions{})
	defer rows.Close()
	i := a
	ok := true
	for rows.Next() {
		r := rows.Row()
		if i >= b || !bytes.Equal(r.Key, truth[i].Key) || !bytes.Equal(r.Value, truth[i].Value) {
			ok = false
		}
		i++
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	return ok && i == b, nil
}
