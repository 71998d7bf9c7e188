package secrets_test

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/secrets"
)

// TestInitSecretsCAKeyApart: init keeps the CA's key out of the
// directory handed to the processes.
func TestInitSecretsCAKeyApart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	if err := secrets.Init(dir, secrets.InitOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ca.key")); !os.IsNotExist(err) {
		t.Fatalf("%s/ca.key: %v, want none", dir, err)
	}
	caDir := secrets.DefaultCADir(dir)
	if caDir != dir+"-ca" {
		t.Fatalf("DefaultCADir(%s) = %s", dir, caDir)
	}
	if st, err := os.Stat(caDir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v, want a directory of mode 0700", caDir, err)
	}
	if st, err := os.Stat(filepath.Join(caDir, "ca.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("%s/ca.key: %v, want mode 0600", caDir, err)
	}
	// The key is the CA's: it signs a certificate the directory's CA
	// certificate verifies.
	ca := readCert(t, filepath.Join(dir, "ca.crt"))
	caKey := readKey(t, filepath.Join(caDir, "ca.key"))
	now := time.Now()
	der, _, err := secrets.NewCert(ca, caKey, secrets.CertSpec{CommonName: "x", Role: "client", NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("a certificate signed with %s/ca.key: %v", caDir, err)
	}
	if _, err := secrets.RoleTLS(dir, "client", "--secrets"); err != nil {
		t.Fatalf("RemoteTLS of the new directory: %v", err)
	}

	// A second init refuses while the CA directory holds a key; --ca-dir
	// names another place; the secrets directory itself is refused.
	other := filepath.Join(t.TempDir(), "secrets")
	if err := secrets.Init(other, secrets.InitOptions{CADir: caDir}); !errors.Is(err, secrets.ErrExist) || !strings.Contains(err.Error(), filepath.Join(caDir, "ca.key")) {
		t.Fatalf("init over %s: %v, want ErrSecretsExist naming ca.key", caDir, err)
	}
	if err := secrets.Init(other, secrets.InitOptions{CADir: other}); err == nil || !strings.Contains(err.Error(), "--ca-dir "+other+" is the secrets directory") {
		t.Fatalf("init with --ca-dir = --dir: %v", err)
	}
	custom := filepath.Join(t.TempDir(), "vault", "ca")
	if err := secrets.Init(other, secrets.InitOptions{CADir: custom}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(custom, "ca.key")); err != nil {
		t.Fatal(err)
	}

	// --force over a directory an older init left ca.key in removes it.
	if err := os.WriteFile(filepath.Join(dir, "ca.key"), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := secrets.Init(dir, secrets.InitOptions{}); !errors.Is(err, secrets.ErrExist) {
		t.Fatalf("init without --force: %v", err)
	}
	if err := secrets.Init(dir, secrets.InitOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ca.key")); !os.IsNotExist(err) {
		t.Fatalf("%s/ca.key after --force: %v, want none", dir, err)
	}
	if _, err := secrets.RoleTLS(dir, "client", "--secrets"); err != nil {
		t.Fatalf("RemoteTLS after --force: %v", err)
	}
}

func readKey(t *testing.T, path string) *ecdsa.PrivateKey {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "PRIVATE KEY" {
		t.Fatalf("%s: no PEM private key", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		t.Fatalf("%s holds a %T", path, k)
	}
	return key
}

// TestRemoteTLSRefusesSecretsDir: a process refuses a secrets directory
// holding the CA's key, or any key file that group or others may read,
// with one line naming the file (and its mode).
func TestRemoteTLSRefusesSecretsDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	if err := secrets.Init(dir, secrets.InitOptions{ServerHosts: []string{"h1"}}); err != nil {
		t.Fatal(err)
	}
	caKey := filepath.Join(dir, "ca.key")
	_ = os.Remove(caKey)
	if _, err := secrets.RoleTLS(dir, "client", "--secrets"); err != nil {
		t.Fatalf("RemoteTLS of a sound directory: %v", err)
	}
	if err := os.WriteFile(caKey, []byte("-----BEGIN PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := secrets.RoleTLS(dir, "client", "--secrets")
	if err == nil || !strings.Contains(err.Error(), caKey) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("RemoteTLS with %s: %v, want one line naming it", caKey, err)
	}
	t.Logf("ca.key: %v", err)
	if err := os.Remove(caKey); err != nil {
		t.Fatal(err)
	}
	// Another role's key, or a host's, loosened: every process refuses.
	for _, f := range []string{"scanserver.key", "scanserver.h1.key", "admin.key", secrets.HTTPTokenFile} {
		p := filepath.Join(dir, f)
		for _, mode := range []os.FileMode{0o644, 0o640, 0o604} {
			if err := os.Chmod(p, mode); err != nil {
				t.Fatal(err)
			}
			_, err := secrets.RoleTLS(dir, "client", "--secrets")
			if err == nil || !strings.Contains(err.Error(), p+" has mode 0"+strings.TrimPrefix(modeOctal(mode), "0")) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("RemoteTLS with %s at %v: %v, want one line naming it and its mode", f, mode, err)
			}
		}
		t.Logf("%s: %v", f, err)
		if err := os.Chmod(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := secrets.RoleTLS(dir, "client", "--secrets"); err != nil {
		t.Fatalf("RemoteTLS after restoring the modes: %v", err)
	}
}

func modeOctal(m os.FileMode) string {
	const digits = "01234567"
	p := uint32(m.Perm())
	return string([]byte{'0', digits[p>>6&7], digits[p>>3&7], digits[p&7]})
}
