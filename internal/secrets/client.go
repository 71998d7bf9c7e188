package secrets

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/scanplane/scanplane/internal/grants"
)

// ClientOptions configures IssueClient.
type ClientOptions struct {
	// CADir holds the CA's key and certificate; "" = DefaultCADir(dir).
	CADir string
	// Force overwrites an existing NAME.crt and NAME.key.
	Force bool
	// Validity: how long the certificate is valid; 0 = 2 years.
	Validity time.Duration
	// Now is the issue time; zero = time.Now.
	Now time.Time
}

// IssueClient writes dir/NAME.crt and dir/NAME.key (0600), NAME being
// g's principal: a client certificate signed by the CA of CADir that
// carries g as its grant URI (grants.Grant.URI). Its subject is the
// client role's (RoleSubject("client")), so NATS and the HTTP endpoints
// take it as a client, and its hosts are those of dir's client.crt, so it
// works wherever that one does, also copied as client.crt and client.key
// beside ca.crt. A principal named like a file of the directory (a role,
// "ca", "http") is refused, as is an existing NAME.crt without
// opts.Force, and a CA whose certificate is not dir's ca.crt.
func IssueClient(dir string, g grants.Grant, opts ClientOptions) error {
	name := g.Principal()
	if dir == "" {
		return fmt.Errorf("--dir is empty")
	}
	if _, err := grants.New(name, []string{"*"}); err != nil {
		return err
	}
	if slices.Contains(Roles, name) || name == "ca" || name == "http" {
		return fmt.Errorf("client name %q is a file of the secrets directory; pick another", name)
	}
	caDir := opts.CADir
	if caDir == "" {
		caDir = DefaultCADir(dir)
	}
	ca, caKey, err := loadCA(caDir)
	if err != nil {
		return err
	}
	dirCA, err := readCert(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return fmt.Errorf("--dir %s: %w (create it with `scanctl secrets init --dir %s`)", dir, err, dir)
	}
	if !dirCA.Equal(ca) {
		return fmt.Errorf("--ca-dir %s: its ca.crt is not the CA of %s (pass the --ca-dir that secrets init used)", caDir, filepath.Join(dir, "ca.crt"))
	}
	hosts, err := readCert(filepath.Join(dir, "client.crt"))
	if err != nil {
		return fmt.Errorf("--dir %s: %w (its hosts are the new certificate's)", dir, err)
	}
	crt, key := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if !opts.Force {
		for _, f := range []string{crt, key} {
			if _, err := os.Lstat(f); err == nil {
				return fmt.Errorf("%s: %w (pass --force to replace it)", f, ErrExist)
			}
		}
	}
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	life := opts.Validity
	if life == 0 {
		life = 2 * 365 * 24 * time.Hour
	}
	der, k, err := NewCert(ca, caKey, CertSpec{CommonName: "scanplane client", Role: "client", DNSNames: hosts.DNSNames, IPs: hosts.IPAddresses,
		URIs: []*url.URL{g.URI()}, NotBefore: now, NotAfter: now.Add(life)})
	if err != nil {
		return err
	}
	return WriteCertFiles(crt, key, der, k)
}

// loadCA reads the CA's certificate and key from caDir.
func loadCA(caDir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	ca, err := readCert(filepath.Join(caDir, "ca.crt"))
	if err != nil {
		return nil, nil, fmt.Errorf("--ca-dir %s: %w", caDir, err)
	}
	p := filepath.Join(caDir, CAKeyFile)
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, nil, fmt.Errorf("--ca-dir %s: %w", caDir, err)
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "PRIVATE KEY" {
		return nil, nil, fmt.Errorf("--ca-dir %s: %s holds no PEM private key", caDir, p)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("--ca-dir %s: %s: %w", caDir, p, err)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok || !ek.PublicKey.Equal(ca.PublicKey) {
		return nil, nil, fmt.Errorf("--ca-dir %s: %s is not the key of its ca.crt", caDir, p)
	}
	return ca, ek, nil
}

// readCert reads the first PEM certificate of path.
func readCert(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}
