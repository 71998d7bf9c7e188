package secrets

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// A secrets directory (scanctl secrets init; docs/security.md) holds
//
//	DIR/ca.crt                       the cluster CA's certificate
//	DIR/<role>.crt, DIR/<role>.key   a certificate signed by the CA and its key (0600)
//	DIR/http.token                   the HTTP endpoints' bearer token (0600; see HTTPSecurity)
//
// for each role of Roles. The CA's private key is not in it: init writes
// it to a directory of its own (CADIR, 0700; DefaultCADir(DIR) unless
// --ca-dir names another)
//
//	CADIR/ca.crt                     the CA's certificate again
//	CADIR/ca.key                     its private key (0600)
//
// since no process needs it, only whoever issues certificates: DIR is
// what every node gets, CADIR stays with the operator. A process refuses
// a DIR holding ca.key, and one with a key (or the token) that group or
// others may read (CheckDir). Certificates and keys are PEM; keys
// are ECDSA P-256 in PKCS #8. Every role certificate is valid for both
// TLS client and server authentication (every actor system both listens
// and dials) and names the hosts given to init plus 127.0.0.1, ::1 and
// localhost.

// Roles are the roles a secrets directory has a certificate for.
var Roles = []string{"coordinator", "scanserver", "client", "admin"}

// ErrExist is wrapped by Init' error when the directory
// already holds secrets and force is not set.
var ErrExist = errors.New("secrets already exist")

// InitOptions configures Init.
type InitOptions struct {
	// Hosts are DNS names or IP addresses added to every certificate's
	// subject alternative names (127.0.0.1, ::1 and localhost always are).
	Hosts []string
	// ServerHosts are scan server host names (their --host): for each, a
	// certificate scanserver.HOST.crt (and .key) whose subject names the
	// host (HostSubject), which the embedded NATS server lets publish
	// only that host's heartbeats and signals. When a directory has any,
	// a coordinator started with it accepts only these for scan servers
	// on NATS (scanserver.crt no longer connects there), and a scan
	// server picks its host's (ServerRole). A name is 1+ characters of
	// [A-Za-z0-9_-].
	ServerHosts []string
	// CADir is where the CA's key (and a copy of its certificate) go,
	// created 0700; it must not be dir. "" = DefaultCADir(dir).
	CADir string
	// Force overwrites existing secrets (and removes the per-host scan
	// server certificates of a previous init, and a ca.key left in dir
	// by an init that kept it there).
	Force bool
	// CAValidity and CertValidity: how long the CA and the role
	// certificates are valid; 0 = 10 years and 2 years.
	CAValidity, CertValidity time.Duration
	// Now is the issue time; zero = time.Now.
	Now time.Time
}

// Init creates dir (0700) and writes a new CA and, for each role of
// Roles, a certificate signed by it and its key; the CA's key goes to
// opts.CADir (see the layout above). It refuses (ErrExist) when
// any of those files exists, unless opts.Force.
func Init(dir string, opts InitOptions) error {
	if dir == "" {
		return fmt.Errorf("--dir is empty")
	}
	caDir := opts.CADir
	if caDir == "" {
		caDir = DefaultCADir(dir)
	}
	if same, err := sameDir(dir, caDir); err != nil {
		return err
	} else if same {
		return fmt.Errorf("--ca-dir %s is the secrets directory: the CA's key must stay out of what the processes get", caDir)
	}
	var ips []net.IP
	dns := []string{"localhost"}
	ips = append(ips, net.ParseIP("127.0.0.1"), net.ParseIP("::1"))
	for _, h := range opts.Hosts {
		h = strings.TrimSpace(h)
		switch {
		case h == "":
			continue
		case net.ParseIP(h) != nil:
			ips = append(ips, net.ParseIP(h))
		case validHostName(h):
			dns = append(dns, h)
		default:
			return fmt.Errorf("--hosts: %q is neither an IP address nor a DNS name", h)
		}
	}
	var serverHosts []string
	for _, h := range opts.ServerHosts {
		if h = strings.TrimSpace(h); h == "" {
			continue
		}
		if !validServerHost(h) {
			return fmt.Errorf("--server-hosts: %q: want 1+ characters of [A-Za-z0-9_-] (a scan server's --host)", h)
		}
		serverHosts = append(serverHosts, h)
	}
	old, err := ServerHosts(dir)
	if err != nil {
		return err
	}
	if !opts.Force {
		if len(old) > 0 {
			return fmt.Errorf("%s: %w (pass --force to replace them)", filepath.Join(dir, ServerRole(old[0])+".crt"), ErrExist)
		}
		for _, f := range append(secretFiles(serverHosts), CAKeyFile) {
			if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
				return fmt.Errorf("%s: %w (pass --force to replace them)", filepath.Join(dir, f), ErrExist)
			}
		}
		for _, f := range []string{CAKeyFile, "ca.crt"} {
			if _, err := os.Lstat(filepath.Join(caDir, f)); err == nil {
				return fmt.Errorf("%s: %w (pass --force to replace them, or --ca-dir for another place)", filepath.Join(caDir, f), ErrExist)
			}
		}
	}
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	caLife, certLife := opts.CAValidity, opts.CertValidity
	if caLife == 0 {
		caLife = 10 * 365 * 24 * time.Hour
	}
	if certLife == 0 {
		certLife = 2 * 365 * 24 * time.Hour
	}
	ca, caKey, caDER, err := NewCA("scanplane CA", now, now.Add(caLife))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("--dir: %w", err)
	}
	if err := os.MkdirAll(caDir, 0o700); err != nil {
		return fmt.Errorf("--ca-dir: %w", err)
	}
	for _, h := range old { // --force: the previous init's hosts go
		for _, ext := range []string{".crt", ".key"} {
			if err := os.Remove(filepath.Join(dir, ServerRole(h)+ext)); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
	}
	// --force: a CA key an earlier init left in dir goes.
	if err := os.Remove(filepath.Join(dir, CAKeyFile)); err != nil && !os.IsNotExist(err) {
		return err
	}
	caKeyPEM, err := pemKey(caKey)
	if err != nil {
		return err
	}
	// The CA's key first: an interrupted init leaves no certificate
	// that nobody can reissue.
	if err := writeFileMode(filepath.Join(caDir, CAKeyFile), caKeyPEM, 0o600); err != nil {
		return err
	}
	if err := writeFileMode(filepath.Join(caDir, "ca.crt"), pemCert(caDER), 0o644); err != nil {
		return err
	}
	files := map[string][]byte{"ca.crt": pemCert(caDER)}
	for _, role := range Roles {
		der, key, err := NewCert(ca, caKey, CertSpec{CommonName: "scanplane " + role, Role: role, DNSNames: dns, IPs: ips, NotBefore: now, NotAfter: now.Add(certLife)})
		if err != nil {
			return err
		}
		files[role+".crt"] = pemCert(der)
		if files[role+".key"], err = pemKey(key); err != nil {
			return err
		}
	}
	for _, h := range serverHosts {
		role := ServerRole(h)
		der, key, err := NewCert(ca, caKey, CertSpec{CommonName: "scanplane scanserver " + h, Role: "scanserver", DNSNames: dns, IPs: ips, NotBefore: now, NotAfter: now.Add(certLife)})
		if err != nil {
			return err
		}
		files[role+".crt"] = pemCert(der)
		if files[role+".key"], err = pemKey(key); err != nil {
			return err
		}
	}
	// Keys first, certificates last: an interrupted init leaves no
	// certificate without its key.
	for _, f := range secretFiles(serverHosts) {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(f, ".key") {
			mode = 0o600
		}
		if err := writeFileMode(filepath.Join(dir, f), files[f], mode); err != nil {
			return err
		}
	}
	return writeHTTPToken(dir)
}

func secretFiles(serverHosts []string) []string {
	roles := slices.Clone(Roles)
	for _, h := range serverHosts {
		roles = append(roles, ServerRole(h))
	}
	var fs []string
	for _, r := range roles {
		fs = append(fs, r+".key")
	}
	fs = append(fs, "ca.crt")
	for _, r := range roles {
		fs = append(fs, r+".crt")
	}
	return fs
}

// sameDir reports whether a and b name one directory (the same path, or
// the same existing directory).
func sameDir(a, b string) (bool, error) {
	aa, err := filepath.Abs(a)
	if err != nil {
		return false, err
	}
	ba, err := filepath.Abs(b)
	if err != nil {
		return false, err
	}
	if aa == ba {
		return true, nil
	}
	as, aerr := os.Stat(aa)
	bs, berr := os.Stat(ba)
	return aerr == nil && berr == nil && os.SameFile(as, bs), nil
}

// MoveCAKey moves the CA's key that an earlier init left in the secrets
// directory dir to DefaultCADir(dir) (created 0700, with a copy of
// ca.crt), so that the processes accept dir again. It returns the new
// path, or "" when dir holds no ca.key. It refuses to overwrite a key
// already there.
func MoveCAKey(dir string) (string, error) {
	from := filepath.Join(dir, CAKeyFile)
	data, err := os.ReadFile(from)
	if os.IsNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	caDir := DefaultCADir(dir)
	to := filepath.Join(caDir, CAKeyFile)
	if _, err := os.Lstat(to); err == nil {
		return "", fmt.Errorf("%s: %w; %s is another CA key: keep the right one and remove the other from %s", to, ErrExist, from, dir)
	}
	crt, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(caDir, 0o700); err != nil {
		return "", err
	}
	if err := writeFileMode(to, data, 0o600); err != nil {
		return "", err
	}
	if err := writeFileMode(filepath.Join(caDir, "ca.crt"), crt, 0o644); err != nil {
		return "", err
	}
	return to, os.Remove(from)
}

func validServerHost(h string) bool {
	if h == "" || len(h) > 128 {
		return false
	}
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// ServerRole is the file name stem (for RemoteTLS) of host's scan server
// certificate: "scanserver.HOST".
func ServerRole(host string) string { return "scanserver." + host }

// ServerTLSRole is the certificate a scan server of host uses from the
// secrets directory dir: its own (ServerRole(host)) when dir has one,
// else "scanserver".
func ServerTLSRole(dir, host string) string {
	if validServerHost(host) {
		if _, err := os.Stat(filepath.Join(dir, ServerRole(host)+".crt")); err == nil {
			return ServerRole(host)
		}
	}
	return "scanserver"
}

// HostSubject is the subject (as RoleSubject) of host's scan server
// certificate made by Init with InitOptions.ServerHosts.
func HostSubject(host string) string {
	return pkix.Name{CommonName: "scanplane scanserver " + host, Organization: []string{"scanplane"}, OrganizationalUnit: []string{"scanserver"}}.String()
}

// ServerHosts lists the hosts that have a scan server certificate of
// their own in the secrets directory dir (scanserver.HOST.crt), sorted;
// none for a directory made without ServerHosts or missing.
func ServerHosts(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("--secrets %s: %w", dir, err)
	}
	var hosts []string
	for _, e := range ents {
		h, ok := strings.CutPrefix(e.Name(), "scanserver.")
		if !ok {
			continue
		}
		if h, ok = strings.CutSuffix(h, ".crt"); ok && validServerHost(h) {
			hosts = append(hosts, h)
		}
	}
	sort.Strings(hosts)
	return hosts, nil
}

// writeFileMode writes data to path with exactly mode (an existing file's
// mode is reset, whatever the umask), through a temporary file and rename.
func writeFileMode(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func validHostName(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '*') {
				return false
			}
		}
	}
	return true
}

// NewCA returns a self-signed CA certificate (parsed and DER) and its
// ECDSA P-256 key, valid from notBefore to notAfter.
func NewCA(name string, notBefore, notAfter time.Time) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"scanplane"}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	return cert, key, der, nil
}

// CertSpec describes a role certificate.
type CertSpec struct {
	CommonName string
	// Role goes into the subject's organizational unit.
	Role     string
	DNSNames []string
	IPs      []net.IP
	// URIs are URI subject alternative names (a client's grant,
	// grants.Grant.URI).
	URIs                []*url.URL
	NotBefore, NotAfter time.Time
}

// NewCert returns a certificate (DER) for spec signed by ca/caKey, usable
// for TLS client and server authentication, and its new ECDSA P-256 key.
func NewCert(ca *x509.Certificate, caKey *ecdsa.PrivateKey, spec CertSpec) ([]byte, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("%s key: %w", spec.Role, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: spec.CommonName, Organization: []string{"scanplane"}, OrganizationalUnit: []string{spec.Role}},
		NotBefore:    spec.NotBefore,
		NotAfter:     spec.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     spec.DNSNames,
		IPAddresses:  spec.IPs,
		URIs:         spec.URIs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("%s certificate: %w", spec.Role, err)
	}
	return der, key, nil
}

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("certificate serial: %w", err)
	}
	return s, nil
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func pemKey(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// WriteCertFiles writes a certificate (DER) and key as PEM files
// certPath (0644) and keyPath (0600); tests use it to make certificates
// the init does not (another CA's, expired ones).
func WriteCertFiles(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	kp, err := pemKey(key)
	if err != nil {
		return err
	}
	if err := writeFileMode(keyPath, kp, 0o600); err != nil {
		return err
	}
	return writeFileMode(certPath, pemCert(der), 0o644)
}

// RoleSubject is the subject distinguished name (RFC 4514, as
// pkix.Name.String writes it) of role's certificate made by Init:
// the embedded NATS server maps a client certificate with it to role's
// user and permissions.
func RoleSubject(role string) string {
	return pkix.Name{CommonName: "scanplane " + role, Organization: []string{"scanplane"}, OrganizationalUnit: []string{role}}.String()
}

// writeHTTPToken writes a new random token to dir/http.token (0600).
func writeHTTPToken(dir string) error {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("http token: %w", err)
	}
	return writeFileMode(filepath.Join(dir, HTTPTokenFile), []byte(hex.EncodeToString(b[:])+"\n"), 0o600)
}

// HTTPClient is an HTTP client for the endpoints of processes started
// with the secrets directory dir: it presents role's certificate and
// trusts the cluster CA. dir "": a plain-text client.
func HTTPClient(dir, role string) (*http.Client, error) {
	if dir == "" {
		return &http.Client{}, nil
	}
	cfg, err := RoleTLS(dir, role, "--secrets")
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		MinVersion: tls.VersionTLS12, Certificates: cfg.Certificates, RootCAs: cfg.RootCAs}}}, nil
}
