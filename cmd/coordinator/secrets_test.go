package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
)

// TestSecretsListen: with --secrets the actor remote and the
// embedded NATS server have mutual TLS, so the coordinator (actor, NATS
// and HTTP ports) and scanserver listen on 0.0.0.0 without --insecure,
// the scan server connects to NATS with its certificate, and their HTTP
// endpoints are HTTPS with authentication (checkSecureHTTP); a --secrets
// directory that is not one is a one-line error.
func TestSecretsListen(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs coordinator and scanserver processes")
	}
	coord := buildCmd(t, ".", "coordinator")
	server := buildCmd(t, "../scanserver", "scanserver")
	secDir := filepath.Join(t.TempDir(), "secrets")
	// The scan server below (--host h1) connects to NATS with its host's
	// certificate, scanserver.h1.crt, the only one mapped for scan servers.
	if err := secrets.Init(secDir, secrets.InitOptions{ServerHosts: []string{"h1"}}); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	base := []string{"--data", data, "--nats-listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--cluster-provider", "none"}

	// Not a secrets directory: exit 2, one line naming --secrets.
	for _, bin := range []struct{ path, role string }{{coord, "coordinator"}, {server, "scanserver"}} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var errOut bytes.Buffer
		cmd := exec.CommandContext(ctx, bin.path, "--secrets", t.TempDir(), "--nats", "nats://127.0.0.1:1")
		cmd.Stderr = &errOut
		err := cmd.Run()
		cancel()
		ee, ok := err.(*exec.ExitError)
		msg := strings.TrimSpace(errOut.String())
		if !ok || ee.ExitCode() != 2 || strings.Contains(msg, "\n") || !strings.Contains(msg, "--secrets") || !strings.Contains(msg, "ca.crt") {
			t.Fatalf("%s --secrets EMPTYDIR: %v, stderr %q; want exit 2 and one line naming --secrets and ca.crt", bin.role, err, msg)
		}
	}
	// With --secrets, HTTP is HTTPS with authentication, so it may
	// listen on every interface too (reached here on 127.0.0.1).
	co, r := startReady(t, coord, append(base, "--listen", "0.0.0.0:0", "--nats-listen", "0.0.0.0:0", "--secrets", secDir, "--http", "0.0.0.0:0")...)
	ss, sr := startReady(t, server, "--nats", r.NATS, "--listen", "0.0.0.0:0", "--host", "h1", "--secrets", secDir, "--http", "0.0.0.0:0")
	checkSecureHTTP(t, secDir, "coordinator", r.HTTP, "/status", "/metrics", "/", "/debug/pprof/", "/debug/pprof/heap?debug=1")
	checkSecureHTTP(t, secDir, "scanserver", sr.HTTP, "/metrics", "/debug/pprof/", "/debug/pprof/heap?debug=1")
	// The profiles: a CPU profile too is refused without
	// authentication, and both parse with the bearer token.
	tok, err := os.ReadFile(filepath.Join(secDir, cliutil.HTTPTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	noCert, err := secrets.HTTPClient(secDir, "client")
	if err != nil {
		t.Fatal(err)
	}
	noCert.Timeout = time.Minute
	noCert.Transport.(*http.Transport).TLSClientConfig.Certificates = nil
	defer noCert.CloseIdleConnections()
	for _, p := range []struct{ who, addr string }{{"coordinator", r.HTTP}, {"scanserver", sr.HTTP}} {
		_, port, err := net.SplitHostPort(p.addr)
		if err != nil {
			t.Fatal(err)
		}
		base := "https://127.0.0.1:" + port
		res, err := noCert.Get(base + "/debug/pprof/profile?seconds=1")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s CPU profile without authentication: %d, want 401; %d bytes", p.who, res.StatusCode, len(body))
		}
		checkPprof(t, p.who, base, noCert, strings.TrimSpace(string(tok)))
	}
	ss.stop(t)
	co.stop(t)
	// The refused handshakes (another CA's certificate, plain HTTP) are
	// logged by the process with the reason.
	for _, p := range []*proc{co, ss} {
		if s := p.stderr.String(); !strings.Contains(s, "http: TLS handshake error") || !strings.Contains(s, "certificate signed by unknown authority") {
			t.Errorf("no refused HTTPS handshake logged with its reason:\n%s", s)
		}
	}
	if strings.Contains(co.stderr.String(), "--insecure") {
		t.Errorf("coordinator with --secrets warned about --insecure:\n%s", co.stderr.String())
	}
}

// checkSecureHTTP asks each path of a --secrets process's HTTP
// endpoint at addr (any interface; asked on 127.0.0.1): without
// authentication 401 and no page; a wrong token 401; the bearer token of
// DIR/http.token, a client and an admin certificate 200 with the page; a
// scan server's certificate 403; a client certificate of another CA a
// refused handshake; plain HTTP no page.
func checkSecureHTTP(t *testing.T, secDir, who, addr string, paths ...string) {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s http address %q: %v", who, addr, err)
	}
	base := "https://127.0.0.1:" + port
	tok, err := os.ReadFile(filepath.Join(secDir, cliutil.HTTPTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "other")
	if err := secrets.Init(other, secrets.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	client := func(dir, role string) *http.Client { return clustertest.HTTPClient(t, dir, role) }
	noCert := client(secDir, "client")
	noCert.Transport.(*http.Transport).TLSClientConfig.Certificates = nil
	otherCA := client(secDir, "client")
	otherCA.Transport.(*http.Transport).TLSClientConfig.Certificates = client(other, "client").Transport.(*http.Transport).TLSClientConfig.Certificates
	// What only an authenticated answer has (the page links to the
	// coordinators over https).
	want := map[string]string{"/status": `"servers"`, "/metrics": "go_goroutines", "/": `href="https://`,
		"/debug/pprof/": "full goroutine stack dump", "/debug/pprof/heap?debug=1": "heap profile: "}
	get := func(c *http.Client, url, bearer string) (int, string, error) {
		return clustertest.Get(context.Background(), c, url, bearer)
	}
	for _, p := range paths {
		for _, tc := range []struct {
			name   string
			c      *http.Client
			bearer string
			code   int
		}{
			{"no auth", noCert, "", http.StatusUnauthorized},
			{"wrong token", noCert, strings.Repeat("ab", 32), http.StatusUnauthorized},
			{"token", noCert, strings.TrimSpace(string(tok)), http.StatusOK},
			{"client certificate", client(secDir, "client"), "", http.StatusOK},
			{"admin certificate", client(secDir, "admin"), "", http.StatusOK},
			{"scan server certificate", client(secDir, "scanserver"), "", http.StatusForbidden},
		} {
			code, body, err := get(tc.c, base+p, tc.bearer)
			if err != nil {
				t.Fatalf("%s GET %s with %s: %v", who, p, tc.name, err)
			}
			if code != tc.code || (code == http.StatusOK) != strings.Contains(body, want[p]) {
				t.Fatalf("%s GET %s with %s: %d, want %d; body %.200q", who, p, tc.name, code, tc.code, body)
			}
		}
		if code, body, err := get(otherCA, base+p, ""); err == nil {
			t.Fatalf("%s GET %s with another CA's certificate: %d %.200q, want a refused handshake", who, p, code, body)
		}
		plain := &http.Client{Timeout: 10 * time.Second}
		if code, body, err := get(plain, "http://127.0.0.1:"+port+p, ""); err == nil && (code == http.StatusOK || strings.Contains(body, want[p])) {
			t.Fatalf("%s plain GET %s: %d %.200q", who, p, code, body)
		}
	}
}
