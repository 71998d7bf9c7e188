package cliutil_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
)

// TestHTTPSecurity: an endpoint secured with --secrets answers
// only to a client or admin certificate of the cluster CA or the bearer
// token of DIR/http.token; without either it is 401 and nothing of the
// page; a certificate of another role is 403; a certificate of another CA
// fails the handshake; plain HTTP gets no page.
func TestHTTPSecurity(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	if err := secrets.Init(dir, secrets.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, cliutil.HTTPTokenFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("http.token: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	raw, _ := os.ReadFile(filepath.Join(dir, cliutil.HTTPTokenFile))
	token := strings.TrimSpace(string(raw))
	if len(token) != 64 {
		t.Fatalf("http.token %q: want 32 bytes hex", token)
	}
	other := filepath.Join(t.TempDir(), "other")
	if err := secrets.Init(other, secrets.InitOptions{}); err != nil {
		t.Fatal(err)
	}

	sec, err := cliutil.LoadHTTPSecurity(dir, "coordinator", "")
	if err != nil {
		t.Fatal(err)
	}
	if sec.Scheme() != "https" || string(sec.Token) != token {
		t.Fatalf("scheme %s token %q", sec.Scheme(), sec.Token)
	}
	l, err := cliutil.ListenHTTP("http", "127.0.0.1:0", sec)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "SECRET-STATUS"
	stop := cliutil.ServeListener(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, secret) }), sec, nil)
	defer stop()
	url := "https://" + l.Addr().String() + "/status"

	client := clustertest.HTTPClient
	// A client that verifies the server but presents no certificate.
	noCert := client(t, dir, "client")
	noCert.Transport.(*http.Transport).TLSClientConfig.Certificates = nil
	for _, tc := range []struct {
		name   string
		c      *http.Client
		bearer string
		want   int
	}{
		{"no auth", noCert, "", http.StatusUnauthorized},
		{"wrong token", noCert, strings.Repeat("0", 64), http.StatusUnauthorized},
		{"token prefix", noCert, token[:32], http.StatusUnauthorized},
		{"token", noCert, token, http.StatusOK},
		{"client cert", client(t, dir, "client"), "", http.StatusOK},
		{"admin cert", client(t, dir, "admin"), "", http.StatusOK},
		{"scanserver cert", client(t, dir, "scanserver"), "", http.StatusForbidden},
		{"scanserver cert and token", client(t, dir, "scanserver"), token, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, err := clustertest.Get(context.Background(), tc.c, url, tc.bearer)
			if err != nil {
				t.Fatal(err)
			}
			if code != tc.want {
				t.Fatalf("status %d, want %d (body %q)", code, tc.want, body)
			}
			if (code == http.StatusOK) != strings.Contains(body, secret) {
				t.Fatalf("status %d with body %q", code, body)
			}
		})
	}
	t.Run("other CA cert", func(t *testing.T) {
		c := client(t, dir, "client")
		oc := client(t, other, "client")
		c.Transport.(*http.Transport).TLSClientConfig.Certificates = oc.Transport.(*http.Transport).TLSClientConfig.Certificates
		code, body, err := clustertest.Get(context.Background(), c, url, "")
		if err == nil {
			t.Fatalf("another CA's certificate: status %d body %q, want a refused handshake", code, body)
		}
	})
	t.Run("plain http", func(t *testing.T) {
		c := &http.Client{Timeout: 10 * time.Second}
		res, err := c.Get("http://" + l.Addr().String() + "/status")
		if err == nil {
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK || strings.Contains(string(b), secret) {
				t.Fatalf("plain HTTP: %d %q", res.StatusCode, b)
			}
		}
	})
	t.Run("server not of the CA", func(t *testing.T) {
		c := client(t, other, "client")
		if _, _, err := clustertest.Get(context.Background(), c, url, token); err == nil {
			t.Fatal("a client of another CA trusted the server")
		}
	})
}

// TestLoadHTTPSecurity: plain without --secrets, a token file without
// --secrets, a readable, short or missing token file are errors naming the flag.
func TestLoadHTTPSecurity(t *testing.T) {
	if s, err := cliutil.LoadHTTPSecurity("", "coordinator", ""); s != nil || err != nil {
		t.Fatalf("no secrets: %v %v", s, err)
	}
	if _, err := cliutil.LoadHTTPSecurity("", "coordinator", "/x"); err == nil || !strings.Contains(err.Error(), "--http-token-file needs --secrets") {
		t.Fatalf("token without secrets: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "secrets")
	if err := secrets.Init(dir, secrets.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	tok := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(tok, []byte("abcdefabcdefabcdef12\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := cliutil.LoadHTTPSecurity(dir, "coordinator", tok); err == nil || !strings.Contains(err.Error(), "--http-token-file") || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("0644 token: %v", err)
	}
	_ = os.Chmod(tok, 0o600)
	s, err := cliutil.LoadHTTPSecurity(dir, "coordinator", tok)
	if err != nil || string(s.Token) != "abcdefabcdefabcdef12" {
		t.Fatalf("token file: %v %q", err, s.Token)
	}
	if err := os.WriteFile(tok, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := cliutil.LoadHTTPSecurity(dir, "coordinator", tok); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Fatalf("short token: %v", err)
	}
	if _, err := cliutil.LoadHTTPSecurity(dir, "coordinator", filepath.Join(dir, "nope")); err == nil || !strings.Contains(err.Error(), "--http-token-file") {
		t.Fatalf("missing token file: %v", err)
	}
	// No http.token in the directory: certificates only.
	_ = os.Remove(filepath.Join(dir, cliutil.HTTPTokenFile))
	if s, err := cliutil.LoadHTTPSecurity(dir, "coordinator", ""); err != nil || s.Token != nil {
		t.Fatalf("no token: %v %q", err, s.Token)
	}
}
