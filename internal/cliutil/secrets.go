package cliutil

import (
	"crypto/tls"
	"os"

	"github.com/scanplane/scanplane/internal/secrets"
)

// SecretsEnv is the environment variable that --secrets defaults to.
const SecretsEnv = "SCANPLANE_SECRETS"

// SecretsUsage is the usage text of a --secrets flag.
const SecretsUsage = "secrets directory `DIR` made by scanctl secrets init (default $" + SecretsEnv + "): TLS with the cluster CA and this process's role certificate on every connection and listener; empty = plain text"

// SecretsDir is the value of a --secrets flag, or $SCANPLANE_SECRETS when
// the flag is empty.
func SecretsDir(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	return os.Getenv(SecretsEnv)
}

// CheckSecretsDir is secrets.CheckDir for the directory of a --secrets
// flag: one line naming the file when a process must not use dir.
func CheckSecretsDir(dir string) error { return secrets.CheckDir(dir, "--secrets") }

// RemoteTLS is secrets.RoleTLS for the directory of a --secrets flag:
// role's certificate and the CA as the mutual TLS configuration of an
// actor remote; errors name the flag and the file.
func RemoteTLS(dir, role string) (*tls.Config, error) {
	return secrets.RoleTLS(dir, role, "--secrets")
}
