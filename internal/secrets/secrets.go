package secrets

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Files of a secrets directory (made by scanctl secrets init) that the
// checks below name.
const (
	// CAKeyFile is the CA's private key, which belongs in the CA
	// directory (DefaultCADir), never in a secrets directory.
	CAKeyFile = "ca.key"
	// HTTPTokenFile holds the HTTP endpoints' bearer token.
	HTTPTokenFile = "http.token"
)

// DefaultCADir is where scanctl secrets init puts the CA's key for the
// secrets directory dir unless told otherwise: dir's sibling named after
// it with "-ca" appended (/etc/scanplane/secrets →
// /etc/scanplane/secrets-ca), so that two secrets directories side by
// side never share one.
func DefaultCADir(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return filepath.Clean(dir) + "-ca"
}

// CheckDir reports, in one line naming the file, why a process
// must not use the secrets directory dir: it holds the CA's private key
// (CAKeyFile), which no process needs and which signs certificates for
// any role; or a key (*.key) or the HTTP token that group or others may
// read (CockroachDB's rule: a key's mode may not exceed -rwx------; its
// later 0740 allowance for keys owned by root is not taken). RoleTLS
// checks it. A missing dir is left to the caller (RoleTLS then fails
// on its ca.crt). name is how errors call the directory: the flag that
// gave it ("--secrets") or "secrets directory".
func CheckDir(dir, name string) error {
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w (create the directory with `scanctl secrets init --dir %s`)", name, dir, err, dir)
	}
	for _, e := range ents {
		fn := e.Name()
		p := filepath.Join(dir, fn)
		if fn == CAKeyFile {
			return fmt.Errorf("%s %s: %s is the CA's private key, which no process needs and nobody on a node should hold: move it off the node (scanctl secrets init keeps it in %s)", name, dir, p, DefaultCADir(dir))
		}
		if !strings.HasSuffix(fn, ".key") && fn != HTTPTokenFile {
			continue
		}
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("%s %s: %w", name, dir, err)
		}
		if st.Mode().IsRegular() && st.Mode().Perm()&0o077 != 0 {
			return fmt.Errorf("%s %s: %s has mode %04o, readable by others; make it 0600 (chmod 600 %s)", name, dir, p, uint32(st.Mode().Perm()), p)
		}
	}
	return nil
}

// RoleTLS loads role's certificate (ROLE.crt, ROLE.key) and the CA
// (ca.crt) from the secrets directory dir into the mutual TLS
// configuration of an actor remote (SystemConfig.TLS) or a NATS
// connection: it presents role's certificate both when it accepts and
// when it dials, requires and verifies a peer certificate signed by the
// CA on accepted connections, and verifies the dialled peer's certificate
// against the CA (and its host). A directory CheckDir refuses is
// refused. Errors start with name and dir (see CheckDir) and name
// the file.
func RoleTLS(dir, role, name string) (*tls.Config, error) {
	if dir == "" {
		return nil, fmt.Errorf("%s is empty", name)
	}
	if err := CheckDir(dir, name); err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w (create the directory with `scanctl secrets init --dir %s`)", name, dir, err, dir)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s %s: ca.crt holds no PEM certificate", name, dir)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, role+".crt"), filepath.Join(dir, role+".key"))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %s certificate: %w", name, dir, role, err)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}, nil
}
