package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/readyfile"
	"github.com/scanplane/scanplane/internal/testutil"
)

// buildCmd builds the command in dir (relative to this one) into a temp
// dir: a real process with its own flags, exit status and stderr.
func buildCmd(t *testing.T, dir, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, dir).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", dir, err, out)
	}
	return bin
}

// refused runs bin with args and checks it exits 2 at once with one
// stderr line that names --insecure and the flag.
func refused(t *testing.T, bin, flag string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = &errOut
	err := cmd.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 {
		t.Fatalf("%s %v: %v, want exit 2; stderr:\n%s", filepath.Base(bin), args, err, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "pass --insecure") || !strings.Contains(lines[0], "--"+flag+" ") ||
		!strings.Contains(lines[0], "not secured") {
		t.Fatalf("%s %v: stderr %q, want one line naming --%s and --insecure", filepath.Base(bin), args, errOut.String(), flag)
	}
}

// proc is a started process.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // of Wait, once exited is closed
	stderr bytes.Buffer
}

// startReady starts bin and waits (bounded) for its ready file. The
// process is killed at the end of the test if still running.
func startReady(t *testing.T, bin string, args ...string) (*proc, readyfile.Ready) {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready.json")
	p := &proc{exited: make(chan struct{})}
	p.cmd = exec.Command(bin, append(args, "--ready-file", ready)...)
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	var data []byte
	exited := false
	if !testutil.Poll(time.Minute, func() bool {
		var err error
		if data, err = os.ReadFile(ready); err == nil {
			return true
		}
		select {
		case <-p.exited:
			exited = true
		default:
		}
		return exited
	}) {
		t.Fatalf("%s %v: not ready after a minute\n%s", filepath.Base(bin), args, p.stderr.String())
	}
	if exited {
		t.Fatalf("%s %v exited before ready: %v\n%s", filepath.Base(bin), args, p.err, p.stderr.String())
	}
	var r readyfile.Ready
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("ready file: %v", err)
	}
	return p, r
}

// stop sends SIGTERM and checks a clean exit within a bounded time.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
		if p.err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", p.err, p.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit 30s after SIGTERM")
	}
}

// TestInsecureListen (secure by default off loopback): the
// coordinator and scanserver processes refuse to listen on 0.0.0.0
// without --insecure, with one line naming it; with --insecure they
// start, listen on every interface (reached here on 127.0.0.1), and stop
// cleanly.
func TestInsecureListen(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs coordinator and scanserver processes")
	}
	coord := buildCmd(t, ".", "coordinator")
	server := buildCmd(t, "../scanserver", "scanserver")
	data := t.TempDir()
	base := []string{"--data", data, "--nats-listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--cluster-provider", "none", "--listen"}
	refused(t, coord, "listen", append(base, "0.0.0.0:0")...)
	refused(t, coord, "http", "--data", data, "--nats-listen", "127.0.0.1:0", "--http", ":0")
	refused(t, coord, "nats-listen", "--data", data, "--nats-listen", "0.0.0.0:0")
	refused(t, server, "listen", "--nats", "nats://127.0.0.1:1", "--listen", "0.0.0.0:0")
	refused(t, server, "http", "--nats", "nats://127.0.0.1:1", "--http", "[::]:0")

	co, r := startReady(t, coord, append(base, "0.0.0.0:0", "--insecure")...)
	_, port, err := net.SplitHostPort(r.Actor)
	if err != nil {
		t.Fatalf("ready actor address %q: %v", r.Actor, err)
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", port), 5*time.Second); err != nil {
		t.Fatalf("coordinator on 0.0.0.0:%s not reachable on loopback: %v", port, err)
	} else {
		c.Close()
	}
	ss, sr := startReady(t, server, "--nats", r.NATS, "--listen", "0.0.0.0:0", "--host", "h1", "--insecure", "--http", "127.0.0.1:0")
	// Without --secrets the profiles are plain HTTP on loopback.
	plain := &http.Client{Timeout: time.Minute}
	defer plain.CloseIdleConnections()
	checkPprof(t, "coordinator", "http://"+r.HTTP, plain, "")
	checkPprof(t, "scanserver", "http://"+sr.HTTP, plain, "")
	ss.stop(t)
	co.stop(t)
	if !strings.Contains(co.stderr.String(), "--insecure: listening on a network address") {
		t.Errorf("coordinator with --insecure on 0.0.0.0 logged no warning:\n%s", co.stderr.String())
	}
}
