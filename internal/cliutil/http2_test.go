package cliutil_test

import (
	"crypto/tls"
	"io"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/secrets"
)

// TestServeListenerHTTP2: an endpoint speaks HTTP/2 besides HTTP/1.1, as
// gRPC clients need: with prior knowledge over plain TCP (h2c), and by
// ALPN over TLS.
func TestServeListenerHTTP2(t *testing.T) {
	proto := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, r.Proto) })
	get := func(t *testing.T, c *http.Client, url, want string) {
		t.Helper()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(body) != want {
			t.Fatalf("GET %s: %s %q; want 200 %q", url, resp.Status, body, want)
		}
	}
	t.Run("plain", func(t *testing.T) {
		l, err := cliutil.ListenHTTP("http", "127.0.0.1:0", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cliutil.ServeListener(l, proto, nil, nil)()
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		get(t, &http.Client{Transport: &http.Transport{Protocols: &p}}, "http://"+l.Addr().String(), "HTTP/2.0")
		get(t, &http.Client{Transport: &http.Transport{}}, "http://"+l.Addr().String(), "HTTP/1.1")
	})
	t.Run("tls", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "secrets")
		if err := secrets.Init(dir, secrets.InitOptions{}); err != nil {
			t.Fatal(err)
		}
		sec, err := cliutil.LoadHTTPSecurity(dir, "coordinator", "")
		if err != nil {
			t.Fatal(err)
		}
		l, err := cliutil.ListenHTTP("http", "127.0.0.1:0", sec)
		if err != nil {
			t.Fatal(err)
		}
		defer cliutil.ServeListener(l, proto, sec, nil)()
		cfg, err := secrets.RoleTLS(dir, "client", "--secrets")
		if err != nil {
			t.Fatal(err)
		}
		dial := &tls.Config{Certificates: cfg.Certificates, RootCAs: cfg.RootCAs}
		get(t, &http.Client{Transport: &http.Transport{TLSClientConfig: dial, ForceAttemptHTTP2: true}}, "https://"+l.Addr().String(), "HTTP/2.0")
	})
}
