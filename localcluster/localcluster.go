// Package localcluster starts a scanplane cluster of real processes on one
// machine: one or more coordinators and one scanserver process per host,
// each an OS process talking over loopback. With an embedded NATS (the
// default), a single coordinator embeds the only NATS server; several
// coordinators each embed one node of a NATS cluster (routes between them,
// JetStream replicas min(Coordinators, 3)), and the scan servers and
// clients get every node's URL, so the loss of one coordinator loses
// neither NATS nor data. It is what `scanctl up`, the end-to-end tests and
// the load-test harness stand on. It can signal hosts and coordinators
// (SIGSTOP, SIGCONT, SIGKILL) and restart them, to inject faults from
// outside; a restarted coordinator keeps its name, ports and data
// directory (its JetStream peer identity).
//
// Children get --die-with-parent and a stdin pipe: if the parent dies, the
// pipe closes and they shut down, so nothing lingers.
//
// Concurrency contract: a Cluster's methods are safe for concurrent use.
package localcluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/scanplane/scanplane/internal/freeport"
	"github.com/scanplane/scanplane/internal/procstop"
	"github.com/scanplane/scanplane/internal/readyfile"
	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/messages"
)

// ErrNotReady: a process did not become ready in time.
var ErrNotReady = errors.New("localcluster: not ready")

// ErrPortInUse: a fixed port of Config.Addrs is taken by another process
// (Start checks them all before it starts anything).
var ErrPortInUse = errors.New("localcluster: port in use")

// errExited: a process exited before it was ready (wraps ErrNotReady).
var errExited = fmt.Errorf("%w", ErrNotReady)

// coordinatorTries: how often a coordinator of an embedded NATS cluster
// is started before its failure to become ready is final. While the
// cluster forms, or re-forms after losing its quorum, JetStream may
// refuse or not answer a coordinator's first bucket operations long
// enough for it to give up and exit; started again, it joins the formed
// cluster.
const coordinatorTries = 5

// CoordinatorAddrs are one coordinator's listen addresses (host:port). An
// empty field means 127.0.0.1:0: the NATS client, actor and HTTP ports are
// then chosen by the coordinator at its first start, the route port by
// Start just before (a free port, listened on and closed), and a restart
// reuses them all.
type CoordinatorAddrs struct {
	// NATS: the embedded NATS node's client port (--nats-listen).
	NATS string
	// Routes: the embedded NATS node's route port (--nats-cluster); only
	// used with Coordinators >= 2 and an embedded NATS.
	Routes string
	// Actor: the coordinator's actor remote (--listen).
	Actor string
	// HTTP: /status and /metrics (--http).
	HTTP string
}

// DefaultPortBase is the port base of the well-known ports (PortAddrs):
// coordinator 0's NATS client port.
const DefaultPortBase = 4222

// MaxPortBase is the highest port base whose ports, for 9 coordinators,
// stay below 65536.
const MaxPortBase = 65535 - (8090 - DefaultPortBase) - 2*8 - 1

// PortAddrs are coordinator i's fixed local ports for port base b, all on
// 127.0.0.1: NATS b+i, routes b+2000+i, actors b+3868+2i, HTTP b+3869+2i.
// Base 4222 (DefaultPortBase) gives the well-known ports `scanctl up`
// uses by default (NATS 4222+i, routes 6222+i, actors 8090+2i, HTTP
// 8091+2i); any other base moves them all by the same amount.
func PortAddrs(b, i int) CoordinatorAddrs {
	hp := func(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
	off := b - DefaultPortBase
	return CoordinatorAddrs{NATS: hp(4222 + off + i), Routes: hp(6222 + off + i), Actor: hp(8090 + off + 2*i), HTTP: hp(8091 + off + 2*i)}
}

// PortNATSURLs is the comma-separated client URL list of n coordinators
// on the ports of base b (PortAddrs).
func PortNATSURLs(b, n int) string {
	urls := make([]string, n)
	for i := range urls {
		urls[i] = "nats://" + PortAddrs(b, i).NATS
	}
	return strings.Join(urls, ",")
}

// WellKnownAddrs are coordinator i's well-known ports:
// PortAddrs(DefaultPortBase, i).
func WellKnownAddrs(i int) CoordinatorAddrs { return PortAddrs(DefaultPortBase, i) }

// WellKnownNATSURLs is PortNATSURLs(DefaultPortBase, n).
func WellKnownNATSURLs(n int) string { return PortNATSURLs(DefaultPortBase, n) }

// CheckPorts listens on every fixed (non-zero) port of cfg.Addrs that
// Start would have the coordinators listen on, and closes it again: the
// NATS client and, with several coordinators, route ports only with an
// embedded NATS. A port another process holds is an error wrapping
// ErrPortInUse naming the first such port, whose it is, and how many
// more are taken.
func CheckPorts(cfg Config) error {
	n := max(cfg.Coordinators, 1)
	embedded := cfg.NATSURL == ""
	var first string
	busy := 0
	for i, a := range cfg.Addrs {
		for _, p := range []struct {
			role, addr string
			used       bool
		}{{"NATS", a.NATS, embedded}, {"NATS routes", a.Routes, embedded && n > 1}, {"actors", a.Actor, true}, {"HTTP", a.HTTP, true}} {
			if p.addr == "" || !p.used {
				continue
			}
			if _, port, err := net.SplitHostPort(p.addr); err != nil || port == "0" {
				continue
			}
			l, err := net.Listen("tcp", p.addr)
			if err != nil {
				if !errors.Is(err, syscall.EADDRINUSE) {
					return fmt.Errorf("localcluster: %s of %s: %w", p.addr, CoordinatorName(i, n), err)
				}
				if busy++; first == "" {
					first = fmt.Sprintf("%s (%s of %s)", p.addr, p.role, CoordinatorName(i, n))
				}
				continue
			}
			l.Close()
		}
	}
	switch busy {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%w: %s", ErrPortInUse, first)
	}
	return fmt.Errorf("%w: %s and %d more of the cluster's ports", ErrPortInUse, first, busy-1)
}

// Config describes a local cluster.
type Config struct {
	// Coordinators: coordinator processes; default 1, at most 9. With an
	// embedded NATS and 2 or more, each embeds one node of a NATS cluster
	// (see the package comment); with NATSURL set they all use it.
	Coordinators int
	// Hosts: scanserver processes; default 3.
	Hosts int
	// ServersPerHost: scan-server actors per process; default 2.
	ServersPerHost int
	// Zones: hosts are spread round-robin over zone-1..zone-Z; default 1.
	Zones int
	// NATSURL: an existing NATS (with JetStream; comma-separated URLs of a
	// cluster) for the coordinators to use; "" = embedded (default).
	NATSURL string
	// Replicas: JetStream replicas of every bucket (--replicas) with an
	// embedded NATS cluster; 0 = min(Coordinators, 3). Ignored with one
	// coordinator or NATSURL.
	Replicas int
	// DataDir: coordinator data (embedded JetStream) and child logs.
	// Required. One coordinator keeps its data in DataDir (JetStream in
	// DataDir/nats); several in DataDir/coordinatorI (I = 1..N).
	DataDir string
	// BinDir holds the coordinator and scanserver executables; "" = find
	// them (see FindBinaries).
	BinDir string
	// Addrs[i]: coordinator i's listen addresses; missing entries and
	// empty fields are 127.0.0.1:0 (see CoordinatorAddrs). `scanctl up`
	// uses WellKnownAddrs so the other scanctl commands find the cluster.
	Addrs []CoordinatorAddrs
	// Profiles: path of a profiles JSON for the coordinators ("" = default).
	Profiles string
	// CoordinatorArgs are extra flags of every coordinator.
	CoordinatorArgs []string
	// HostArgs returns extra scanserver flags for host i (faults, cache
	// size); may be nil.
	HostArgs func(i int) []string
	// HostMetrics starts every scanserver with --http 127.0.0.1:0: its
	// /metrics on an ephemeral port, whose address is in Host(i).Ready.HTTP
	// (a new one after each restart). HostArgs may override it.
	HostMetrics bool
	// Heartbeat interval of the scan servers; default 1s.
	Heartbeat time.Duration
	// ReadyTimeout: how long a process may take to become ready; default 60s.
	ReadyTimeout time.Duration
	// LogLevel for children; default "warn".
	LogLevel string
	// Secrets: a secrets directory (secrets.Init, `scanctl secrets
	// init`) given to every coordinator and scanserver as --secrets: the
	// actor remote has mutual TLS and the HTTP endpoints HTTPS with
	// authentication; the cluster reads /status with the admin
	// certificate. "" = plain text.
	Secrets string
}

// Defaults fills zero fields with defaults.
func (c *Config) Defaults() {
	if c.Coordinators == 0 {
		c.Coordinators = 1
	}
	if c.Hosts == 0 {
		c.Hosts = 3
	}
	if c.ServersPerHost == 0 {
		c.ServersPerHost = 2
	}
	if c.Zones == 0 {
		c.Zones = 1
	}
	if c.Replicas == 0 {
		c.Replicas = min(c.Coordinators, 3)
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = time.Second
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 60 * time.Second
	}
	if c.LogLevel == "" {
		c.LogLevel = "warn"
	}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Coordinators < 1 || c.Coordinators > 9:
		return fmt.Errorf("localcluster: Coordinators %d must be in [1, 9]", c.Coordinators)
	case c.Hosts < 1 || c.Hosts > 64:
		return fmt.Errorf("localcluster: Hosts %d must be in [1, 64]", c.Hosts)
	case c.ServersPerHost < 1 || c.ServersPerHost > 64:
		return fmt.Errorf("localcluster: ServersPerHost %d must be in [1, 64]", c.ServersPerHost)
	case c.Zones < 1 || c.Zones > c.Hosts:
		return fmt.Errorf("localcluster: Zones %d must be in [1, Hosts=%d]", c.Zones, c.Hosts)
	case c.Replicas < 1 || c.Replicas > c.Coordinators || c.Replicas > 5:
		return fmt.Errorf("localcluster: Replicas %d must be in [1, min(Coordinators=%d, 5)]", c.Replicas, c.Coordinators)
	case len(c.Addrs) > c.Coordinators:
		return fmt.Errorf("localcluster: Addrs has %d entries for %d coordinators", len(c.Addrs), c.Coordinators)
	case c.DataDir == "":
		return errors.New("localcluster: DataDir is empty")
	}
	for i, a := range c.Addrs {
		for _, f := range []struct{ name, v string }{{"NATS", a.NATS}, {"Routes", a.Routes}, {"Actor", a.Actor}, {"HTTP", a.HTTP}} {
			if f.v == "" {
				continue
			}
			if _, _, err := net.SplitHostPort(f.v); err != nil {
				return fmt.Errorf("localcluster: Addrs[%d].%s %q: %v", i, f.name, f.v, err)
			}
		}
	}
	return nil
}

// Proc is one child process.
type Proc struct {
	Name  string
	Ready readyfile.Ready
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
	err   error
}

// Alive reports whether the process has not exited.
func (p *Proc) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// PID returns the OS process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Cluster is a running local cluster.
type Cluster struct {
	cfg       Config
	coordBin  string
	serverBin string
	natsURLs  []string // every coordinator's NATS client URL (or NATSURL's), fixed at Start
	mu        sync.Mutex
	coords    []*coord
	hosts     []*Proc
	closed    bool
	closedCh  chan struct{} // closed by Close
	http      *http.Client  // reads /status (admin certificate with Secrets)
	scheme    string        // of the coordinators' HTTP: http or https
}

// coord is one coordinator: its current process and what a restart needs.
type coord struct {
	name    string
	dataDir string
	addrs   CoordinatorAddrs // after the first start: the ports it bound
	proc    *Proc
}

// HostName is the host id of host i.
func HostName(i int) string { return fmt.Sprintf("host%d", i+1) }

// ZoneName is the zone of host i among z zones.
func ZoneName(i, z int) string { return fmt.Sprintf("zone-%d", i%z+1) }

// CoordinatorName is the name of coordinator i of n: its process, log
// file (DataDir/logs/NAME.log) and NATS server name; "coordinator" when it
// is the only one, else "coordinator1".."coordinatorN".
func CoordinatorName(i, n int) string {
	if n == 1 {
		return "coordinator"
	}
	return fmt.Sprintf("coordinator%d", i+1)
}

// Start launches the coordinators (in parallel: an embedded NATS cluster's
// JetStream needs a quorum of its nodes before any of them is ready), then
// every host, and waits until every coordinator sees every scan server
// alive.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := CheckPorts(cfg); err != nil {
		return nil, err
	}
	if err := makeLogDir(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	coordBin, serverBin, err := FindBinaries(ctx, cfg.BinDir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, coordBin: coordBin, serverBin: serverBin, closedCh: make(chan struct{}), http: http.DefaultClient, scheme: "http"}
	if cfg.Secrets != "" {
		if c.http, err = secrets.HTTPClient(cfg.Secrets, "admin"); err != nil {
			return nil, fmt.Errorf("localcluster: Secrets: %w", err)
		}
		c.scheme = "https"
	}
	n := cfg.Coordinators
	clustered := n > 1 && cfg.NATSURL == ""
	for i := 0; i < n; i++ {
		co := &coord{name: CoordinatorName(i, n), dataDir: cfg.DataDir}
		if i < len(cfg.Addrs) {
			co.addrs = cfg.Addrs[i]
		}
		if n > 1 {
			co.dataDir = filepath.Join(cfg.DataDir, co.name)
		}
		for _, p := range []*string{&co.addrs.NATS, &co.addrs.Actor, &co.addrs.HTTP} {
			if *p == "" {
				*p = "127.0.0.1:0"
			}
		}
		if clustered {
			// Every node's route port must be known before any starts.
			if co.addrs.Routes, err = freePort(co.addrs.Routes); err != nil {
				return nil, err
			}
		} else {
			co.addrs.Routes = ""
		}
		c.coords = append(c.coords, co)
	}
	procs := make([]*Proc, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range c.coords {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			procs[i], errs[i] = c.spawnCoordinator(ctx, i)
		}(i)
	}
	wg.Wait()
	for i, p := range procs {
		c.coords[i].proc = p
	}
	if err := firstOf(errs, filepath.Join(cfg.DataDir, "logs")); err != nil {
		c.Close()
		return nil, err
	}
	for _, co := range c.coords {
		co.settle()
		if cfg.NATSURL == "" {
			c.natsURLs = append(c.natsURLs, co.proc.Ready.NATS)
		}
	}
	if cfg.NATSURL != "" {
		c.natsURLs = splitURLs(cfg.NATSURL)
	}
	for i := 0; i < cfg.Hosts; i++ {
		p, err := c.spawn(ctx, HostName(i), serverBin, c.hostArgs(i))
		if err != nil {
			c.Close()
			return nil, err
		}
		c.hosts = append(c.hosts, p)
	}
	if err := c.WaitServers(ctx, cfg.Hosts*cfg.ServersPerHost, cfg.ReadyTimeout); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// firstOf returns the first error of errs (nil if there is none), saying
// how many more there are: coordinators started together usually fail
// for one cause, which is worth reading once.
func firstOf(errs []error, logs string) error {
	var first error
	more := 0
	for _, err := range errs {
		switch {
		case err == nil:
		case first == nil:
			first = err
		default:
			more++
		}
	}
	if more > 0 {
		return fmt.Errorf("%w (and %d more coordinators failed to start; logs in %s)", first, more, logs)
	}
	return first
}

// freePort returns addr if its port is not 0, else addr's host with a
// port that was free a moment ago, below the kernel's ephemeral range
// (freeport.Pick).
func freePort(addr string) (string, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("localcluster: %q: %w", addr, err)
	}
	if port != "0" {
		return addr, nil
	}
	return freeport.Pick(host)
}

func splitURLs(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// settle records the addresses the coordinator bound at its first start,
// so that a restart listens on the same ones.
func (co *coord) settle() {
	r := co.proc.Ready
	if u := strings.TrimPrefix(r.NATS, "nats://"); u != r.NATS && !strings.Contains(u, ",") {
		co.addrs.NATS = u
	}
	if r.Actor != "" {
		co.addrs.Actor = r.Actor
	}
	if r.HTTP != "" {
		co.addrs.HTTP = r.HTTP
	}
}

// spawnCoordinator starts coordinator i and waits until it is ready; a
// node of an embedded NATS cluster that exits before it is ready is
// started again, up to coordinatorTries (5) times (its log keeps every
// try).
func (c *Cluster) spawnCoordinator(ctx context.Context, i int) (*Proc, error) {
	tries := 1
	if c.coords[i].addrs.Routes != "" {
		tries = coordinatorTries
	}
	var errs []error
	for try := 1; ; try++ {
		p, err := c.spawn(ctx, c.coords[i].name, c.coordBin, c.coordArgs(i))
		if err == nil {
			return p, nil
		}
		errs = append(errs, err)
		if try == tries || !errors.Is(err, errExited) || ctx.Err() != nil {
			switch {
			case len(errs) == 1:
				return nil, err
			case errs[0].Error() == err.Error():
				return nil, fmt.Errorf("%w (after %d tries)", err, try)
			}
			return nil, fmt.Errorf("%w (after %d tries; the first: %v)", err, try, errs[0])
		}
	}
}

// coordArgs are coordinator i's flags.
func (c *Cluster) coordArgs(i int) []string {
	co := c.coords[i]
	args := []string{"--data", co.dataDir, "--nats-listen", co.addrs.NATS, "--listen", co.addrs.Actor,
		"--http", co.addrs.HTTP, "--log-level", c.cfg.LogLevel}
	if c.cfg.Profiles != "" {
		args = append(args, "--profiles", c.cfg.Profiles)
	}
	if c.cfg.Secrets != "" {
		args = append(args, "--secrets", c.cfg.Secrets)
	}
	if c.cfg.NATSURL != "" {
		args = append(args, "--nats", c.cfg.NATSURL)
	} else if co.addrs.Routes != "" {
		var routes []string
		for j, o := range c.coords {
			if j != i {
				routes = append(routes, "nats-route://"+o.addrs.Routes)
			}
		}
		args = append(args, "--nats-cluster", co.addrs.Routes, "--nats-routes", strings.Join(routes, ","),
			"--nats-name", co.name, "--replicas", strconv.Itoa(c.cfg.Replicas))
	}
	return append(args, c.cfg.CoordinatorArgs...)
}

func (c *Cluster) hostArgs(i int) []string {
	args := []string{"--nats", c.NATSURL(), "--host", HostName(i), "--zone", ZoneName(i, c.cfg.Zones),
		"--servers", strconv.Itoa(c.cfg.ServersPerHost), "--heartbeat", c.cfg.Heartbeat.String(), "--log-level", c.cfg.LogLevel}
	if c.cfg.HostMetrics {
		args = append(args, "--http", "127.0.0.1:0")
	}
	if c.cfg.Secrets != "" {
		args = append(args, "--secrets", c.cfg.Secrets)
	}
	if c.cfg.HostArgs != nil {
		args = append(args, c.cfg.HostArgs(i)...)
	}
	return args
}

// makeLogDir creates DATA/logs, readable by this user only (0700, also
// when an earlier run made it otherwise): the children's logs name
// tables, addresses, secrets paths and errors.
func makeLogDir(dataDir string) error {
	dir := filepath.Join(dataDir, "logs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// logFile is the log of the child name: DATA/logs/NAME.log.
func logFile(dataDir, name string) string {
	return filepath.Join(dataDir, "logs", name+".log")
}

// openLog opens a child's log for appending, readable and writable by
// this user only (0600, also when an earlier run made it otherwise).
func openLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// spawn starts a child with --ready-file and --die-with-parent and waits
// for its ready file.
func (c *Cluster) spawn(ctx context.Context, name, bin string, args []string) (*Proc, error) {
	ready := filepath.Join(c.cfg.DataDir, "logs", name+".ready.json")
	_ = os.Remove(ready)
	logPath := logFile(c.cfg.DataDir, name)
	logf, err := openLog(logPath)
	if err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	// The log keeps every start; an error quotes this one's lines.
	var logStart int64
	if st, err := logf.Stat(); err == nil {
		logStart = st.Size()
	}
	args = append(args, "--ready-file", ready, "--die-with-parent")
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group: a terminal's Ctrl-C reaches scanctl, which stops
	// the children in order, not all at once.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("localcluster: start %s: %w", name, err)
	}
	p := &Proc{Name: name, cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	deadline := time.Now().Add(c.cfg.ReadyTimeout)
	for {
		data, err := os.ReadFile(ready)
		if err == nil && json.Unmarshal(data, &p.Ready) == nil {
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("%w: %s exited (%v) before it was ready; log: %s%s", errExited, name, p.err, logPath, tail(logPath, logStart))
		case <-ctx.Done():
			p.stop(time.Second)
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop(time.Second)
			return nil, fmt.Errorf("%w: %s not ready within %v; log: %s%s", ErrNotReady, name, c.cfg.ReadyTimeout, logPath, tail(logPath, logStart))
		}
	}
}

// tail returns the last 5 lines of the file at path from offset from on,
// each on a new line and indented.
func tail(path string, from int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return ""
	}
	var lines []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > 5 {
			lines = lines[1:]
		}
	}
	out := ""
	for _, l := range lines {
		out += "\n    " + l
	}
	return out
}

// stop asks a process to stop (SIGTERM, after SIGCONT in case it is
// stopped) and kills it after grace.
func (p *Proc) stop(grace time.Duration) {
	if !p.Alive() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	_ = p.stdin.Close()
}

// NATSURL is the cluster's NATS: every node's client URL, comma-separated
// (one URL with one coordinator), as bus.Config.URL and client.Config.NATSURL
// take it, so a connection survives the loss of a node.
func (c *Cluster) NATSURL() string { return strings.Join(c.natsURLs, ",") }

// NATSURLs are the client URLs of every NATS node (with NATSURL set: its
// entries), in coordinator order.
func (c *Cluster) NATSURLs() []string { return append([]string(nil), c.natsURLs...) }

// Coordinators is the number of coordinators.
func (c *Cluster) Coordinators() int { return len(c.coords) }

// CoordinatorProc returns coordinator i's current process.
func (c *Cluster) CoordinatorProc(i int) *Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.coords[i].proc
}

// CoordinatorAddr is coordinator i's actor address (i = 0 when omitted),
// the same across its restarts.
func (c *Cluster) CoordinatorAddr(i ...int) string { return c.coordAddrs(i).Actor }

// CoordinatorAddrs are every coordinator's actor addresses, in order (a
// client's Config.Coordinators).
func (c *Cluster) CoordinatorAddrs() []string {
	out := make([]string, len(c.coords))
	for i := range out {
		out[i] = c.CoordinatorAddr(i)
	}
	return out
}

// HTTPAddr is coordinator i's HTTP address (i = 0 when omitted).
func (c *Cluster) HTTPAddr(i ...int) string { return c.coordAddrs(i).HTTP }

func (c *Cluster) coordAddrs(i []int) CoordinatorAddrs {
	idx := 0
	if len(i) > 0 {
		idx = i[0]
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.coords[idx].addrs
}

// Coordinator returns coordinator 0's current process.
func (c *Cluster) Coordinator() *Proc { return c.CoordinatorProc(0) }

// Host returns host i's current process.
func (c *Cluster) Host(i int) *Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hosts[i]
}

// Hosts is the number of hosts.
func (c *Cluster) Hosts() int { return len(c.hosts) }

// Signal sends sig to host i's process; a SIGSTOP returns once every
// thread of it is stopped.
func (c *Cluster) Signal(i int, sig syscall.Signal) error { return signal(c.Host(i), sig) }

// SignalCoordinator sends sig to coordinator i's process, as Signal.
func (c *Cluster) SignalCoordinator(i int, sig syscall.Signal) error {
	return signal(c.CoordinatorProc(i), sig)
}

func signal(p *Proc, sig syscall.Signal) error {
	if !p.Alive() {
		return fmt.Errorf("localcluster: %s is not running", p.Name)
	}
	if sig == syscall.SIGSTOP {
		return procstop.Stop(p.cmd.Process.Pid, stopWait)
	}
	return p.cmd.Process.Signal(sig)
}

// stopWait bounds the wait for a SIGSTOPped process's threads to stop.
const stopWait = 30 * time.Second

// Kill SIGKILLs host i and waits for it to exit.
func (c *Cluster) Kill(i int) error { return kill(c.Host(i)) }

// KillCoordinator SIGKILLs coordinator i and waits for it to exit.
func (c *Cluster) KillCoordinator(i int) error { return kill(c.CoordinatorProc(i)) }

func kill(p *Proc) error {
	if err := p.cmd.Process.Kill(); err != nil && p.Alive() {
		return err
	}
	<-p.done
	_ = p.stdin.Close()
	return nil
}

// Restart starts host i again (after Kill) with the same flags; it waits
// until its servers are alive in every coordinator's view, or until the
// new process exits (an error: Supervise then restarts it again).
func (c *Cluster) Restart(ctx context.Context, i int) error {
	old := c.Host(i)
	old.stop(5 * time.Second)
	p, err := c.spawn(ctx, HostName(i), c.serverBin, c.hostArgs(i))
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.closed { // Close ran meanwhile and did not see p: stop it here
		c.mu.Unlock()
		p.stop(5 * time.Second)
		return ErrClosed
	}
	c.hosts[i] = p
	c.mu.Unlock()
	return whileRunning(ctx, p, func(ctx context.Context) error {
		return c.WaitServers(ctx, c.cfg.Hosts*c.cfg.ServersPerHost, c.cfg.ReadyTimeout)
	})
}

// whileRunning runs wait, a wait for the cluster to see the new process
// p, and ends it early when p exits: a restarted process that dies before
// it is seen is reported at once (errExited, with how it ended), so that
// its supervisor restarts it after its back-off instead of after
// ReadyTimeout.
func whileRunning(ctx context.Context, p *Proc, wait func(context.Context) error) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-wctx.Done():
		}
	}()
	err := wait(wctx)
	if err != nil && !p.Alive() && ctx.Err() == nil {
		return fmt.Errorf("%w: %s (pid %d) exited (%v) before every coordinator saw it", errExited, p.Name, p.PID(), p.exitErr())
	}
	return err
}

// RestartCoordinator starts coordinator i again (after KillCoordinator,
// or stops it first) with the same name, ports and data directory; it
// waits until the coordinator is ready (its embedded NATS node rejoined
// and JetStream answers) and sees every scan server alive, or until the
// new process exits (an error).
func (c *Cluster) RestartCoordinator(ctx context.Context, i int) error {
	c.mu.Lock()
	co := c.coords[i]
	old := co.proc
	c.mu.Unlock()
	old.stop(5 * time.Second)
	p, err := c.spawnCoordinator(ctx, i)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.closed { // Close ran meanwhile and did not see p: stop it here
		c.mu.Unlock()
		p.stop(5 * time.Second)
		return ErrClosed
	}
	co.proc = p
	c.mu.Unlock()
	return whileRunning(ctx, p, func(ctx context.Context) error {
		return c.waitServersOf(ctx, []int{i}, c.cfg.Hosts*c.cfg.ServersPerHost, c.cfg.ReadyTimeout)
	})
}

// Status fetches coordinator 0's /status.
func (c *Cluster) Status(ctx context.Context) (*messages.StatusReply, error) {
	return c.StatusOf(ctx, 0)
}

// StatusOf fetches coordinator i's /status (over HTTPS with the admin
// certificate with Config.Secrets).
func (c *Cluster) StatusOf(ctx context.Context, i int) (*messages.StatusReply, error) {
	return FetchStatusWith(ctx, c.http, c.HTTPURL(i)+"/status")
}

// HTTPURL is coordinator i's HTTP base URL (i = 0 when omitted):
// https://ADDR with Config.Secrets, else http://ADDR.
func (c *Cluster) HTTPURL(i ...int) string { return c.scheme + "://" + c.coordAddrs(i).HTTP }

// HTTPScheme is the scheme of every process's HTTP endpoint: https with
// Config.Secrets, else http.
func (c *Cluster) HTTPScheme() string { return c.scheme }

// HTTPClient is the client the cluster reads /status with: with
// Config.Secrets it presents the admin certificate and trusts the
// cluster CA.
func (c *Cluster) HTTPClient() *http.Client { return c.http }

// FetchStatus reads a coordinator's plain HTTP /status (the protobuf
// JSON mapping of messages.StatusReply with integers as numbers, see
// cliutil.MarshalStatus).
func FetchStatus(ctx context.Context, httpAddr string) (*messages.StatusReply, error) {
	return FetchStatusWith(ctx, http.DefaultClient, "http://"+httpAddr+"/status")
}

// FetchStatusWith reads the /status at url with hc (e.g. the client of
// secrets.HTTPClient for a coordinator with --secrets).
func FetchStatusWith(ctx context.Context, hc *http.Client, url string) (*messages.StatusReply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	res, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /status: %s: %s", res.Status, bytes.TrimSpace(data))
	}
	var st messages.StatusReply
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("GET /status: %w", err)
	}
	return &st, nil
}

// WaitServers polls until every coordinator whose process runs sees at
// least n live servers.
func (c *Cluster) WaitServers(ctx context.Context, n int, timeout time.Duration) error {
	var all []int
	for i := range c.coords {
		all = append(all, i)
	}
	return c.waitServersOf(ctx, all, n, timeout)
}

// WaitCoordinatorBack polls until coordinator i runs (a supervisor may be
// restarting it) and sees at least n live servers.
func (c *Cluster) WaitCoordinatorBack(ctx context.Context, i, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !c.CoordinatorProc(i).Alive() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s not running after %v", ErrNotReady, c.coords[i].name, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return c.waitServersOf(ctx, []int{i}, n, time.Until(deadline))
}

func (c *Cluster) waitServersOf(ctx context.Context, coords []int, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		// Every coordinator that is not ready is named: after a timeout
		// the message says which ones miss which servers.
		var missing []string
		for _, i := range coords {
			if !c.CoordinatorProc(i).Alive() {
				continue
			}
			st, err := c.StatusOf(ctx, i)
			if err != nil {
				missing = append(missing, fmt.Sprintf("%s: %v", c.coords[i].name, err))
				continue
			}
			live := 0
			for _, s := range st.Servers {
				if s.Alive {
					live++
				}
			}
			if live < n {
				missing = append(missing, fmt.Sprintf("%s sees %d live servers, want %d%s (host actors %d, bad messages refused %d, actor failures %d)",
					c.coords[i].name, live, n, notAlive(st.Servers), st.GetHostActors(), st.GetBadMessages(), st.GetActorFailures()))
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: after %v: %s", ErrNotReady, timeout, strings.Join(missing, "; "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// notAlive names the servers of a status that are not alive, with their
// address and the age of their last heartbeat ("" when all are).
func notAlive(servers []*messages.ServerStatus) string {
	var out []string
	for _, s := range servers {
		if !s.GetAlive() {
			age := "never"
			if ms := s.GetLastHeartbeatUnixMs(); ms > 0 {
				age = time.Since(time.UnixMilli(ms)).Round(time.Millisecond).String() + " ago"
			}
			out = append(out, fmt.Sprintf("%s (incarnation %s, last heartbeat %s)", s.GetId(), s.GetIncarnation(), age))
		}
	}
	if len(out) == 0 {
		return " (none listed as dead: the others are unknown to it)"
	}
	return "; not alive: " + strings.Join(out, ", ")
}

// Close stops every host, then every coordinator (in parallel).
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.closedCh)
	hosts := append([]*Proc(nil), c.hosts...)
	var coords []*Proc
	for _, co := range c.coords {
		if co.proc != nil {
			coords = append(coords, co.proc)
		}
	}
	c.mu.Unlock()
	stopAll := func(ps []*Proc) {
		var wg sync.WaitGroup
		for _, p := range ps {
			wg.Add(1)
			go func(p *Proc) { defer wg.Done(); p.stop(10 * time.Second) }(p)
		}
		wg.Wait()
	}
	stopAll(hosts)
	stopAll(coords)
	return nil
}

// Done is closed when the process exits.
func (p *Proc) Done() <-chan struct{} { return p.done }
