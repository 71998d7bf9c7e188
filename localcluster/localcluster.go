// Package localcluster starts a scanplane cluster of real processes on one
// machine: one coordinator (with its embedded NATS server) and one
// scanserver process per host, each an OS process talking over loopback.
// It is what `scanctl up`, the end-to-end tests and the load-test harness
// stand on. It can signal hosts (SIGSTOP, SIGCONT, SIGKILL) and restart
// them, to inject faults from outside.
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
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/messages"
)

// ErrNotReady: a process did not become ready in time.
var ErrNotReady = errors.New("localcluster: not ready")

// Config describes a local cluster.
type Config struct {
	// Hosts: scanserver processes; default 3.
	Hosts int
	// ServersPerHost: scan-server actors per process; default 2.
	ServersPerHost int
	// Zones: hosts are spread round-robin over zone-1..zone-Z; default 1.
	Zones int
	// NATSURL: an existing NATS (with JetStream) for the coordinator to
	// use; "" = the coordinator runs its embedded server.
	NATSURL string
	// DataDir: coordinator data (embedded JetStream) and child logs. Required.
	DataDir string
	// BinDir holds the coordinator and scanserver executables; "" = find
	// them (see FindBinaries).
	BinDir string
	// NATSListen, CoordinatorListen, HTTPListen: coordinator addresses;
	// defaults 127.0.0.1:0 (ephemeral). `scanctl up` uses the well-known
	// ports so the other scanctl commands find the cluster.
	NATSListen        string
	CoordinatorListen string
	HTTPListen        string
	// Profiles: path of a profiles JSON for the coordinator ("" = default).
	Profiles string
	// CoordinatorArgs are extra coordinator flags.
	CoordinatorArgs []string
	// HostArgs returns extra scanserver flags for host i (faults, cache
	// size); may be nil.
	HostArgs func(i int) []string
	// Heartbeat interval of the scan servers; default 1s.
	Heartbeat time.Duration
	// ReadyTimeout: how long a process may take to become ready; default 60s.
	ReadyTimeout time.Duration
	// LogLevel for children; default "warn".
	LogLevel string
}

// Defaults fills zero fields with defaults.
func (c *Config) Defaults() {
	if c.Hosts == 0 {
		c.Hosts = 3
	}
	if c.ServersPerHost == 0 {
		c.ServersPerHost = 2
	}
	if c.Zones == 0 {
		c.Zones = 1
	}
	if c.NATSListen == "" {
		c.NATSListen = "127.0.0.1:0"
	}
	if c.CoordinatorListen == "" {
		c.CoordinatorListen = "127.0.0.1:0"
	}
	if c.HTTPListen == "" {
		c.HTTPListen = "127.0.0.1:0"
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
	case c.Hosts < 1 || c.Hosts > 64:
		return fmt.Errorf("localcluster: Hosts %d must be in [1, 64]", c.Hosts)
	case c.ServersPerHost < 1 || c.ServersPerHost > 64:
		return fmt.Errorf("localcluster: ServersPerHost %d must be in [1, 64]", c.ServersPerHost)
	case c.Zones < 1 || c.Zones > c.Hosts:
		return fmt.Errorf("localcluster: Zones %d must be in [1, Hosts=%d]", c.Zones, c.Hosts)
	case c.DataDir == "":
		return errors.New("localcluster: DataDir is empty")
	}
	return nil
}

// Proc is one child process.
type Proc struct {
	Name  string
	Ready cliutil.Ready
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
	cfg         Config
	coordBin    string
	serverBin   string
	mu          sync.Mutex
	coordinator *Proc
	hosts       []*Proc
	closed      bool
}

// HostName is the host id of host i.
func HostName(i int) string { return fmt.Sprintf("host%d", i+1) }

// ZoneName is the zone of host i among z zones.
func ZoneName(i, z int) string { return fmt.Sprintf("zone-%d", i%z+1) }

// Start launches the coordinator, then every host, and waits until the
// coordinator sees every scan server alive.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	coordBin, serverBin, err := FindBinaries(ctx, cfg.BinDir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, coordBin: coordBin, serverBin: serverBin}
	args := []string{"--data", cfg.DataDir, "--nats-listen", cfg.NATSListen, "--listen", cfg.CoordinatorListen,
		"--http", cfg.HTTPListen, "--log-level", cfg.LogLevel}
	if cfg.Profiles != "" {
		args = append(args, "--profiles", cfg.Profiles)
	}
	if cfg.NATSURL != "" {
		args = append(args, "--nats", cfg.NATSURL)
	}
	args = append(args, cfg.CoordinatorArgs...)
	if c.coordinator, err = c.spawn(ctx, "coordinator", coordBin, args); err != nil {
		return nil, err
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

func (c *Cluster) hostArgs(i int) []string {
	args := []string{"--nats", c.coordinator.Ready.NATS, "--host", HostName(i), "--zone", ZoneName(i, c.cfg.Zones),
		"--servers", strconv.Itoa(c.cfg.ServersPerHost), "--heartbeat", c.cfg.Heartbeat.String(), "--log-level", c.cfg.LogLevel}
	if c.cfg.HostArgs != nil {
		args = append(args, c.cfg.HostArgs(i)...)
	}
	return args
}

// spawn starts a child with --ready-file and --die-with-parent and waits
// for its ready file.
func (c *Cluster) spawn(ctx context.Context, name, bin string, args []string) (*Proc, error) {
	ready := filepath.Join(c.cfg.DataDir, "logs", name+".ready.json")
	_ = os.Remove(ready)
	logPath := filepath.Join(c.cfg.DataDir, "logs", name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
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
			return nil, fmt.Errorf("%w: %s exited (%v) before it was ready; log: %s%s", ErrNotReady, name, p.err, logPath, tail(logPath))
		case <-ctx.Done():
			p.stop(time.Second)
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop(time.Second)
			return nil, fmt.Errorf("%w: %s not ready within %v; log: %s%s", ErrNotReady, name, c.cfg.ReadyTimeout, logPath, tail(logPath))
		}
	}
}

func tail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
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

// NATSURL is the cluster's NATS URL.
func (c *Cluster) NATSURL() string { return c.coordinator.Ready.NATS }

// CoordinatorAddr is the coordinator's actor address.
func (c *Cluster) CoordinatorAddr() string { return c.coordinator.Ready.Actor }

// HTTPAddr is the coordinator's HTTP address.
func (c *Cluster) HTTPAddr() string { return c.coordinator.Ready.HTTP }

// Coordinator returns the coordinator process.
func (c *Cluster) Coordinator() *Proc { return c.coordinator }

// Host returns host i's current process.
func (c *Cluster) Host(i int) *Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hosts[i]
}

// Hosts is the number of hosts.
func (c *Cluster) Hosts() int { return len(c.hosts) }

// Signal sends sig to host i's process.
func (c *Cluster) Signal(i int, sig syscall.Signal) error {
	p := c.Host(i)
	if !p.Alive() {
		return fmt.Errorf("localcluster: %s is not running", p.Name)
	}
	return p.cmd.Process.Signal(sig)
}

// Kill SIGKILLs host i and waits for it to exit.
func (c *Cluster) Kill(i int) error {
	p := c.Host(i)
	if err := p.cmd.Process.Kill(); err != nil && p.Alive() {
		return err
	}
	<-p.done
	_ = p.stdin.Close()
	return nil
}

// Restart starts host i again (after Kill) with the same flags; it waits
// until its servers are alive in the coordinator's view.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	old := c.Host(i)
	old.stop(5 * time.Second)
	p, err := c.spawn(ctx, HostName(i), c.serverBin, c.hostArgs(i))
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.hosts[i] = p
	c.mu.Unlock()
	return c.WaitServers(ctx, c.cfg.Hosts*c.cfg.ServersPerHost, c.cfg.ReadyTimeout)
}

// Status fetches the coordinator's /status.
func (c *Cluster) Status(ctx context.Context) (*messages.StatusReply, error) {
	return FetchStatus(ctx, c.HTTPAddr())
}

// FetchStatus reads a coordinator's HTTP /status (the protobuf JSON
// mapping of messages.StatusReply, see cliutil.WriteStatusJSON).
func FetchStatus(ctx context.Context, httpAddr string) (*messages.StatusReply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/status", nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
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

// WaitServers polls until the coordinator sees at least n live servers.
func (c *Cluster) WaitServers(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	live := 0
	for {
		if st, err := c.Status(ctx); err == nil {
			live = 0
			for _, s := range st.Servers {
				if s.Alive {
					live++
				}
			}
			if live >= n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: coordinator sees %d live servers, want %d, after %v", ErrNotReady, live, n, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Close stops every host, then the coordinator.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	hosts := append([]*Proc(nil), c.hosts...)
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range hosts {
		wg.Add(1)
		go func(p *Proc) { defer wg.Done(); p.stop(10 * time.Second) }(p)
	}
	wg.Wait()
	if c.coordinator != nil {
		c.coordinator.stop(10 * time.Second)
	}
	return nil
}

// Done is closed when the process exits.
func (p *Proc) Done() <-chan struct{} { return p.done }
