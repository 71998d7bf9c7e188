package e2e

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

// BenchmarkOneRowScanTLS is the latency of a one-row scan (as
// BenchmarkOneRowScan: 3 hosts × 2 servers, 100 000 rows over 8 tablets)
// on a plain cluster and on one whose actor remote has mutual TLS
// (--secrets), both up at once, scans alternating between them in blocks
// of 100, so both see the same machine. Reported: plain-p50-µs,
// plain-p99-µs, mtls-p50-µs, mtls-p99-µs and mtls/plain-p50, the cost of
// TLS as a ratio. b.N scans go to each. Run with -benchtime=2000x or
// more; not under -race (two clients' protoactor remotes in this process
// race on grpc's global logger).
func BenchmarkOneRowScanTLS(b *testing.B) {
	fs := []*fixture{startSecured(b, false), startSecured(b, true)}
	ctx := context.Background()
	for _, f := range fs {
		for i := 0; i < 200; i++ { // warm connections, tablet actors and caches
			if err := f.scan(ctx, i*499, i*499+1); err != nil {
				b.Fatal(err)
			}
		}
	}
	lat := [2][]time.Duration{make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)}
	const block = 100
	b.ResetTimer()
	for done := 0; done < b.N; done += block {
		n := min(block, b.N-done)
		for j, f := range fs {
			for i := done; i < done+n; i++ {
				k := (i * 7919) % len(f.truth)
				key := f.truth[k].Key
				t := time.Now()
				rows := f.c.Scan(ctx, table, tablets.Range{Start: key, End: append(key[:len(key):len(key)], 0)}, client.ScanOptions{})
				got := 0
				for rows.Next() {
					got++
				}
				if rows.Err() != nil || got != 1 {
					b.Fatalf("%d rows, err %v", got, rows.Err())
				}
				lat[j] = append(lat[j], time.Since(t))
			}
		}
	}
	b.StopTimer()
	p50 := [2]float64{quantileMicros(lat[0], 0.50), quantileMicros(lat[1], 0.50)}
	b.ReportMetric(p50[0], "plain-p50-µs")
	b.ReportMetric(quantileMicros(lat[0], 0.99), "plain-p99-µs")
	b.ReportMetric(p50[1], "mtls-p50-µs")
	b.ReportMetric(quantileMicros(lat[1], 0.99), "mtls-p99-µs")
	b.ReportMetric(p50[1]/p50[0], "mtls/plain-p50")
}

// startSecured is start (3 hosts × 2 servers, 100 000 rows, 8 tablets),
// with every process and the client on --secrets when secure.
func startSecured(b *testing.B, secure bool) *fixture {
	b.Helper()
	clustertest.SkipShort(b)
	ctx := context.Background()
	cfg := localcluster.Config{Hosts: 3, ServersPerHost: 2,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 60 * time.Second, LogLevel: os.Getenv("E2E_CHILD_LOG_LEVEL")}
	secDir := filepath.Join(b.TempDir(), "secrets")
	if secure {
		if err := secrets.Init(secDir, secrets.InitOptions{}); err != nil {
			b.Fatal(err)
		}
		cfg.Secrets = secDir
	}
	cl := clustertest.Start(b, ctx, cfg)
	f := &fixture{t: b, cl: cl, truth: tablets.GenerateRows(100000)}
	var admin *tls.Config // NATS TLS with the admin certificate when secure
	var err error
	if secure {
		if admin, err = cliutil.RemoteTLS(secDir, "admin"); err != nil {
			b.Fatal(err)
		}
	}
	clustertest.Ingest(b, ctx, cl.NATSURL(), admin, table, f.truth, 8)
	f.c = clustertest.Client(b, ctx, cl.NATSURL(), func(c *client.Config) {
		c.StallTimeout = time.Second
		if secure {
			if c.TLS, err = client.TLSFromSecrets(secDir); err != nil {
				b.Fatal(err)
			}
		}
	})
	return f
}
