package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

// TestLyingScanServer (docs/security.md): on a secured cluster of three
// hosts with per-host certificates, host1's scan server is the real
// binary answering every scan with a lie, in turn (--fault-lie): a forged
// value, a dropped row, an added row, an empty answer and CORRUPT_BLOCK.
// Its certificate is valid and its StartScans come from the tablet
// actors, so nothing on the transport can refuse it. Honest clients
// verify every row against the ground truth: none is wrong, no scan
// fails, and the lies are caught (resumed elsewhere, or retried on
// another host by the coordinator).
func TestLyingScanServer(t *testing.T) {
	clustertest.SkipShort(t)
	ctx := context.Background()
	secDir := filepath.Join(t.TempDir(), "secrets")
	hosts := []string{localcluster.HostName(0), localcluster.HostName(1), localcluster.HostName(2)}
	if err := secrets.Init(secDir, secrets.InitOptions{ServerHosts: hosts}); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	lies := []string{"forge", "drop", "add", "empty", "corrupt"}
	cl := clustertest.Start(t, ctx, localcluster.Config{Hosts: 3, ServersPerHost: 1, DataDir: dataDir,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 60 * time.Second, Secrets: secDir,
		HostArgs: func(i int) []string {
			if i == 0 {
				return []string{"--fault-lie", strings.Join(lies, ",")}
			}
			return nil
		}})
	t.Cleanup(func() { logTails(t, dataDir) })
	tlsOf := func(role string) *tls.Config {
		cfg, err := cliutil.RemoteTLS(secDir, role)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	truth := tablets.GenerateRows(20000)
	clustertest.Ingest(t, ctx, cl.NATSURL(), tlsOf("admin"), table, truth, 8)
	if err := cl.WaitServers(ctx, 3, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	c := clustertest.Client(t, ctx, cl.NATSURL(), func(c *client.Config) { c.TLS = tlsOf("client") })

	var done, wrong, failed, resumed atomic.Int64
	var mu sync.Mutex
	var errs []string
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 11))
			for {
				select {
				case <-stop:
					return
				default:
				}
				a, b := randomRange(r, len(truth))
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				w, f, res := checkScanStats(sctx, c, truth, a, b, r.IntN(4) == 0)
				cancel()
				resumed.Add(int64(res))
				if w != nil || f != nil {
					if w != nil {
						wrong.Add(1)
					} else {
						failed.Add(1)
					}
					mu.Lock()
					if len(errs) < 10 {
						errs = append(errs, fmt.Sprintf("wrong: %v; failed: %v", w, f))
					}
					mu.Unlock()
				}
				done.Add(1)
			}
		}(uint64(w) + 1)
	}
	// Enough scans that the liar answered each lie several times: its
	// attempts (dispatches) as the coordinator counts them.
	liar := func() (dispatched, failed uint64) {
		st, err := c.Status(ctx)
		if err != nil {
			return 0, 0
		}
		for _, s := range st.Servers {
			if s.Host == hosts[0] {
				dispatched += s.Dispatched
				failed += s.AttemptsFailed
			}
		}
		return dispatched, failed
	}
	ok := testutil.Poll(120*time.Second, func() bool {
		d, _ := liar()
		return d >= uint64(6*len(lies)) && done.Load() >= 300
	})
	close(stop)
	wg.Wait()
	d, f := liar()
	t.Logf("honest scans: %d, %d wrong, %d failed, %d resumes; the liar got %d attempts, %d failed",
		done.Load(), wrong.Load(), failed.Load(), resumed.Load(), d, f)
	if !ok {
		t.Errorf("the liar got %d attempts in 120 s (%d honest scans); want %d", d, done.Load(), 6*len(lies))
	}
	if wrong.Load() != 0 || failed.Load() != 0 {
		t.Errorf("honest scans: %d wrong, %d failed; first: %v", wrong.Load(), failed.Load(), errs)
	}
	if resumed.Load() == 0 || f == 0 {
		t.Errorf("no lie was caught: %d resumes, %d failed attempts on the liar", resumed.Load(), f)
	}
}

// checkScanStats is clustertest.CheckScan (rows [a, b) of truth) that
// also returns the scan's resumes; a limited scan asks for 5 rows.
func checkScanStats(ctx context.Context, c *client.Client, truth []tablets.Entry, a, b int, limited bool) (wrong, failed error, resumes int) {
	opts := client.ScanOptions{}
	rng := tablets.Range{}
	if a > 0 {
		rng.Start = truth[a].Key
	}
	if b < len(truth) {
		rng.End = truth[b].Key
	}
	if limited {
		opts.Limit = 5
		b = min(b, a+5)
	}
	rows := c.Scan(ctx, table, rng, opts)
	defer rows.Close()
	i := a
	for rows.Next() {
		r := rows.Row()
		if i >= b || !bytes.Equal(r.Key, truth[i].Key) || !bytes.Equal(r.Value, truth[i].Value) {
			return fmt.Errorf("scan %s: row %d is %q=%q", rng, i-a, r.Key, r.Value), nil, rows.Stats().Resumes
		}
		i++
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("scan %s after %d rows: %w", rng, i-a, err), rows.Stats().Resumes
	}
	if i != b {
		return fmt.Errorf("scan %s: %d rows and no error, want %d", rng, i-a, b-a), nil, rows.Stats().Resumes
	}
	return nil, nil, rows.Stats().Resumes
}
