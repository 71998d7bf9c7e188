package e2e

import (
	"context"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

// TestConnectionFloodFromOneSource: on a secured cluster, one source
// (127.0.0.2) opens 4 200 idle TCP connections to a coordinator's actor
// remote, more than the remote's 4 096 slots, and dials again each one
// the coordinator closes. Meanwhile new scans, each a new scanctl process
// with new connections from 127.0.0.1, return every row: the source's
// connections beyond its 256 are refused at once (source_limit), so
// they never take the slots of others.
func TestConnectionFloodFromOneSource(t *testing.T) {
	clustertest.SkipShort(t)
	ctx := context.Background()
	scanctl := clustertest.BuildTool(t, ctx, "scanctl")
	secretsDir := filepath.Join(t.TempDir(), "secrets")
	if err := secrets.Init(secretsDir, secrets.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	cl := clustertest.Start(t, ctx, localcluster.Config{Hosts: 1, ServersPerHost: 1, DataDir: dataDir,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 60 * time.Second, LogLevel: "info", Secrets: secretsDir})
	t.Cleanup(func() { logTails(t, dataDir) })
	admin, err := cliutil.RemoteTLS(secretsDir, "admin")
	if err != nil {
		t.Fatal(err)
	}
	truth := tablets.GenerateRows(3000)
	clustertest.Ingest(t, ctx, cl.NATSURL(), admin, table, truth, 4)
	addr := cl.CoordinatorProc(0).Ready.Actor
	scan := func() (time.Duration, error) {
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		start := time.Now()
		out, err := exec.CommandContext(sctx, scanctl, "scan", "--via", "actor", "--nats", cl.NATSURL(), "--coordinator", addr, "--secrets", secretsDir,
			"--table", table, "--count", "--timeout", "50s").CombinedOutput()
		took := time.Since(start)
		if err != nil {
			return took, &scanErr{err: err, out: string(out)}
		}
		if got := strings.TrimSpace(string(out)); got != strconv.Itoa(len(truth)) {
			return took, &scanErr{out: got}
		}
		return took, nil
	}
	before, err := scan()
	if err != nil {
		t.Fatalf("scan before the flood: %v", err)
	}

	const conns = 4200
	fctx, stopFlood := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	dials := 0
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var held []net.Conn
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			for i := w; i < conns && fctx.Err() == nil; i += 8 {
				c, err := d.DialContext(fctx, "tcp", addr)
				if err != nil {
					continue
				}
				held = append(held, c)
				mu.Lock()
				dials++
				mu.Unlock()
			}
			// Dial again each connection the coordinator closes.
			buf := make([]byte, 1)
			for fctx.Err() == nil {
				for i, c := range held {
					if fctx.Err() != nil {
						return
					}
					_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
					if _, err := c.Read(buf); err != nil && !isTimeout(err) {
						c.Close()
						if nc, err := d.DialContext(fctx, "tcp", addr); err == nil {
							held[i] = nc
							mu.Lock()
							dials++
							mu.Unlock()
						}
					}
				}
			}
		}()
	}
	defer func() { stopFlood(); wg.Wait() }()
	metrics := cl.HTTPURL(0) + "/metrics"
	refused := func() float64 {
		return labelledSum(t, cl.HTTPClient(), metrics, "refused_total", `reason="source_limit"`)
	}
	testutil.Eventually(t, 60*time.Second, "the flood's connections dialled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return dials >= conns
	})
	var worst time.Duration
	for i := range 5 {
		took, err := scan()
		t.Logf("scan %d during the flood: %v", i+1, took.Round(time.Millisecond))
		if err != nil {
			t.Fatalf("scan %d during the flood: %v", i+1, err)
		}
		worst = max(worst, took)
	}
	mu.Lock()
	n := dials
	mu.Unlock()
	t.Logf("scan before the flood %v; the slowest of 5 during it %v; %d flood connections dialled; refused by source %v",
		before.Round(time.Millisecond), worst.Round(time.Millisecond), n, refused())
	if refused() == 0 {
		t.Error("no flood connection refused for its source")
	}
}

// labelledSum is the sum of the Prometheus text samples at url (read
// with hc) whose metric name ends in suffix and whose labels hold label
// ("" for any).
func labelledSum(t *testing.T, hc *http.Client, url, suffix, label string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code, body, err := clustertest.Get(ctx, hc, url, "")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s: %d, %v", url, code, err)
	}
	sum := 0.0
	for _, l := range strings.Split(body, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || strings.HasPrefix(l, "#") || !strings.Contains(f[0], label) {
			continue
		}
		if name, _, _ := strings.Cut(f[0], "{"); !strings.HasSuffix(name, suffix) {
			continue
		}
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", url, l, err)
		}
		sum += v
	}
	return sum
}

type scanErr struct {
	err error
	out string
}

func (e *scanErr) Error() string {
	if e.err == nil {
		return "scanctl scan counted " + e.out
	}
	return e.err.Error() + ": " + e.out
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
