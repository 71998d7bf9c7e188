package client

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/scanplane/scanplane/internal/secrets"
)

// TLSFromSecrets returns the Config.TLS of a client of a secured cluster
// from its secrets directory dir (made by `scanctl secrets init`): the
// client certificate (client.crt, client.key) and the cluster CA
// (ca.crt). It refuses a directory that holds the CA's private key or a
// key others may read, and names the file in its error.
func TLSFromSecrets(dir string) (*tls.Config, error) {
	return secrets.RoleTLS(dir, "client", "secrets directory")
}

// TLSFromCA returns the Config.TLS of an API client (NewAPI) that
// authenticates with a bearer token (Config.APIToken): it verifies the
// coordinators' certificates against the cluster CA of the PEM file
// caFile (a secrets directory's ca.crt) and presents no certificate.
func TLSFromCA(caFile string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("client: cluster CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("client: cluster CA %s holds no PEM certificate", caFile)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}, nil
}
