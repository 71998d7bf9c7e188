package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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

// TestMutualTLS: a coordinator (a cluster member, leases in
// NATS) and a scan server started with --secrets serve a verified scan to
// a client holding the cluster's client certificate; a client whose
// certificate another CA signed, one whose certificate expired and one
// without TLS are refused by the coordinator, which logs why, and get no
// row.
func TestMutualTLS(t *testing.T) {
	clustertest.SkipShort(t)
	ctx := context.Background()
	secDir := filepath.Join(t.TempDir(), "secrets")
	if err := secrets.Init(secDir, secrets.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	cl := clustertest.Start(t, ctx, localcluster.Config{Hosts: 1, ServersPerHost: 1, DataDir: dataDir,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 60 * time.Second, LogLevel: "info",
		Secrets: secDir})
	t.Cleanup(func() { logTails(t, dataDir) })
	tlsFrom := func(dir string) *tls.Config {
		t.Helper()
		cfg, err := client.TLSFromSecrets(dir)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	admin, err := cliutil.RemoteTLS(secDir, "admin")
	if err != nil {
		t.Fatal(err)
	}
	truth := tablets.GenerateRows(3000)
	clustertest.Ingest(t, ctx, cl.NATSURL(), admin, table, truth, 3)
	coordLog := filepath.Join(dataDir, "logs", "coordinator.log")
	newClient := func(cfg *tls.Config) *client.Client {
		return clustertest.Client(t, ctx, cl.NATSURL(), func(c *client.Config) { c.TLS, c.StallTimeout = cfg, time.Second })
	}

	t.Run("verified scan", func(t *testing.T) {
		f := &fixture{t: t, cl: cl, c: newClient(tlsFrom(secDir)), truth: truth}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for _, r := range [][2]int{{0, len(truth)}, {17, 2500}, {1000, 1001}} {
			if err := f.scan(sctx, r[0], r[1]); err != nil {
				t.Fatal(err)
			}
		}
	})

	scanctl := clustertest.BuildTool(t, ctx, "scanctl")
	// scanctlScan runs `scanctl scan --count` (a process of its own: one
	// protoactor remote per process) with env added.
	scanctlScan := func(t *testing.T, env []string, args ...string) (string, string, error) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 40*time.Second)
		defer cancel()
		cmd := exec.CommandContext(sctx, scanctl, append([]string{"scan", "--nats", cl.NATSURL(), "--table", table, "--count", "--timeout", "30s"}, args...)...)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, cliutil.SecretsEnv+"=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, env...)
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		if sctx.Err() != nil {
			t.Fatalf("scanctl scan %q still running after 40s", args)
		}
		return out.String(), errOut.String(), err
	}
	t.Run("scanctl --secrets and $SCANPLANE_SECRETS", func(t *testing.T) {
		for _, run := range []struct {
			env  []string
			args []string
		}{{nil, []string{"--secrets", secDir}}, {[]string{cliutil.SecretsEnv + "=" + secDir}, nil}} {
			out, errOut, err := scanctlScan(t, run.env, run.args...)
			if err != nil || strings.TrimSpace(out) != strconv.Itoa(len(truth)) {
				t.Fatalf("scanctl scan --count %q (env %q): %v, out %q, stderr %q; want %d", run.args, run.env, err, out, errOut, len(truth))
			}
		}
	})

	// otherDir: secrets from another `scanctl secrets init` (another CA
	// with the same name, so the client offers its certificate), with the
	// cluster's ca.crt (the CA certificate is public: the client trusts
	// the real coordinator).
	otherDir := filepath.Join(t.TempDir(), "other")
	if err := secrets.Init(otherDir, secrets.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	copyCA := func(dir string) {
		ca, err := os.ReadFile(filepath.Join(secDir, "ca.crt"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	copyCA(otherDir)
	// expiredDir: a client certificate of the cluster's CA that expired.
	now := time.Now()
	ca, caKey := loadCA(t, secDir)
	der, key, err := secrets.NewCert(ca, caKey, secrets.CertSpec{CommonName: "scanplane client", Role: "client", DNSNames: []string{"localhost"},
		IPs: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	expiredDir := t.TempDir()
	copyCA(expiredDir)
	if err := secrets.WriteCertFiles(filepath.Join(expiredDir, "client.crt"), filepath.Join(expiredDir, "client.key"), der, key); err != nil {
		t.Fatal(err)
	}

	// scanctl connects to NATS first, which the coordinator's embedded
	// NATS server refuses (scanctl says why); the actor remote, dialled
	// directly with the same certificate, refuses it too and logs why.
	for _, tc := range []struct {
		name       string
		args       []string
		dir        string // the certificate dialled at the remote; "" = none
		errWant    string // in scanctl's one error line
		remoteWant string // in the coordinator's "remote: TLS handshake refused" line
		natsLog    string // in its embedded NATS server's line about the refusal
	}{
		{"another CA", []string{"--secrets", otherDir}, otherDir, " refused the TLS handshake (", "certificate signed by unknown authority", "certificate signed by unknown authority"},
		{"expired certificate", []string{"--secrets", expiredDir}, expiredDir, " refused the TLS handshake (", "certificate has expired", "certificate has expired"},
		{"no TLS", nil, "", " requires TLS and a client certificate: pass --secrets DIR", "", "TLS handshake error: remote error: tls:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			out, errOut, err := scanctlScan(t, nil, tc.args...)
			if err == nil || !strings.Contains(errOut, tc.errWant) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
				t.Fatalf("refused scanctl scan: %v, stdout %q, stderr %q; want a failure, one line with %q", err, out, errOut, tc.errWant)
			}
			if strings.TrimSpace(out) != "" {
				t.Fatalf("refused scanctl scan printed %q", out)
			}
			t.Logf("scan failed after %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(errOut))
			waitLogLine(t, coordLog, "component=nats-server", tc.natsLog)
			if tc.dir == "" {
				return
			}
			cfg := tlsFrom(tc.dir)
			cfg.NextProtos = []string{"h2"}
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", cl.CoordinatorProc(0).Ready.Actor, cfg)
			if err == nil {
				// TLS 1.3: the server's verdict on the client
				// certificate arrives with the first read.
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				_, err = conn.Read(make([]byte, 1))
				conn.Close()
			}
			if err == nil {
				t.Fatal("the actor remote accepted the certificate")
			}
			waitLogLine(t, coordLog, "remote: TLS handshake refused", tc.remoteWant)
		})
	}
}

// loadCA reads the CA certificate and key of a secrets directory.
func loadCA(t *testing.T, dir string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	read := func(name, typ string) []byte {
		path := name
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, name)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := pem.Decode(data)
		if b == nil || b.Type != typ {
			t.Fatalf("%s: no PEM %s", name, typ)
		}
		return b.Bytes
	}
	ca, err := x509.ParseCertificate(read("ca.crt", "CERTIFICATE"))
	if err != nil {
		t.Fatal(err)
	}
	k, err := x509.ParsePKCS8PrivateKey(read(filepath.Join(secrets.DefaultCADir(dir), "ca.key"), "PRIVATE KEY"))
	if err != nil {
		t.Fatal(err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		t.Fatalf("ca.key is a %T", k)
	}
	return ca, key
}

// waitLogLine waits (bounded) for a line of the log at path containing
// every one of want.
func waitLogLine(t *testing.T, path string, want ...string) {
	t.Helper()
	found := testutil.Poll(10*time.Second, func() bool {
		data, _ := os.ReadFile(path)
		for _, l := range strings.Split(string(data), "\n") {
			all := true
			for _, w := range want {
				all = all && strings.Contains(l, w)
			}
			if all {
				t.Logf("%s: %s", filepath.Base(path), l)
				return true
			}
		}
		return false
	})
	if !found {
		t.Fatalf("%s has no line with %q", path, want)
	}
}

// TestMutualTLSCoordinators: two coordinators (one Proto.Actor cluster,
// gossip and forwarded scans between them over the remote) and two scan
// servers, all on --secrets: a scan sent to either coordinator alone
// (scanctl --coordinator, so the tablets the other owns are forwarded to
// it) returns every row, and no process logs a refused handshake.
func TestMutualTLSCoordinators(t *testing.T) {
	clustertest.SkipShort(t)
	ctx := context.Background()
	scanctl := clustertest.BuildTool(t, ctx, "scanctl")
	secDir := filepath.Join(t.TempDir(), "secrets")
	if err := secrets.Init(secDir, secrets.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	cl := clustertest.Start(t, ctx, localcluster.Config{Coordinators: 2, Hosts: 2, ServersPerHost: 1, DataDir: dataDir,
		Heartbeat: 200 * time.Millisecond, ReadyTimeout: 60 * time.Second, LogLevel: "info",
		Secrets: secDir})
	t.Cleanup(func() { logTails(t, dataDir) })
	admin, err := cliutil.RemoteTLS(secDir, "admin")
	if err != nil {
		t.Fatal(err)
	}
	truth := tablets.GenerateRows(4000)
	clustertest.Ingest(t, ctx, cl.NATSURL(), admin, table, truth, 8)
	for i := 0; i < cl.Coordinators(); i++ {
		addr := cl.CoordinatorProc(i).Ready.Actor
		sctx, cancel := context.WithTimeout(ctx, 40*time.Second)
		out, err := exec.CommandContext(sctx, scanctl, "scan", "--via", "actor", "--nats", cl.NATSURL(), "--coordinator", addr, "--secrets", secDir,
			"--table", table, "--count", "--timeout", "30s").CombinedOutput()
		cancel()
		if err != nil || strings.TrimSpace(string(out)) != strconv.Itoa(len(truth)) {
			t.Fatalf("scanctl scan --coordinator %s (coordinator %d): %v, output %q; want %d", addr, i, err, out, len(truth))
		}
	}
	// The scans did cross between the coordinators.
	forwarded := 0.0
	for i := 0; i < cl.Coordinators(); i++ {
		forwarded += metricSum(t, cl.HTTPClient(), cl.HTTPURL(i)+"/metrics", "forwarded_total")
	}
	if forwarded == 0 {
		t.Fatal("no scan was forwarded between the coordinators")
	}
	t.Logf("%v scan requests forwarded between the coordinators", forwarded)
	logs, err := filepath.Glob(filepath.Join(dataDir, "logs", "*.log"))
	if err != nil || len(logs) < 4 {
		t.Fatalf("logs %q: %v", logs, err)
	}
	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "TLS handshake") {
			t.Errorf("%s logs a failed TLS handshake:\n%s", filepath.Base(l), data)
		}
	}
}

// metricSum is the sum of the Prometheus text samples at url (read with
// hc) whose metric name ends in suffix, whatever their labels.
func metricSum(t *testing.T, hc *http.Client, url, suffix string) float64 {
	t.Helper()
	return labelledSum(t, hc, url, suffix, "")
}
