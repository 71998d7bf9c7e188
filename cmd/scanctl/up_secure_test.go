package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
)

// TestUpSecure: `scanctl up --secure` creates DATA/secrets,
// starts every process with it and prints the --secrets flag; with that
// flag a scan returns every ingested row and status answers; without it
// the scan is refused with one line; the printed HTTPS status URL answers
// the token of http.token and 401 without; Ctrl-C stops the cluster.
func TestUpSecure(t *testing.T) {
	clustertest.SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bins := clustertest.Binaries(t, ctx)
	scanctl := clustertest.BuildTool(t, ctx, "scanctl")
	// Ephemeral ports instead of the well-known ones (other tests and
	// clusters may hold them).
	upAddrs = func(int, int) localcluster.CoordinatorAddrs { return localcluster.CoordinatorAddrs{} }
	defer func() { upAddrs = localcluster.PortAddrs }()

	data := t.TempDir()
	upCtx, stopUp := context.WithCancel(ctx)
	defer stopUp()
	var out, errOut testutil.SyncBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(upCtx, []string{"up", "--secure", "--coordinators", "1", "--hosts", "1", "--servers-per-host", "1",
			"--data", data, "--bin", bins, "--child-log-level", "warn"}, &out, &errOut)
	}()
	for !strings.Contains(out.String(), "press Ctrl-C to stop") {
		select {
		case c := <-code:
			t.Fatalf("up --secure exited %d before ready:\n%s\n%s", c, out.String(), errOut.String())
		case <-ctx.Done():
			t.Fatalf("up --secure not ready:\n%s\n%s", out.String(), errOut.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	printed := out.String()
	t.Logf("scanctl up --secure printed:\n%s", printed)
	want := filepath.Join(data, "secrets")
	if !strings.Contains(printed, "created the secrets directory "+want) {
		t.Errorf("no 'created the secrets directory %s' line", want)
	}
	m := regexp.MustCompile(`secured: pass --secrets (\S+) `).FindStringSubmatch(printed)
	if m == nil || m[1] != want {
		t.Fatalf("printed flag %v, want --secrets %s", m, want)
	}
	secDir := m[1]
	if !strings.Contains(printed, "nats:  TLS with the role certificates") {
		t.Errorf("up --secure does not say how NATS is secured")
	}
	natsURL := regexp.MustCompile(`(?m)^  nats\s+(\S+)$`).FindStringSubmatch(printed)
	coord := regexp.MustCompile(`(?m)^  coordinator\s+(\S+)\s+(https://\S+/status)\s`).FindStringSubmatch(printed)
	if natsURL == nil || coord == nil {
		t.Fatalf("no nats URL or coordinator line (with an https status URL) in the output")
	}

	// The commands that start a client run as processes: clients started
	// one after another in one process race on grpc's global logger
	// (protoactor's remote.Start sets it).
	cmd := func(args ...string) (int, string, string) {
		var o, e bytes.Buffer
		c := exec.CommandContext(ctx, scanctl, args...)
		c.Stdout, c.Stderr = &o, &e
		err := c.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, o.String(), e.String()
	}
	const rows = 500
	// The refusal is short: one line naming the URL once, and the fix.
	refusal := "NATS at " + natsURL[1] + " requires TLS and a client certificate: pass --secrets DIR or set SCANPLANE_SECRETS\n"
	if c, o, e := cmd("ingest", "--nats", natsURL[1], "--table", "t", "--generate", "500"); c != 1 || e != "scanctl ingest: "+refusal {
		t.Fatalf("ingest without --secrets: exit %d, out %q, err %q; want exit 1 and %q", c, o, e, refusal)
	}
	if c, o, e := cmd("ingest", "--nats", natsURL[1], "--secrets", secDir, "--table", "t", "--generate", "500"); c != 0 {
		t.Fatalf("ingest --secrets: %d %s %s", c, o, e)
	}
	if c, o, e := cmd("scan", "--nats", natsURL[1], "--coordinator", coord[1], "--secrets", secDir, "--table", "t", "--count", "--timeout", "30s"); c != 0 || strings.TrimSpace(o) != "500" {
		t.Fatalf("scan --secrets: exit %d, out %q, err %q; want %d rows", c, o, e, rows)
	}
	c, o, e := cmd("scan", "--nats", natsURL[1], "--coordinator", coord[1], "--table", "t", "--count", "--timeout", "5s")
	if c != 1 || strings.TrimSpace(o) != "" || e != "scanctl scan: "+refusal {
		t.Fatalf("scan without --secrets: exit %d, out %q, err %q; want exit 1, no rows and %q", c, o, e, refusal)
	}
	t.Logf("scan without --secrets: %s", strings.TrimSpace(e))
	if c, o, e := cmd("status", "--nats", natsURL[1], "--coordinator", coord[1], "--secrets", secDir, "--timeout", "30s"); c != 0 || !strings.Contains(o, "host1") {
		t.Fatalf("status --secrets: exit %d, out %q, err %q", c, o, e)
	}
	// Generations: tables reads with the client certificate, rollback
	// and tables drop write with the admin one.
	for _, args := range [][]string{
		{"ingest", "--table", "t", "--generate", "100"},
		{"rollback", "--table", "t", "--generation", "1"},
		{"tables", "drop", "--table", "t", "--generation", "2"},
	} {
		if c, o, e := cmd(append(args, "--nats", natsURL[1], "--secrets", secDir, "--timeout", "30s")...); c != 0 {
			t.Fatalf("%q --secrets: exit %d, out %q, err %q", args, c, o, e)
		}
	}
	if c, o, e := cmd("tables", "--nats", natsURL[1], "--secrets", secDir, "--timeout", "30s"); c != 0 || strings.Join(generationLines(o, "t"), ",") != "1 yes 500" {
		t.Fatalf("tables --secrets: exit %d, out %q, err %q; want generation 1 alone, current, 500 rows", c, o, e)
	}

	// The printed status URL: the token of http.token, and 401 without.
	tok, err := os.ReadFile(filepath.Join(secDir, cliutil.HTTPTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	hc, err := secrets.HTTPClient(secDir, "client")
	if err != nil {
		t.Fatal(err)
	}
	tr := hc.Transport.(*http.Transport)
	tr.TLSClientConfig.Certificates = nil // the token alone
	defer tr.CloseIdleConnections()
	for _, tc := range []struct {
		bearer string
		code   int
	}{{"", http.StatusUnauthorized}, {strings.TrimSpace(string(tok)), http.StatusOK}} {
		code, body, err := clustertest.Get(ctx, hc, coord[2], tc.bearer)
		if err != nil {
			t.Fatal(err)
		}
		if code != tc.code || (tc.code == http.StatusOK) != strings.Contains(body, "host1") {
			t.Fatalf("GET %s (token %v): %d %s %.200q", coord[2], tc.bearer != "", code, http.StatusText(code), body)
		}
	}

	stopUp()
	select {
	case c := <-code:
		if c != 0 || !strings.Contains(out.String(), "stopped") {
			t.Fatalf("up --secure after Ctrl-C: exit %d\n%s\n%s", c, out.String(), errOut.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("up --secure did not stop within a minute of Ctrl-C")
	}
}

// TestUpSecrets: up --secure creates DATA/secrets once, with the CA's
// key in DATA/secrets-ca, and reuses it; a ca.key an older up left in
// DATA/secrets is moved out, so that the processes accept the directory.
func TestUpSecrets(t *testing.T) {
	data := t.TempDir()
	dir, made, moved, err := upSecrets(data)
	if err != nil || !made || moved != "" || dir != filepath.Join(data, "secrets") {
		t.Fatalf("first: %q %v %q %v", dir, made, moved, err)
	}
	caKey := filepath.Join(data, "secrets-ca", "ca.key")
	if _, err := os.Stat(caKey); err != nil {
		t.Fatal(err)
	}
	if err := cliutil.CheckSecretsDir(dir); err != nil {
		t.Fatal(err)
	}
	ca, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	dir2, made, moved, err := upSecrets(data)
	if err != nil || made || moved != "" || dir2 != dir {
		t.Fatalf("second: %q %v %q %v", dir2, made, moved, err)
	}
	if ca2, _ := os.ReadFile(filepath.Join(dir, "ca.crt")); !bytes.Equal(ca, ca2) {
		t.Fatal("the CA changed")
	}
	// The layout of an older up: the key inside DATA/secrets.
	if err := os.Rename(caKey, filepath.Join(dir, "ca.key")); err != nil {
		t.Fatal(err)
	}
	if err := cliutil.CheckSecretsDir(dir); err == nil {
		t.Fatal("CheckSecretsDir accepts ca.key in the directory")
	}
	if _, _, moved, err = upSecrets(data); err != nil || moved != caKey {
		t.Fatalf("third: moved %q, %v; want %s", moved, err, caKey)
	}
	if err := cliutil.CheckSecretsDir(dir); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(caKey); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v", caKey, err)
	}
}
