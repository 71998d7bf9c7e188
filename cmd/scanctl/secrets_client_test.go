package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scanplane/scanplane/internal/grants"
)

// TestSecretsClient: `scanctl secrets client NAME --tables` writes a
// certificate of the directory's CA, with the client role's subject, its
// client.crt's hosts and the grant; bad names, tables and directories are
// refused with one line naming the value.
func TestSecretsClient(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	other := filepath.Join(t.TempDir(), "o")
	for _, d := range []string{dir, other} {
		if code := run(context.Background(), []string{"secrets", "init", "--dir", d, "--hosts", "node1,10.0.0.1"}, &bytes.Buffer{}, &bytes.Buffer{}); code != 0 {
			t.Fatalf("secrets init %s: code %d", d, code)
		}
	}
	for _, tc := range []struct {
		args     []string
		code     int
		out, err string
	}{
		{args: []string{"secrets", "client", "--dir", dir, "--tables", "demo"}, code: 2, err: "want the client's NAME"},
		{args: []string{"secrets", "client", "alice", "--dir", dir}, code: 2, err: "--tables is required"},
		{args: []string{"secrets", "client", "alice", "--tables", "demo"}, code: 2, err: "--dir is required"},
		{args: []string{"secrets", "client", "alice", "--dir", dir, "--tables", "de.mo"}, code: 2, err: `--tables "de.mo": bad grant: table "de.mo": character '.'`},
		{args: []string{"secrets", "client", "al/ice", "--dir", dir, "--tables", "demo"}, code: 2, err: `principal "al/ice"`},
		{args: []string{"secrets", "client", "admin", "--dir", dir, "--tables", "demo"}, code: 2, err: `client name "admin" is a file of the secrets directory`},
		{args: []string{"secrets", "client", "alice", "--dir", dir, "--tables", "demo", "--ca-dir", other + "-ca"}, code: 2, err: "is not the CA of " + filepath.Join(dir, "ca.crt")},
		{args: []string{"secrets", "client", "alice", "--dir", dir, "--tables", "demo,logs-*"}, code: 0, out: "for alice, which may scan demo,logs-*"},
		{args: []string{"secrets", "client", "alice", "--dir", dir, "--tables", "demo"}, code: 1, err: "alice.crt: secrets already exist (pass --force"},
		{args: []string{"secrets", "client", "--dir", dir, "bob", "--tables", "*"}, code: 0, out: "for bob, which may scan *"},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errOut)
		if code != tc.code || !strings.Contains(out.String(), tc.out) || !strings.Contains(errOut.String(), tc.err) {
			t.Errorf("%q: code %d, out %q, err %q; want code %d, out ~%q, err ~%q", tc.args, code, out.String(), errOut.String(), tc.code, tc.out, tc.err)
		}
	}
	crt := readPEMCert(t, filepath.Join(dir, "alice.crt"))
	ca := readPEMCert(t, filepath.Join(dir, "ca.crt"))
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if _, err := crt.Verify(x509.VerifyOptions{Roots: pool, DNSName: "node1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("alice.crt does not verify for node1 against the CA: %v", err)
	}
	if crt.Subject.String() != readPEMCert(t, filepath.Join(dir, "client.crt")).Subject.String() {
		t.Errorf("alice.crt subject %q, want client.crt's", crt.Subject)
	}
	g, err := grants.FromCertificate(crt)
	if err != nil || g.Principal() != "alice" || !g.Allows("demo") || !g.Allows("logs-1") || g.Allows("other") {
		t.Errorf("alice.crt grant %v, %v", g, err)
	}
	if st, err := os.Stat(filepath.Join(dir, "alice.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("alice.key: %v, %v; want mode 0600", st, err)
	}
}

func readPEMCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
