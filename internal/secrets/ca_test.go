package secrets_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/scanplane/scanplane/internal/secrets"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		t.Fatalf("%s: no PEM certificate", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestInitSecrets(t *testing.T) {
	for _, tc := range []struct {
		name      string
		hosts     []string
		wantDNS   []string
		wantIPs   []string
		wantError string
	}{
		{name: "loopback only", wantDNS: []string{"localhost"}, wantIPs: []string{"127.0.0.1", "::1"}},
		{name: "hosts", hosts: []string{"node1.example.com", " 10.0.0.7 ", "node2", ""},
			wantDNS: []string{"localhost", "node1.example.com", "node2"}, wantIPs: []string{"127.0.0.1", "::1", "10.0.0.7"}},
		{name: "bad host", hosts: []string{"bad host"}, wantError: `--hosts: "bad host" is neither an IP address nor a DNS name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "secrets")
			err := secrets.Init(dir, secrets.InitOptions{Hosts: tc.hosts})
			if tc.wantError != "" {
				if err == nil || err.Error() != tc.wantError {
					t.Fatalf("err = %v, want %q", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ca := readCert(t, filepath.Join(dir, "ca.crt"))
			if !ca.IsCA {
				t.Fatal("ca.crt is not a CA")
			}
			pool := x509.NewCertPool()
			pool.AddCert(ca)
			for _, f := range []string{filepath.Join(secrets.DefaultCADir(dir), "ca.key"), "coordinator.key", "scanserver.key", "client.key", "admin.key"} {
				if !filepath.IsAbs(f) {
					f = filepath.Join(dir, f)
				}
				st, err := os.Stat(f)
				if err != nil {
					t.Fatal(err)
				}
				if st.Mode().Perm() != 0o600 {
					t.Errorf("%s mode %v, want 0600", f, st.Mode().Perm())
				}
			}
			for _, role := range secrets.Roles {
				c := readCert(t, filepath.Join(dir, role+".crt"))
				for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
					if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
						t.Errorf("%s: verify against the CA (usage %v): %v", role, usage, err)
					}
				}
				if !slices.Equal(c.DNSNames, tc.wantDNS) {
					t.Errorf("%s DNS SANs %q, want %q", role, c.DNSNames, tc.wantDNS)
				}
				var ips []string
				for _, ip := range c.IPAddresses {
					ips = append(ips, ip.String())
				}
				if !slices.Equal(ips, tc.wantIPs) {
					t.Errorf("%s IP SANs %q, want %q", role, ips, tc.wantIPs)
				}
				for _, h := range append(tc.wantDNS, tc.wantIPs...) {
					if err := c.VerifyHostname(h); err != nil {
						t.Errorf("%s: %v", role, err)
					}
				}
				if err := c.VerifyHostname("evil.example.com"); err == nil {
					t.Errorf("%s: valid for a host it does not name", role)
				}
				if _, err := tls.LoadX509KeyPair(filepath.Join(dir, role+".crt"), filepath.Join(dir, role+".key")); err != nil {
					t.Errorf("%s: key does not match the certificate: %v", role, err)
				}
				if _, err := secrets.RoleTLS(dir, role, "--secrets"); err != nil {
					t.Errorf("RemoteTLS(%s): %v", role, err)
				}
				if got, want := c.Subject.String(), secrets.RoleSubject(role); got != want {
					t.Errorf("%s subject %q, RoleSubject %q (the NATS server maps the certificate by it)", role, got, want)
				}
			}
		})
	}
}

func TestInitSecretsRefusesOverwrite(t *testing.T) {
	dir := t.TempDir()
	if err := secrets.Init(dir, secrets.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	err := secrets.Init(dir, secrets.InitOptions{})
	if !errors.Is(err, secrets.ErrExist) {
		t.Fatalf("second init: err = %v, want ErrSecretsExist", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "ca.crt")); string(after) != string(before) {
		t.Fatal("refused init changed ca.crt")
	}
	// A lone leftover file is enough to refuse.
	dir2 := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir2, "client.key"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := secrets.Init(dir2, secrets.InitOptions{}); !errors.Is(err, secrets.ErrExist) {
		t.Fatalf("init over client.key: err = %v, want ErrSecretsExist", err)
	}
	// --force replaces them: a new CA, keys still 0600 even if loosened.
	if err := os.Chmod(filepath.Join(dir, "client.key"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := secrets.Init(dir, secrets.InitOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "ca.crt")); string(after) == string(before) {
		t.Fatal("--force kept the old CA")
	}
	if st, _ := os.Stat(filepath.Join(dir, "client.key")); st.Mode().Perm() != 0o600 {
		t.Fatalf("client.key mode %v after --force, want 0600", st.Mode().Perm())
	}
}

func TestRemoteTLSErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := secrets.RoleTLS(dir, "client", "--secrets"); err == nil {
		t.Fatal("empty directory accepted")
	}
	if err := secrets.Init(dir, secrets.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.RoleTLS(dir, "nosuchrole", "--secrets"); err == nil {
		t.Fatal("unknown role accepted")
	}
	// Key file modes, CockroachDB's rule and cases (cockroachdb/cockroach
	// pkg/security/certificate_loader_test.go, before its root-owned
	// 0740 allowance: node.key 0704 and client.root.key 0740 "exceed
	// -rwx------", 0700 loads).
	for _, tc := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o600, true}, {0o700, true}, {0o400, true}, {0o704, false}, {0o740, false}, {0o640, false}, {0o644, false}} {
		if err := os.Chmod(filepath.Join(dir, "admin.key"), tc.mode); err != nil {
			t.Fatal(err)
		}
		_, err := secrets.RoleTLS(dir, "admin", "--secrets")
		if tc.ok != (err == nil) || !tc.ok && !strings.Contains(err.Error(), "admin.key has mode "+fmt.Sprintf("%04o", uint32(tc.mode))+", readable by others") {
			t.Errorf("admin.key mode %v: RemoteTLS err %v, want ok=%v", tc.mode, err, tc.ok)
		}
	}
	// Every key of the directory counts, not only the role's own.
	if _, err := secrets.RoleTLS(dir, "coordinator", "--secrets"); err == nil || !strings.Contains(err.Error(), "admin.key has mode") {
		t.Fatalf("RemoteTLS(coordinator) with admin.key readable by others: %v", err)
	}
	if err := os.Chmod(filepath.Join(dir, "admin.key"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := secrets.RoleTLS(dir, "coordinator", "--secrets")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ClientAuth != tls.RequireAndVerifyClientCert || cfg.RootCAs == nil || cfg.ClientCAs == nil || len(cfg.Certificates) != 1 {
		t.Fatalf("RemoteTLS config incomplete: %+v", cfg)
	}
}

// TestInitSecretsServerHosts: --server-hosts writes a certificate per
// scan server host whose subject names it; init without --force refuses
// a directory holding one; --force replaces the old hosts' files.
func TestInitSecretsServerHosts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	if err := secrets.Init(dir, secrets.InitOptions{ServerHosts: []string{"bad.host"}}); err == nil || !strings.Contains(err.Error(), `--server-hosts: "bad.host"`) {
		t.Fatalf("bad host: %v", err)
	}
	if err := secrets.Init(dir, secrets.InitOptions{ServerHosts: []string{"h1", " h2 ", ""}}); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"h1", "h2"} {
		c := readCert(t, filepath.Join(dir, secrets.ServerRole(h)+".crt"))
		if got, want := c.Subject.String(), secrets.HostSubject(h); got != want {
			t.Errorf("%s subject %q, want %q", h, got, want)
		}
		if _, err := secrets.RoleTLS(dir, secrets.ServerRole(h), "--secrets"); err != nil {
			t.Errorf("RemoteTLS(%s): %v", secrets.ServerRole(h), err)
		}
	}
	if hs, err := secrets.ServerHosts(dir); err != nil || !slices.Equal(hs, []string{"h1", "h2"}) {
		t.Fatalf("ServerHosts = %q, %v", hs, err)
	}
	os.Remove(filepath.Join(dir, "ca.key")) // only the host files are left to refuse on
	if err := secrets.Init(dir, secrets.InitOptions{}); !errors.Is(err, secrets.ErrExist) {
		t.Fatalf("init over per-host certificates: %v, want ErrSecretsExist", err)
	}
	if err := secrets.Init(dir, secrets.InitOptions{ServerHosts: []string{"h3"}, Force: true}); err != nil {
		t.Fatal(err)
	}
	if hs, err := secrets.ServerHosts(dir); err != nil || !slices.Equal(hs, []string{"h3"}) {
		t.Fatalf("ServerHosts after --force = %q, %v; want [h3]", hs, err)
	}
}
