package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/clientsys"
	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/remoting"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

const table = "soak"

// figures is one measurement of the coordinator.
type figures struct {
	goroutines  float64 // go_goroutines
	heap        float64 // live heap at the last GC (from go_memstats_next_gc_bytes)
	tablets     float64 // StatusReply.tablet_actors
	hosts       float64 // StatusReply.host_actors
	flows       float64 // StatusReply.flows
	servers     float64 // servers in StatusReply (alive or not yet forgotten)
	liveServers float64 // of those, alive
}

// fold sets each figure of a to pick(a's, b's): max for a peak, min for
// the quiet level.
func (a *figures) fold(b *figures, pick func(x, y float64) float64) {
	for _, p := range [...]struct{ a, b *float64 }{{&a.goroutines, &b.goroutines}, {&a.heap, &b.heap}, {&a.tablets, &b.tablets},
		{&a.hosts, &b.hosts}, {&a.flows, &b.flows}, {&a.servers, &b.servers}, {&a.liveServers, &b.liveServers}} {
		*p.a = pick(*p.a, *p.b)
	}
}

// metric names a figure, its tolerance and how to print it.
type metric struct {
	name   string
	get    func(*figures) float64
	limit  func(start float64) float64
	format func(float64) string
}

func count(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
func mib(v float64) string   { return fmt.Sprintf("%.1f MiB", v/(1<<20)) }
func noMore(start float64) float64 {
	return start
}

// metrics are the figures that must come back to their baseline, with
// the tolerances stated in the package comment.
var metrics = []metric{
	{"goroutines", func(f *figures) float64 { return f.goroutines }, func(s float64) float64 { return s*1.1 + 20 }, count},
	{"heap", func(f *figures) float64 { return f.heap }, func(s float64) float64 { return s*1.5 + 16<<20 }, mib},
	{"tablet actors", func(f *figures) float64 { return f.tablets }, noMore, count},
	{"host actors", func(f *figures) float64 { return f.hosts }, noMore, count},
	{"flows", func(f *figures) float64 { return f.flows }, noMore, count},
	{"servers known", func(f *figures) float64 { return f.servers }, noMore, count},
	{"servers live", func(f *figures) float64 { return f.liveServers }, noMore, count},
}

func (f *figures) String() string {
	var parts []string
	for _, m := range metrics {
		parts = append(parts, m.name+" "+m.format(m.get(f)))
	}
	return strings.Join(parts, ", ")
}

// within reports whether every figure of end is within its tolerance of
// start.
func within(start, end *figures) bool {
	for _, m := range metrics {
		if m.get(end) > m.limit(m.get(start)) {
			return false
		}
	}
	return true
}

func soak(ctx context.Context, o options, out io.Writer) (bool, error) {
	log, err := cliutil.Logger(os.Stderr, o.logLevel, "text")
	if err != nil {
		return false, err
	}
	dir := o.data
	if dir == "" {
		if dir, err = os.MkdirTemp("", "churnsoak-"); err != nil {
			return false, err
		}
		defer os.RemoveAll(dir)
	}
	fmt.Fprintf(out, "churnsoak: starting a cluster of %d hosts × %d servers in %s\n", o.hosts, o.servers, dir)
	cl, err := localcluster.Start(ctx, localcluster.Config{Hosts: o.hosts, ServersPerHost: o.servers, DataDir: dir, LogLevel: o.logLevel})
	if err != nil {
		return false, err
	}
	defer cl.Close()

	bc := bus.DefaultConfig()
	bc.URL, bc.Name, bc.Logger = cl.NATSURL(), "churnsoak", log
	conn, err := bus.Connect(ctx, bc)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	store, err := conn.BlockStore(ctx)
	if err != nil {
		return false, err
	}
	meta, err := conn.MetaStore(ctx)
	if err != nil {
		return false, err
	}
	truth := tablets.GenerateRows(o.rows)
	icfg := tablets.DefaultIngestConfig()
	icfg.Tablets = o.tablets
	if _, err := tablets.Ingest(ctx, store, meta, table, truth, icfg); err != nil {
		return false, fmt.Errorf("ingest: %w", err)
	}

	// One actor system for the client; the fake servers' pids point at
	// it (actors that do not exist: a message to one is a dead letter
	// here), so the coordinator's connection to them stays up.
	sys, err := remoting.StartSystem(remoting.SystemConfig{Listen: "127.0.0.1:0", Logger: log, MaxMessage: remoting.ClientMaxMessage})
	if err != nil {
		return false, err
	}
	defer sys.Close()
	ccfg := client.DefaultConfig()
	ccfg.NATSURL, ccfg.Logger = cl.NATSURL(), log
	c, err := client.Dial(clientsys.WithSystem(ctx, sys.Actors), ccfg)
	if err != nil {
		return false, err
	}
	defer c.Close()

	// Warm up: a full scan creates every tablet actor, so the baseline
	// holds them; then the coordinator is quiet.
	if err := verify(ctx, c, truth, 0, len(truth)); err != nil {
		return false, fmt.Errorf("warm-up scan: %w", err)
	}
	httpAddr := cl.HTTPAddr()
	base, err := measure(ctx, httpAddr, 5)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(out, "baseline: %s\n", base)

	// Churn and scans for the duration.
	runCtx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	ch := &churn{o: o, conn: conn, addr: sys.Address(), rng: rand.New(rand.NewPCG(o.seed, 2)), live: map[int]*fake{}}
	sc := &scanners{c: c, truth: truth}
	peak := &figures{}
	var wg sync.WaitGroup
	wg.Add(2 + o.scanners)
	go func() { defer wg.Done(); ch.run(runCtx) }()
	go func() { defer wg.Done(); watchPeak(runCtx, httpAddr, peak) }()
	for i := range o.scanners {
		go func() { defer wg.Done(); sc.run(runCtx, o.seed+uint64(i)) }()
	}
	started := time.Now()
	fmt.Fprintf(out, "churn: %v of fake servers (%d identities, %d live at a time, %d per host, group %q) while %d scanners run\n",
		o.duration, o.fakeServers, o.fakeLive, o.fakePerHost, o.fakeGroup, o.scanners)
	wg.Wait()
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	ch.leaveAll()
	fmt.Fprintf(out, "churn done after %v: %d joins, %d left with a leaving heartbeat, %d fell silent, %d heartbeats (%d publish errors)\n",
		time.Since(started).Round(time.Second), ch.joins, ch.leftLeaving, ch.leftSilent, ch.heartbeats, ch.publishErrors)
	fmt.Fprintf(out, "scans: %d exact (%d rows), %d failed, %d wrong\n", sc.ok.Load(), sc.rows.Load(), sc.failed.Load(), sc.wrong.Load())
	for _, e := range sc.firstErrors() {
		fmt.Fprintf(out, "  scan error: %v\n", e)
	}
	fmt.Fprintf(out, "peak during churn: %s\n", peak)

	// Settle: the coordinator must come back to its baseline.
	var end *figures
	settleStart := time.Now()
	for {
		if end, err = measure(ctx, httpAddr, 3); err != nil {
			return false, err
		}
		fmt.Fprintf(out, "settle +%v: %s\n", time.Since(settleStart).Round(time.Second), end)
		if within(base, end) || time.Since(settleStart) > o.settle {
			break
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(5 * time.Second):
		}
	}

	ok := within(base, end) && sc.failed.Load() == 0 && sc.wrong.Load() == 0 && sc.ok.Load() > 0
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "figure\tstart\tpeak\tend\tlimit\t\t")
	for _, m := range metrics {
		verdict := "ok"
		if m.get(end) > m.limit(m.get(base)) {
			verdict = "NOT BACK"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", m.name, m.format(m.get(base)), m.format(m.get(peak)), m.format(m.get(end)), m.format(m.limit(m.get(base))), verdict)
	}
	_ = tw.Flush()
	if ok {
		fmt.Fprintln(out, "PASS: every scan exact; the coordinator came back to its baseline")
	} else {
		fmt.Fprintf(out, "FAIL: scans ok=%d failed=%d wrong=%d; figures back to baseline: %v\n", sc.ok.Load(), sc.failed.Load(), sc.wrong.Load(), within(base, end))
	}
	return ok, nil
}

// fake is one fake scan server alive now.
type fake struct {
	host, server, incarnation string
	until                     time.Time
	silent                    bool // leaves by falling silent, not with a leaving heartbeat
}

// churn joins and leaves fake servers: heartbeats published on NATS as a
// scanserver would, for identities that cycle through o.fakeServers.
type churn struct {
	o    options
	conn *bus.Conn
	addr string
	rng  *rand.Rand
	live map[int]*fake
	next int
	inc  int

	joins, leftLeaving, leftSilent, heartbeats, publishErrors int
}

func (ch *churn) heartbeat(i int, f *fake, leaving bool) {
	hb := &messages.Heartbeat{Host: f.host, Server: f.server, Zone: "default", Group: ch.o.fakeGroup,
		Pid: &messages.Pid{Address: ch.addr, Id: "fake-" + strconv.Itoa(i)}, Incarnation: f.incarnation, Workers: 4,
		SentUnixMs: time.Now().UnixMilli(), IntervalMs: ch.o.fakeHeartbeat.Milliseconds(), Leaving: leaving}
	ch.heartbeats++
	if err := ch.conn.PublishHeartbeat(hb); err != nil {
		ch.publishErrors++
	}
}

func (ch *churn) run(ctx context.Context) {
	t := time.NewTicker(ch.o.fakeHeartbeat)
	defer t.Stop()
	for {
		now := time.Now()
		for i, f := range ch.live {
			switch {
			case now.Before(f.until):
				ch.heartbeat(i, f, false)
			case f.silent:
				delete(ch.live, i)
				ch.leftSilent++
			default:
				ch.heartbeat(i, f, true)
				delete(ch.live, i)
				ch.leftLeaving++
			}
		}
		for len(ch.live) < ch.o.fakeLive {
			i := ch.next
			ch.next = (ch.next + 1) % ch.o.fakeServers
			if ch.live[i] != nil {
				continue
			}
			ch.inc++
			h := i / ch.o.fakePerHost
			life := ch.o.fakeLifeMin + time.Duration(ch.rng.Int64N(int64(ch.o.fakeLifeMax-ch.o.fakeLifeMin)+1))
			f := &fake{host: fmt.Sprintf("fake%05d", h), server: fmt.Sprintf("fake%05d:1/%d", h, i%ch.o.fakePerHost),
				incarnation: "inc" + strconv.Itoa(ch.inc), until: now.Add(life), silent: ch.rng.IntN(2) == 0}
			ch.live[i] = f
			ch.joins++
			ch.heartbeat(i, f, false)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// leaveAll ends every live fake server, half of them by a leaving
// heartbeat, the rest by silence.
func (ch *churn) leaveAll() {
	for i, f := range ch.live {
		if f.silent {
			ch.leftSilent++
		} else {
			ch.heartbeat(i, f, true)
			ch.leftLeaving++
		}
		delete(ch.live, i)
	}
}

// scanners run verified random range scans.
type scanners struct {
	c     *client.Client
	truth []tablets.Entry

	ok, rows, failed, wrong atomic.Uint64
	mu                      sync.Mutex
	errs                    []error
}

func (s *scanners) run(ctx context.Context, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	n := len(s.truth)
	// over: the run's deadline has passed. A scan started just then fails
	// at once with "deadline passed" before ctx's own timer has fired, so
	// ctx.Err() alone would count a burst of such scans as failures.
	over := func() bool {
		d, ok := ctx.Deadline()
		return ctx.Err() != nil || (ok && !time.Now().Before(d))
	}
	for !over() {
		a := r.IntN(n)
		b := min(n, a+1+r.IntN(2000))
		if r.IntN(20) == 0 {
			a, b = 0, n
		}
		err := verify(ctx, s.c, s.truth, a, b)
		switch {
		case err == nil:
			s.ok.Add(1)
			s.rows.Add(uint64(b - a))
		case over():
			return // the run ended during this scan
		default:
			if errors.Is(err, errWrongRow) {
				s.wrong.Add(1)
			} else {
				s.failed.Add(1)
			}
			s.mu.Lock()
			if len(s.errs) < 5 {
				s.errs = append(s.errs, err)
			}
			s.mu.Unlock()
		}
	}
}

func (s *scanners) firstErrors() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.errs...)
}

var errWrongRow = errors.New("wrong rows")

// verify scans truth[a:b] and checks every row.
func verify(ctx context.Context, c *client.Client, truth []tablets.Entry, a, b int) error {
	rng := tablets.Range{}
	if a > 0 {
		rng.Start = truth[a].Key
	}
	if b < len(truth) {
		rng.End = truth[b].Key
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rows := c.Scan(sctx, table, rng, client.ScanOptions{})
	defer rows.Close()
	i := a
	for rows.Next() {
		r := rows.Row()
		if i >= b || !bytes.Equal(r.Key, truth[i].Key) || !bytes.Equal(r.Value, truth[i].Value) {
			return fmt.Errorf("%w: scan %s: row %d is %q", errWrongRow, rng, i-a, r.Key)
		}
		i++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("scan %s: %w", rng, err)
	}
	if i != b {
		return fmt.Errorf("%w: scan %s: %d rows, want %d", errWrongRow, rng, i-a, b-a)
	}
	return nil
}

// watchPeak records the highest figures seen until ctx ends.
func watchPeak(ctx context.Context, httpAddr string, peak *figures) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f, err := sample(ctx, httpAddr)
		if err != nil {
			continue
		}
		peak.fold(f, math.Max)
	}
}

// measure takes n samples a second apart and keeps the lowest of each
// figure: what the coordinator holds when quiet, garbage not yet collected
// and momentary goroutines left out.
func measure(ctx context.Context, httpAddr string, n int) (*figures, error) {
	var low *figures
	for i := 0; i < n; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Second):
			}
		}
		f, err := sample(ctx, httpAddr)
		if err != nil {
			return nil, err
		}
		if low == nil {
			low = f
			continue
		}
		low.fold(f, math.Min)
	}
	return low, nil
}

// sample reads the coordinator's /metrics and /status once.
func sample(ctx context.Context, httpAddr string) (*figures, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	prom, err := promValues(ctx, httpAddr, "go_goroutines", "go_memstats_next_gc_bytes")
	if err != nil {
		return nil, err
	}
	// The live heap at the last collection: the collector sets the next
	// goal to live × (1 + GOGC/100). Unlike the allocated heap, it does
	// not count garbage not yet collected.
	gogc := 100.0
	if v, ok := prom["go_gc_gogc_percent"]; ok && v > 0 {
		gogc = v
	}
	heap := prom["go_memstats_next_gc_bytes"] / (1 + gogc/100)
	st, err := localcluster.FetchStatus(ctx, httpAddr)
	if err != nil {
		return nil, fmt.Errorf("coordinator /status: %w", err)
	}
	f := &figures{goroutines: prom["go_goroutines"], heap: heap,
		tablets: float64(st.GetTabletActors()), hosts: float64(st.GetHostActors()), flows: float64(st.GetFlows()),
		servers: float64(len(st.GetServers()))}
	for _, s := range st.GetServers() {
		if s.GetAlive() {
			f.liveServers++
		}
	}
	return f, nil
}

// promValues reads the unlabelled samples of a Prometheus text exposition
// at http://httpAddr/metrics; the named ones must be there.
func promValues(ctx context.Context, httpAddr string, names ...string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("coordinator /metrics: %w", err)
	}
	defer res.Body.Close()
	got := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
			got[name] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("coordinator /metrics: %w", err)
	}
	for _, n := range names {
		if _, ok := got[n]; !ok {
			return nil, fmt.Errorf("coordinator /metrics has no %s", n)
		}
	}
	return got, nil
}
