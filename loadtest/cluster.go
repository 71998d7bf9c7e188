package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"google.golang.org/protobuf/proto"
)

// target is the cluster under test: a local cluster of real processes the
// harness controls, or a running cluster it only talks to. It owns the one
// client.Client of the process (a process must start at most one
// protoactor remote) shared by every scanning goroutine.
type target struct {
	cfg       Config
	local     *localcluster.Cluster
	dataDir   string
	removeDir bool
	profiles  string
	conn      *bus.Conn
	client    *client.Client
	hbSub     *bus.Subscription
	cache     *cacheTracker

	// scanTable and scanOpts: what the workload scans, Table (set by
	// startTarget), with unverified rows allowed for Config.Unverified
	// (whose scans read Table's generation without block roots).
	scanTable string
	scanOpts  client.ScanOptions

	mu         sync.Mutex
	flagFaults []string // flag faults of the fault host, read by hostArgs
	cacheBytes int64
}

func (c Config) logf(format string, a ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, "==> "+format+"\n", a...)
	}
}

// estimateTableBytes: generated rows take about 78 bytes each in tablet
// files (12-byte key, 64-byte value, framing).
func estimateTableBytes(rows int) int64 { return int64(rows) * 78 }

// autoCacheBytes is 1.5 × a host's share of the table, at least 1 MiB.
func autoCacheBytes(tableBytes int64, hosts int) int64 {
	return max(1<<20, tableBytes*3/2/int64(max(hosts, 1)))
}

func startTarget(ctx context.Context, cfg Config) (_ *target, err error) {
	t := &target{cfg: cfg, cache: newCacheTracker(), profiles: cfg.ProfilesFile, scanTable: cfg.Table}
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	natsURL := cfg.NATS
	if cfg.Local() {
		t.dataDir = cfg.DataDir
		if t.dataDir == "" {
			if t.dataDir, err = os.MkdirTemp("", "scanplane-loadtest-"); err != nil {
				return nil, err
			}
			t.removeDir = true
		} else if err = os.MkdirAll(t.dataDir, 0o755); err != nil {
			return nil, fmt.Errorf("loadtest: data directory: %w", err)
		}
		if t.profiles == "" {
			t.profiles = filepath.Join(t.dataDir, "profiles.json")
		}
		first, err := ParsePolicy(cfg.Policies[0])
		if err != nil {
			return nil, err
		}
		data, err := ProfilesJSON(first, cfg.ServersPerHost)
		if err != nil {
			return nil, err
		}
		if err := writeFileAtomic(t.profiles, data); err != nil {
			return nil, fmt.Errorf("loadtest: profiles file: %w", err)
		}
		t.cacheBytes = cfg.CacheSize
		if t.cacheBytes == 0 {
			t.cacheBytes = autoCacheBytes(estimateTableBytes(cfg.Rows), cfg.Hosts)
		}
		coords := cfg.coordinators()
		what := "coordinator (embedded NATS)"
		if coords > 1 {
			what = fmt.Sprintf("%d coordinators (each a node of an embedded NATS cluster)", coords)
		}
		cfg.logf("starting a local cluster: %s + %d scanserver processes × %d servers, %d zone(s), data in %s",
			what, cfg.Hosts, cfg.ServersPerHost, cfg.Zones, t.dataDir)
		t0 := time.Now()
		t.local, err = localcluster.Start(ctx, localcluster.Config{Coordinators: coords, Hosts: cfg.Hosts, ServersPerHost: cfg.ServersPerHost, Zones: cfg.Zones,
			DataDir: t.dataDir, BinDir: cfg.BinDir, Profiles: t.profiles, HostArgs: t.hostArgs, Heartbeat: cfg.Heartbeat})
		if err != nil {
			return nil, err
		}
		natsURL = t.local.NATSURL()
		cfg.logf("cluster ready in %v (nats %s, coordinators %s)", time.Since(t0).Round(time.Millisecond), natsURL, strings.Join(t.local.CoordinatorAddrs(), ","))
	}
	bc := bus.DefaultConfig()
	bc.URL, bc.Name = natsURL, "scanplane-loadtest"
	if t.conn, err = bus.Connect(ctx, bc); err != nil {
		return nil, fmt.Errorf("loadtest: NATS %s: %w", natsURL, err)
	}
	if t.hbSub, err = t.conn.SubscribeHeartbeats(t.cache.observe); err != nil {
		return nil, err
	}
	ccfg := client.DefaultConfig()
	ccfg.NATSURL, ccfg.Coordinator = natsURL, cfg.Coordinator
	if t.client, err = client.Dial(ctx, ccfg); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *target) close() {
	if t.client != nil {
		t.client.Close()
	}
	if t.hbSub != nil {
		t.hbSub.Close()
	}
	if t.conn != nil {
		t.conn.Close()
	}
	if t.local != nil {
		t.local.Close()
	}
	if t.removeDir {
		os.RemoveAll(t.dataDir)
	}
}

// hostArgs are the extra scanserver flags of host i: the cache size and
// workers, and the flag faults if i is the fault host.
func (t *target) hostArgs(i int) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	args := []string{"--cache-size", strconv.FormatInt(t.cacheBytes, 10), "--workers", strconv.Itoa(t.hostWorkers(i))}
	if i != t.cfg.FaultHost {
		return args
	}
	for _, f := range t.flagFaults {
		switch f {
		case FaultSlowServer:
			args = append(args, "--fault-pause", t.cfg.SlowPause, "--fault-server", "0")
		case FaultSlowHost:
			args = append(args, "--fault-slow", strconv.FormatFloat(t.cfg.SlowFactor, 'g', -1, 64))
		}
	}
	return args
}

// restartHosts restarts every host (in parallel) with the flag faults of
// kinds, so that each phase starts with cold caches and fresh server
// identities, then waits until the coordinator's view holds exactly the
// new servers.
func (t *target) restartHosts(ctx context.Context, kinds []string) error {
	t.mu.Lock()
	t.flagFaults = nil
	for _, k := range kinds {
		if slices.Contains(flagFaults, k) {
			t.flagFaults = append(t.flagFaults, k)
		}
	}
	t.mu.Unlock()
	n := t.local.Hosts()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = t.local.Restart(ctx, i)
		}(i)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := t.waitView(ctx, 30*time.Second); err != nil {
		return err
	}
	return t.checkWorkers(ctx)
}

// hostWorkers is the --workers host i is started with: Workers, half of
// it on the fault host under heterogeneous.
func (t *target) hostWorkers(i int) int {
	if i == t.cfg.FaultHost && slices.Contains(t.flagFaults, FaultHeterogeneous) {
		return t.cfg.Workers / 2
	}
	return t.cfg.Workers
}

// checkWorkers makes sure every host process runs the workers it was
// started with, from the count in its heartbeats (waiting up to three
// heartbeat intervals for one), so a heterogeneous phase is what it says.
func (t *target) checkWorkers(ctx context.Context) error {
	deadline := time.Now().Add(3*t.cfg.Heartbeat + time.Second)
	for i := 0; i < t.local.Hosts(); {
		t.mu.Lock()
		want := t.hostWorkers(i)
		t.mu.Unlock()
		key := localcluster.HostName(i) + "/" + t.local.Host(i).Ready.Incarnation
		got, ok := t.cache.workers(key)
		if ok && got != want {
			return fmt.Errorf("loadtest: %s's heartbeats report %d workers per server, want %d", localcluster.HostName(i), got, want)
		}
		if ok {
			i++
			continue
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("loadtest: no heartbeat from %s (%s) to check its workers", localcluster.HostName(i), key)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// waitView polls the coordinator until the live servers are exactly those
// of the current host processes, all of them.
func (t *target) waitView(ctx context.Context, timeout time.Duration) error {
	want := map[string]bool{}
	for i := 0; i < t.local.Hosts(); i++ {
		want[t.local.Host(i).Ready.Incarnation] = true
	}
	deadline := time.Now().Add(timeout)
	var last string
	for {
		st, err := t.client.Status(ctx)
		if err == nil {
			good, stale := 0, 0
			for _, s := range st.Servers {
				switch {
				case !s.Alive:
				case want[s.Incarnation]:
					good++
				default:
					stale++
				}
			}
			if good == t.cfg.Hosts*t.cfg.ServersPerHost && stale == 0 {
				return nil
			}
			last = fmt.Sprintf("%d of %d new servers live, %d old ones still live", good, t.cfg.Hosts*t.cfg.ServersPerHost, stale)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("loadtest: the coordinator's view did not settle within %v: %s", timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// usePolicy rewrites the profiles file for ps and makes the coordinator
// reload it.
func (t *target) usePolicy(ctx context.Context, ps PolicySpec) error {
	if ps.Label == PolicyCurrent {
		return nil
	}
	data, err := ProfilesJSON(ps, t.cfg.ServersPerHost)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(t.profiles, data); err != nil {
		return fmt.Errorf("loadtest: profiles file: %w", err)
	}
	if _, err := t.client.Reload(ctx); err != nil {
		return fmt.Errorf("loadtest: reload profiles for %s: %w", ps.Label, err)
	}
	if t.local == nil || t.local.Coordinators() == 1 {
		st, err := t.client.Status(ctx)
		if err != nil {
			return err
		}
		if !summaryHasPolicy(st.ProfilesSummary, ps.Policy) {
			return fmt.Errorf("loadtest: after reload the coordinator runs %q, not policy %s (is %s its --profiles file?)", st.ProfilesSummary, ps.Policy, t.profiles)
		}
		return nil
	}
	// The client reloaded one coordinator; SIGHUP makes every one re-read
	// the file (the same one), and each must then run the policy.
	for i := 0; i < t.local.Coordinators(); i++ {
		if err := t.local.SignalCoordinator(i, syscall.SIGHUP); err != nil {
			return fmt.Errorf("loadtest: reload profiles for %s: %w", ps.Label, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < t.local.Coordinators(); {
		st, err := t.local.StatusOf(ctx, i)
		if err == nil && summaryHasPolicy(st.ProfilesSummary, ps.Policy) {
			i++
			continue
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("it runs %q (see its log in %s)", st.ProfilesSummary, filepath.Join(t.dataDir, "logs"))
			}
			return fmt.Errorf("loadtest: coordinator %d did not switch to policy %s within 10s: %w", i, ps.Policy, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// ensureTable ingests the generated table unless it exists with the same
// shape and content, and waits until a scan of it works; with
// Config.Unverified it then publishes a copy without block roots as the
// table's next generation and scans that. The copy keeps the table's name
// and every tablet's rows, so its tablets have the same selection keys
// (table, end row, prev end row) and home hosts as the verified ones: the
// two runs differ only in verification.
func (t *target) ensureTable(ctx context.Context) (*messages.TableMeta, error) {
	tm, err := t.ensureVerifiedTable(ctx)
	if err != nil || !t.cfg.Unverified {
		return tm, err
	}
	meta, err := t.conn.MetaStore(ctx)
	if err != nil {
		return nil, err
	}
	gen, err := publishUnverified(ctx, meta, tm)
	if err != nil {
		return nil, err
	}
	_ = t.conn.PublishMetaChanged(&messages.TableMeta{Name: tm.GetName(), Generation: gen})
	t.scanOpts = client.ScanOptions{AllowUnverified: true}
	t.cfg.logf("scanning table %s generation %d: generation %d's files without block roots", tm.GetName(), gen, tm.GetGeneration())
	return tm, t.probe(ctx, 30*time.Second)
}

// publishUnverified publishes, as the next generation of tm's table (one
// past the newest stored), a copy of generation tm that names the same
// files without their block roots, and returns its number. Older copies
// without roots that are not current are deleted (metadata only: their
// files belong to the verified generations), so repeated runs on one
// cluster do not pile them up.
func publishUnverified(ctx context.Context, meta *bus.MetaStore, tm *messages.TableMeta) (uint64, error) {
	name, cur := tm.GetName(), tm.GetGeneration()
	gens, err := meta.Generations(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("loadtest: table %s: %w", name, err)
	}
	full, err := meta.Get(ctx, name, cur) // files filled in from manifests
	if err != nil {
		return 0, fmt.Errorf("loadtest: table %s: %w", name, err)
	}
	for _, g := range gens {
		if g == cur {
			continue
		}
		if old, err := meta.Get(ctx, name, g); err == nil && !hasBlockRoots(old) {
			if err := meta.DeleteGeneration(ctx, name, g); err != nil {
				return 0, fmt.Errorf("loadtest: table %s: delete unverified generation %d: %w", name, g, err)
			}
		}
	}
	cp := proto.Clone(full).(*messages.TableMeta)
	cp.Generation = max(cur, slices.Max(append(gens, 0))) + 1
	for _, tab := range cp.GetTablets() {
		tab.GetRef().Generation = cp.Generation
		tab.Manifests = nil // the files are in the record now
		for _, f := range tab.GetFiles() {
			f.BlockRoots = nil
		}
	}
	if err := meta.Publish(ctx, cp, cur); err != nil {
		return 0, fmt.Errorf("loadtest: publish table %s generation %d: %w", name, cp.Generation, err)
	}
	return cp.Generation, nil
}

// hasBlockRoots reports whether every file of tm (its files filled in)
// has block roots, so scans of it can be verified.
func hasBlockRoots(tm *messages.TableMeta) bool {
	for _, tab := range tm.GetTablets() {
		for _, f := range tab.GetFiles() {
			if !tablets.HasBlockRoots(f) {
				return false
			}
		}
	}
	return true
}

// ensureVerifiedTable is ensureTable for Config.Table itself, scanned
// verified. A current generation without block roots (the copy an
// unverified run published) is never used: the newest stored generation
// of the same shape with block roots is made current again (its files
// are the ones the copy names), else the table is ingested anew.
func (t *target) ensureVerifiedTable(ctx context.Context) (*messages.TableMeta, error) {
	cfg := t.cfg
	meta, err := t.conn.MetaStore(ctx)
	if err != nil {
		return nil, err
	}
	fits := func(tm *messages.TableMeta) bool {
		return tm.Rows == uint64(cfg.Rows) && len(tm.Tablets) == cfg.Tablets
	}
	if gen, err := meta.Current(ctx, cfg.Table); err == nil && gen > 0 {
		tm, err := meta.Get(ctx, cfg.Table, gen)
		switch {
		case err != nil || !fits(tm):
		case hasBlockRoots(tm):
			if err := t.probe(ctx, 20*time.Second); err == nil {
				cfg.logf("reusing table %s: generation %d, %d rows, %d tablets", cfg.Table, gen, tm.Rows, len(tm.Tablets))
				return tm, nil
			}
		default:
			tm, err := t.restoreVerified(ctx, meta, gen, fits)
			if err == nil {
				return tm, nil
			}
			cfg.logf("table %s: generation %d has no block roots and no verified generation could be restored (%v)", cfg.Table, gen, err)
		}
	}
	store, err := t.conn.BlockStore(ctx)
	if err != nil {
		return nil, err
	}
	cfg.logf("ingesting table %s: %d generated rows over %d tablets", cfg.Table, cfg.Rows, cfg.Tablets)
	t0 := time.Now()
	icfg := tablets.DefaultIngestConfig()
	icfg.Tablets = cfg.Tablets
	tm, err := tablets.Ingest(ctx, store, meta, cfg.Table, tablets.GenerateRows(cfg.Rows), icfg)
	if errors.Is(err, tablets.ErrCleanup) && tm != nil {
		cfg.logf("warning: ingested, but old generations were not all removed: %v", err)
	} else if err != nil {
		return nil, fmt.Errorf("loadtest: ingest: %w", err)
	}
	_ = t.conn.PublishMetaChanged(&messages.TableMeta{Name: tm.Name, Generation: tm.Generation})
	cfg.logf("ingested generation %d: %d rows, %d tablets, %d bytes in %v", tm.Generation, tm.Rows, len(tm.Tablets), tm.Bytes, time.Since(t0).Round(time.Millisecond))
	if err := t.probe(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	return tm, nil
}

// restoreVerified makes the newest stored generation of the table that
// fits and has block roots current again in place of generation cur
// (tablets.Rollback checks its files are still stored), and waits until a
// verified scan of it works.
func (t *target) restoreVerified(ctx context.Context, meta *bus.MetaStore, cur uint64, fits func(*messages.TableMeta) bool) (*messages.TableMeta, error) {
	table := t.cfg.Table
	gens, err := meta.Generations(ctx, table)
	if err != nil {
		return nil, err
	}
	for i := len(gens) - 1; i >= 0; i-- {
		g := gens[i]
		if g == cur {
			continue
		}
		tm, err := meta.Get(ctx, table, g)
		if err != nil || !fits(tm) || !hasBlockRoots(tm) {
			continue
		}
		store, err := t.conn.BlockStore(ctx)
		if err != nil {
			return nil, err
		}
		if _, err := tablets.Rollback(ctx, store, meta, table, g); err != nil {
			return nil, err
		}
		_ = t.conn.PublishMetaChanged(&messages.TableMeta{Name: table, Generation: g})
		t.cfg.logf("table %s: generation %d (without block roots) replaced by verified generation %d again", table, cur, g)
		if err := t.probe(ctx, 30*time.Second); err != nil {
			return nil, err
		}
		return tm, nil
	}
	return nil, fmt.Errorf("no stored generation of %d rows, %d tablets with block roots", t.cfg.Rows, t.cfg.Tablets)
}

// probe scans the table's first rows until they are right (the
// coordinator may not know a new generation yet).
func (t *target) probe(ctx context.Context, timeout time.Duration) error {
	n := min(t.cfg.Rows, 10)
	ver := NewVerifier(n)
	deadline := time.Now().Add(timeout)
	for {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		tally, err := t.scan(sctx, tablets.Range{Start: tablets.RowKey(0), End: tablets.RowKey(n)})
		cancel()
		if err == nil {
			err = ver.Check(0, n, tally)
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("loadtest: table %s not scannable within %v: %w", t.scanTable, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// scan reads rng of the table and tallies its rows; on error the tally
// holds the rows read before it.
func (t *target) scan(ctx context.Context, rng tablets.Range) (Tally, error) {
	var tally Tally
	for row, err := range t.client.All(ctx, t.scanTable, rng, t.scanOpts) {
		if err != nil {
			return tally, err
		}
		tally.Add(row.Key, row.Value)
	}
	return tally, nil
}

// Timed faults on the fault host.

func (t *target) hang() error   { return t.local.Signal(t.cfg.FaultHost, syscall.SIGSTOP) }
func (t *target) unhang() error { return t.local.Signal(t.cfg.FaultHost, syscall.SIGCONT) }
func (t *target) crash() error  { return t.local.Kill(t.cfg.FaultHost) }
func (t *target) restartFaultHost(ctx context.Context) error {
	return t.local.Restart(ctx, t.cfg.FaultHost)
}

// faultCoordinator is the index of the coordinator the coordinator faults
// hit: Config.FaultCoordinator, or (-1) the one the client sends its
// requests to now.
func (t *target) faultCoordinator() int {
	if t.cfg.FaultCoordinator >= 0 {
		return t.cfg.FaultCoordinator
	}
	cur := t.client.Coordinator()
	for i, a := range t.local.CoordinatorAddrs() {
		if a == cur {
			return i
		}
	}
	return 0
}

// statusAll snapshots the counters of every coordinator the harness can
// reach: over HTTP from each coordinator of a local cluster (keyed by
// name, pid and cluster member id, so a restarted coordinator, or one that
// rejoined the cluster as a new member with fresh counters, is a new key),
// else the client's coordinator.
func (t *target) statusAll(ctx context.Context) (statusSet, error) {
	if t.local == nil {
		st, err := t.client.Status(ctx)
		if err != nil {
			return nil, err
		}
		return statusSet{"": st}, nil
	}
	set := statusSet{}
	var errs []error
	for i := 0; i < t.local.Coordinators(); i++ {
		p := t.local.CoordinatorProc(i)
		if !p.Alive() {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := t.coordinatorStatus(sctx, i)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.Name, err))
			continue
		}
		set[fmt.Sprintf("%s@%d/%s", p.Name, p.PID(), st.MemberID)] = st
	}
	if len(set) == 0 {
		return nil, fmt.Errorf("loadtest: no coordinator status: %w", errors.Join(errs...))
	}
	return set, nil
}

// coordinatorStatus reads local coordinator i's HTTP /status, whose JSON
// is client.Status's.
func (t *target) coordinatorStatus(ctx context.Context, i int) (*client.Status, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.local.HTTPURL(i)+"/status", nil)
	if err != nil {
		return nil, err
	}
	res, err := t.local.HTTPClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("loadtest: %s/status: %s", t.local.HTTPURL(i), res.Status)
	}
	var st client.Status
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("loadtest: %s/status: %w", t.local.HTTPURL(i), err)
	}
	return &st, nil
}

// cacheTracker follows the per-host block cache counters in heartbeats.
// Counters are per host process (key host/incarnation); a snapshot taken
// by mark() is completed by each process's next heartbeat, so a window
// between two marks covers what the processes did between them, give or
// take nothing but the time between a heartbeat's sampling and sending.
type cacheTracker struct {
	mu     sync.Mutex
	latest map[string]cacheCounters
	marks  []*cacheMark
}

type cacheCounters struct {
	hits, misses uint64
	workers      int // per server, as the heartbeat says
	at           time.Time
	gone         bool // the process said it is leaving
}

type cacheMark struct {
	before map[string]cacheCounters // latest at mark time
	after  map[string]cacheCounters // first heartbeat after the mark
}

func newCacheTracker() *cacheTracker { return &cacheTracker{latest: map[string]cacheCounters{}} }

func (c *cacheTracker) observe(hb *messages.Heartbeat) {
	key := hb.GetHost() + "/" + hb.GetIncarnation()
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.latest[key]
	cur.hits, cur.misses, cur.at = max(cur.hits, hb.GetCacheHits()), max(cur.misses, hb.GetCacheMisses()), now
	cur.gone = cur.gone || hb.GetLeaving()
	cur.workers = int(hb.GetWorkers())
	c.latest[key] = cur
	for _, m := range c.marks {
		if _, ok := m.after[key]; !ok {
			m.after[key] = cur
		}
	}
}

// workers is the per-server workers process key (host/incarnation)
// reported, if it sent a heartbeat.
func (c *cacheTracker) workers(key string) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.latest[key]
	return v.workers, ok
}

// mark starts a snapshot.
func (c *cacheTracker) mark() *cacheMark {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := &cacheMark{before: map[string]cacheCounters{}, after: map[string]cacheCounters{}}
	for k, v := range c.latest {
		m.before[k] = v
	}
	c.marks = append(c.marks, m)
	return m
}

// settle waits (up to timeout) until every process that sent a heartbeat
// in the last 3 intervals, and did not announce it was leaving, has
// reported after m.
func (c *cacheTracker) settle(ctx context.Context, m *cacheMark, interval, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		c.mu.Lock()
		waiting := 0
		for k, v := range c.latest {
			if _, ok := m.after[k]; !ok && !v.gone && time.Since(v.at) < 3*interval {
				waiting++
			}
		}
		c.mu.Unlock()
		if waiting == 0 || time.Now().After(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// value is a process's counters at m: its first heartbeat after m, or its
// last one before m if it never reported again; a process first seen
// after m started from zero.
func (m *cacheMark) value(key string) cacheCounters {
	if _, existed := m.before[key]; !existed {
		return cacheCounters{}
	}
	if v, ok := m.after[key]; ok {
		return v
	}
	return m.before[key]
}

// delta is the cache hits and misses of all processes between two marks.
func (c *cacheTracker) delta(m0, m1 *cacheMark) (hits, misses uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Processes known at m1 only: one first seen after m1 worked after the window.
	for k := range m1.before {
		v0, v1 := m0.value(k), m1.value(k)
		if v1.hits >= v0.hits && v1.misses >= v0.misses {
			hits += v1.hits - v0.hits
			misses += v1.misses - v0.misses
		}
	}
	c.marks = slices.DeleteFunc(c.marks, func(m *cacheMark) bool { return m == m0 || m == m1 })
	return hits, misses
}
