//go:build linux

package e2e

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil"
)

// The network of TestMultiHost: a bridge in a namespace of its own and one
// namespace per machine joined to it by a veth pair, on a private subnet.
// Nothing is created in the host's network namespace: the veth pairs are
// made inside the bridge namespace with their machine end moved straight
// into the machine's namespace, so a crashed test leaves at most unused
// namespaces (named with the run's random suffix), never a route or an
// interface on the host. Names resolve through /etc/netns/NS/hosts, which
// `ip netns exec` bind-mounts over /etc/hosts inside the namespace only.

const mhSubnet = "10.213.0." // /24

// mhNode is one namespace on the bridge: a machine or the client.
type mhNode struct {
	ns       string // network namespace
	hostname string // its hostname (UTS namespace of each process) and DNS name
	ip       string
	veth     string // the bridge-side end of its veth pair (in the bridge namespace)
}

// mhNet is the bridge and its nodes.
type mhNet struct {
	t      testing.TB
	bridge string // the bridge's namespace
	nodes  []*mhNode
}

// netnsUsable reports why this machine cannot run TestMultiHost, or "".
func netnsUsable() string {
	if os.Geteuid() != 0 {
		return "needs root for ip netns"
	}
	for _, tool := range []string{"ip", "unshare", "hostname", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "needs " + tool + " on PATH"
		}
	}
	probe := "spmh-probe-" + randSuffix()
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		return fmt.Sprintf("ip netns add does not work here: %v: %s", err, strings.TrimSpace(string(out)))
	}
	_ = exec.Command("ip", "netns", "del", probe).Run()
	return ""
}

func randSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ipRun runs `ip args...` and fails the test on error.
func ipRun(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
}

// newMHNet builds the bridge namespace and one namespace per hostname
// (addresses mhSubnet+first, +1, ...), every name resolvable in every
// namespace; t.Cleanup removes it all.
func newMHNet(t testing.TB, hostnames []string, firstIP int) *mhNet {
	t.Helper()
	sfx := randSuffix()
	n := &mhNet{t: t, bridge: "spmh-" + sfx + "-br"}
	for i, h := range hostnames {
		n.nodes = append(n.nodes, &mhNode{ns: fmt.Sprintf("spmh-%s-%s", sfx, h), hostname: h,
			ip: fmt.Sprintf("%s%d", mhSubnet, firstIP+i), veth: fmt.Sprintf("v%d", i)})
	}
	var hosts strings.Builder
	hosts.WriteString("127.0.0.1 localhost\n")
	for _, nd := range n.nodes {
		fmt.Fprintf(&hosts, "%s %s\n", nd.ip, nd.hostname)
	}
	createdEtcNetns := false
	if _, err := os.Stat("/etc/netns"); errors.Is(err, os.ErrNotExist) {
		createdEtcNetns = true
	}
	t.Cleanup(func() {
		if createdEtcNetns {
			_ = os.Remove("/etc/netns") // only if empty
		}
	})

	ipRun(t, "netns", "add", n.bridge)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.bridge).Run() })
	ipRun(t, "-n", n.bridge, "link", "add", "br0", "type", "bridge")
	ipRun(t, "-n", n.bridge, "link", "set", "br0", "up")
	for _, nd := range n.nodes {
		ipRun(t, "netns", "add", nd.ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", nd.ns).Run() })
		etc := filepath.Join("/etc/netns", nd.ns)
		if err := os.MkdirAll(etc, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(etc) })
		if err := os.WriteFile(filepath.Join(etc, "hosts"), []byte(hosts.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		ipRun(t, "-n", n.bridge, "link", "add", nd.veth, "type", "veth", "peer", "name", "eth0", "netns", nd.ns)
		ipRun(t, "-n", n.bridge, "link", "set", nd.veth, "master", "br0")
		ipRun(t, "-n", n.bridge, "link", "set", nd.veth, "up")
		ipRun(t, "-n", nd.ns, "addr", "add", nd.ip+"/24", "dev", "eth0")
		ipRun(t, "-n", nd.ns, "link", "set", "lo", "up")
		ipRun(t, "-n", nd.ns, "link", "set", "eth0", "up")
	}
	return n
}

// setLink takes a node's link (its end of the veth pair) down or up.
func (n *mhNet) setLink(nd *mhNode, up bool) {
	n.t.Helper()
	state := "down"
	if up {
		state = "up"
	}
	ipRun(n.t, "-n", nd.ns, "link", "set", "eth0", state)
}

// mhProc is one process started in a node's namespace.
type mhProc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
	err   error
}

// startIn starts `sh -c script` in nd's network namespace and a UTS
// namespace of its own whose hostname is nd.hostname (script runs after
// the hostname is set, so $(hostname -s) in it is the machine's name),
// with stdin a pipe (the binaries' --die-with-parent) and stdout and
// stderr appended to logDir/name.log. The shell execs the last command,
// so the process's pid is the binary's.
func startIn(t testing.TB, nd *mhNode, logDir, name, script string, env ...string) *mhProc {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", nd.ns, "unshare", "--uts", "sh", "-c",
		"hostname "+shq(nd.hostname)+" && "+script)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = logDir // nothing lands in the source tree
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logf.Close()
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &mhProc{name: name, cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() { p.stop(5 * time.Second) })
	return p
}

func (p *mhProc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill SIGKILLs the process group and waits for the exit.
func (p *mhProc) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
	_ = p.stdin.Close()
}

// stop: SIGTERM, SIGKILL after grace.
func (p *mhProc) stop(grace time.Duration) {
	if p.alive() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			p.kill()
		}
	}
	_ = p.stdin.Close()
}

// shq quotes s for sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// waitFile waits until path exists (a --ready-file) or p exits.
func waitFile(p *mhProc, path string, timeout time.Duration) error {
	written := func() bool { st, err := os.Stat(path); return err == nil && st.Size() > 0 }
	testutil.Poll(timeout, func() bool { return written() || !p.alive() })
	switch {
	case written():
		return nil
	case !p.alive():
		return fmt.Errorf("%s exited (%v) before writing %s", p.name, p.err, path)
	}
	return fmt.Errorf("%s did not write %s within %v", p.name, path, timeout)
}

// The client agent: this test binary re-executed in the client's
// namespace (mhAgentEnv set; see multihost_agent_test.go), driven by one
// JSON request per line on its stdin, answering one mhRespPrefix line
// each on its stdout.

const (
	mhAgentEnv   = "SCANPLANE_MULTIHOST_AGENT"
	mhRespPrefix = "MHRESP "
)

type mhReq struct {
	Op        string   `json:"op"`
	NATS      string   `json:"nats,omitempty"`
	Listen    string   `json:"listen,omitempty"`
	Rows      int      `json:"rows,omitempty"`
	A         int      `json:"a,omitempty"`
	B         int      `json:"b,omitempty"`
	N         int      `json:"n,omitempty"`
	Workers   int      `json:"workers,omitempty"`
	Seed      uint64   `json:"seed,omitempty"`
	Row       int      `json:"row,omitempty"`
	Hint      string   `json:"hint,omitempty"`
	HTTP      []string `json:"http,omitempty"`
	TimeoutMs int64    `json:"timeout_ms,omitempty"`
}

type mhResp struct {
	Err    string            `json:"err,omitempty"`
	Wrong  string            `json:"wrong,omitempty"`
	Errs   []string          `json:"errs,omitempty"`
	JSON   []json.RawMessage `json:"json,omitempty"`
	Strs   []string          `json:"strs,omitempty"`
	Ints   map[string]int64  `json:"ints,omitempty"`
	Load   *mhLoadReport     `json:"load,omitempty"`
	Millis int64             `json:"millis,omitempty"`
}

// mhLoadReport: what the agent's background scans saw.
type mhLoadReport struct {
	OK, Failed, Wrong int
	// FirstFailMs, LastFailMs: Unix ms of the first and last failed scan's
	// end (0: none).
	FirstFailMs, LastFailMs int64
	Samples                 []string // a few failures and every wrong scan
}

type mhAgent struct {
	t   testing.TB
	p   *mhProc
	out *bufio.Scanner
	mu  sync.Mutex
}

// startAgent starts the client agent in nd's namespace; its stderr goes
// to logDir/client-agent.log. Cleanup closes its stdin (it closes its
// client and exits) and kills it if it lingers.
func startAgent(t testing.TB, nd *mhNode, logDir string) *mhAgent {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.OpenFile(filepath.Join(logDir, "client-agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", nd.ns, exe)
	cmd.Env = append(os.Environ(), mhAgentEnv+"=1")
	cmd.Stdout, cmd.Stderr = w, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	p := &mhProc{name: "client-agent", cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	a := &mhAgent{t: t, p: p, out: bufio.NewScanner(r)}
	a.out.Buffer(make([]byte, 1<<20), 64<<20)
	t.Cleanup(func() {
		_ = stdin.Close()
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			p.kill()
		}
		r.Close()
	})
	return a
}

// do sends req and returns the answer; no answer within timeout kills the
// agent and fails the test.
func (a *mhAgent) do(req mhReq, timeout time.Duration) mhResp {
	a.t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	line, err := json.Marshal(req)
	if err != nil {
		a.t.Fatal(err)
	}
	if _, err := a.p.stdin.Write(append(line, '\n')); err != nil {
		a.t.Fatalf("client agent: send %s: %v", req.Op, err)
	}
	type result struct {
		resp mhResp
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		for a.out.Scan() {
			l := a.out.Text()
			if !strings.HasPrefix(l, mhRespPrefix) {
				continue
			}
			var r mhResp
			err := json.Unmarshal([]byte(strings.TrimPrefix(l, mhRespPrefix)), &r)
			ch <- result{r, err}
			return
		}
		ch <- result{err: fmt.Errorf("agent output ended: %v", a.out.Err())}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			a.t.Fatalf("client agent: %s: %v", req.Op, r.err)
		}
		return r.resp
	case <-time.After(timeout):
		a.p.kill()
		a.t.Fatalf("client agent: no answer to %s within %v", req.Op, timeout)
		return mhResp{}
	}
}
