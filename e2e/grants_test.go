package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

// TestTableGrants: on a secured cluster of real processes (two
// coordinators, so requests are also forwarded between routers), a
// certificate from `scanctl secrets client alice --tables demo`, copied
// into a directory as client.crt and client.key beside ca.crt, scans demo
// exactly (through the router and then straight at the tablet actors)
// and is refused on another table with client.ErrPermissionDenied naming
// alice and the table, and no row; one with `--tables logs-*` scans
// logs-1 and is refused on demo; the default client certificate scans
// everything. The coordinators count the refusals (reason grant).
func TestTableGrants(t *testing.T) {
	clustertest.SkipShort(t)
	ctx := context.Background()
	secDir := filepath.Join(t.TempDir(), "secrets")
	scanctl := clustertest.BuildTool(t, ctx, "scanctl")
	runScanctl := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, scanctl, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("scanctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	runScanctl("secrets", "init", "--dir", secDir)
	runScanctl("secrets", "client", "alice", "--dir", secDir, "--tables", "demo")
	runScanctl("secrets", "client", "bob", "--dir", secDir, "--tables", "logs-*")
	// Each principal's directory: the usual layout, its certificate
	// copied in as client.crt and client.key.
	dirOf := func(name string) string {
		d := filepath.Join(t.TempDir(), name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		for from, to := range map[string]string{"ca.crt": "ca.crt", name + ".crt": "client.crt", name + ".key": "client.key"} {
			data, err := os.ReadFile(filepath.Join(secDir, from))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, to), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}

	cl := clustertest.Start(t, ctx, localcluster.Config{Coordinators: 2, Hosts: 2, ServersPerHost: 1,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 60 * time.Second, Secrets: secDir})
	admin, err := cliutil.RemoteTLS(secDir, "admin")
	if err != nil {
		t.Fatal(err)
	}
	truth := map[string][]tablets.Entry{"demo": tablets.GenerateRows(6000), "other": tablets.GenerateRows(3000), "logs-1": tablets.GenerateRows(2000)}
	for table, rows := range truth {
		clustertest.Ingest(t, ctx, cl.NATSURL(), admin, table, rows, 4)
	}
	if err := cl.WaitServers(ctx, 2, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	clientOf := func(dir string) *client.Client {
		tlsCfg, err := client.TLSFromSecrets(dir)
		if err != nil {
			t.Fatal(err)
		}
		return clustertest.Client(t, ctx, cl.NATSURL(), func(c *client.Config) { c.TLS = tlsCfg })
	}

	exact := func(c *client.Client, who, table string, a, b int) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if wrong, failed := clustertest.CheckScan(sctx, c, table, truth[table], a, b, client.ScanOptions{}); wrong != nil || failed != nil {
			t.Errorf("%s scanning %s [%d, %d): wrong %v, failed %v", who, table, a, b, wrong, failed)
		}
	}
	refused := func(c *client.Client, who, table string) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		rows := c.Scan(sctx, table, tablets.Range{}, client.ScanOptions{})
		defer rows.Close()
		n := 0
		for rows.Next() {
			n++
		}
		err := rows.Err()
		if n != 0 || !errors.Is(err, client.ErrPermissionDenied) || !strings.Contains(err.Error(), `"`+who+`"`) || !strings.Contains(err.Error(), `"`+table+`"`) {
			t.Errorf("%s scanning %s: %d rows, %v; want no row and ErrPermissionDenied naming %q and %q", who, table, n, err, who, table)
		}
	}
	// One client at a time, each closed before the next starts:
	// protoactor's Remote.Start sets gRPC's global logger, which a live
	// client's gRPC goroutines read (a data race under -race).
	alice := clientOf(dirOf("alice"))
	for range 2 { // the second time straight at the tablet actors the first named
		exact(alice, "alice", "demo", 0, len(truth["demo"]))
		exact(alice, "alice", "demo", 1234, 4321)
	}
	refused(alice, "alice", "other")
	refused(alice, "alice", "logs-1")
	exact(alice, "alice", "demo", 10, 20) // a refusal leaves the client working
	alice.Close()
	bob := clientOf(dirOf("bob"))
	exact(bob, "bob", "logs-1", 0, len(truth["logs-1"]))
	refused(bob, "bob", "demo")
	bob.Close()
	anyone := clientOf(secDir)
	for table, rows := range truth {
		exact(anyone, "client", table, 0, len(rows))
	}

	var grantRefusals float64
	for i := range cl.Coordinators() {
		grantRefusals += labelledSum(t, cl.HTTPClient(), cl.HTTPURL(i)+"/metrics", "refused_total", `reason="grant"`)
	}
	if grantRefusals < 3 {
		t.Errorf("the coordinators counted %v grant refusals, want at least 3 (one per refused scan)", grantRefusals)
	}
}
