package e2e

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

// userProgram is a program of another module that uses only the public
// client API: it connects to a secured cluster with the client
// certificate of its secrets directory, scans a whole table, a prefix of
// it and a table that does not exist, and prints what it saw.
const userProgram = `package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"log"
	"time"

	"github.com/scanplane/scanplane/client"
)

func main() {
	nats := flag.String("nats", client.DefaultNATSURLs, "NATS URLs")
	secrets := flag.String("secrets", "", "secrets directory")
	table := flag.String("table", "", "table")
	prefix := flag.String("prefix", "", "key prefix")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tlsCfg, err := client.TLSFromSecrets(*secrets)
	if err != nil {
		log.Fatal(err)
	}
	cfg := client.DefaultConfig()
	cfg.NATSURL = *nats
	cfg.TLS = tlsCfg
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	h := fnv.New64a()
	n := 0
	for row, err := range c.All(ctx, *table, client.KeyRange(nil, nil), client.ScanOptions{}) {
		if err != nil {
			log.Fatal(err)
		}
		h.Write(row.Key)
		h.Write([]byte{0})
		h.Write(row.Value)
		h.Write([]byte{0})
		n++
	}
	rows := c.Scan(ctx, *table, client.Prefix([]byte(*prefix)), client.ScanOptions{Hints: map[string]string{"scan_type": "interactive"}})
	m := 0
	for rows.Next() {
		m++
	}
	if err := rows.Err(); err != nil {
		log.Fatal(err)
	}
	missing := c.Scan(ctx, "no_such_table", client.Range{}, client.ScanOptions{})
	for missing.Next() {
	}
	fmt.Printf("rows %d hash %x prefix %d no-table %v\n", n, h.Sum64(), m, errors.Is(missing.Err(), client.ErrNoTable))
}
`

// TestClientFromAnotherModule: a program in a module of its own (its
// go.mod requires scanplane through a replace of this source tree) builds
// with only the public client API and, against a `scanctl up --secure`
// cluster, reads every ingested row (count and content hash), a prefix
// of them, and gets ErrNoTable for a table that does not exist.
func TestClientFromAnotherModule(t *testing.T) {
	clustertest.SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := localcluster.SourceRoot()
	if err != nil {
		t.Fatal(err)
	}
	prog := buildUserProgram(t, ctx, root, userProgram)
	bins := clustertest.Binaries(t, ctx)
	scanctl := clustertest.BuildTool(t, ctx, "scanctl")

	secrets, natsURL := startSecureUp(t, ctx, scanctl, bins)

	const table, nRows, prefix = "users", 3000, "row00000012"
	ingest := exec.CommandContext(ctx, scanctl, "ingest", "--nats", natsURL, "--secrets", secrets, "--table", table,
		"--generate", fmt.Sprint(nRows))
	if out, err := ingest.CombinedOutput(); err != nil {
		t.Fatalf("scanctl ingest: %v\n%s", err, out)
	}
	truth := tablets.GenerateRows(nRows)
	h := fnv.New64a()
	inPrefix := 0
	for _, e := range truth {
		h.Write(e.Key)
		h.Write([]byte{0})
		h.Write(e.Value)
		h.Write([]byte{0})
		if bytes.HasPrefix(e.Key, []byte(prefix)) {
			inPrefix++
		}
	}
	want := fmt.Sprintf("rows %d hash %x prefix %d no-table true\n", nRows, h.Sum64(), inPrefix)

	run := exec.CommandContext(ctx, prog, "--nats", natsURL, "--secrets", secrets, "--table", table, "--prefix", prefix)
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	if err := run.Run(); err != nil {
		t.Fatalf("the other module's program: %v\n%s", err, stderr.String())
	}
	if stdout.String() != want {
		t.Fatalf("the other module's program printed %q, want %q", stdout.String(), want)
	}
	t.Logf("the other module's program: %s", strings.TrimSpace(stdout.String()))
}

// buildUserProgram writes the program src into a module of its own in a
// temporary directory (a replace points scanplane at root; go.sum is
// root's, which holds every hash the program's dependencies need, so the
// build needs no network when the module cache has them) and builds it.
func buildUserProgram(t *testing.T, ctx context.Context, root, src string) string {
	t.Helper()
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go \S+$`).Find(gomod)
	if goLine == nil {
		t.Fatal("no go line in the repository's go.mod")
	}
	gosum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": fmt.Sprintf("module example.com/scanuser\n\n%s\n\nrequire github.com/scanplane/scanplane v0.0.0\n\nreplace github.com/scanplane/scanplane => %s\n",
			goLine, root),
		"go.sum":  string(gosum),
		"main.go": src,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "scanuser")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of a program in another module: %v\n%s", err, out)
	}
	return bin
}

// freePortBase returns a `scanctl up --port-base` whose ports are free
// for one coordinator, away from the default ports and below the
// ephemeral port range.
func freePortBase(t *testing.T) int {
	t.Helper()
	for range 100 {
		b := 10000 + rand.IntN(18000)
		if localcluster.CheckPorts(localcluster.Config{Coordinators: 1, Addrs: []localcluster.CoordinatorAddrs{localcluster.PortAddrs(b, 0)}}) == nil {
			return b
		}
	}
	t.Fatal("no free port base in 100 tries")
	return 0
}

// lockedBuffer is a bytes.Buffer safe for a process's output and a
// reader at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startSecureUp runs `scanctl up --secure` with one coordinator and one
// host of two scan servers on free ports until it is ready, stops it when
// t ends, and returns the secrets directory it printed and its NATS URL.
func startSecureUp(t *testing.T, ctx context.Context, scanctl, bins string) (secrets, natsURL string) {
	t.Helper()
	base := freePortBase(t)
	var upOut lockedBuffer
	up := exec.Command(scanctl, "up", "--secure", "--port-base", fmt.Sprint(base), "--coordinators", "1", "--hosts", "1",
		"--servers-per-host", "2", "--data", t.TempDir(), "--bin", bins, "--child-log-level", "warn")
	up.Stdout, up.Stderr = &upOut, &upOut
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- up.Wait() }()
	t.Cleanup(func() {
		_ = up.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = up.Process.Signal(syscall.SIGKILL)
			<-exited
			t.Errorf("scanctl up did not stop within 30s of SIGINT")
		}
	})
	for !strings.Contains(upOut.String(), "press Ctrl-C to stop") {
		select {
		case err := <-exited:
			t.Fatalf("scanctl up --secure exited (%v) before ready:\n%s", err, upOut.String())
		case <-ctx.Done():
			t.Fatalf("scanctl up --secure not ready:\n%s", upOut.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	m := regexp.MustCompile(`secured: pass --secrets (\S+) `).FindStringSubmatch(upOut.String())
	if m == nil {
		t.Fatalf("scanctl up --secure printed no --secrets flag:\n%s", upOut.String())
	}
	return m[1], "nats://" + localcluster.PortAddrs(base, 0).NATS
}
