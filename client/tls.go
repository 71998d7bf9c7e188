package client

import (
	"crypto/tls"

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
