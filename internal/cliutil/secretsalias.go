package cliutil

import (
	"crypto/ecdsa"
	"crypto/x509"

	"github.com/scanplane/scanplane/internal/secrets"
)

// The certificate authority lives in internal/secrets; these names
// forward to it for the tests of bus, which import cliutil.

// Roles is secrets.Roles.
var Roles = secrets.Roles

// SecretsOptions is secrets.InitOptions.
type SecretsOptions = secrets.InitOptions

// CertSpec is secrets.CertSpec.
type CertSpec = secrets.CertSpec

// InitSecrets is secrets.Init.
func InitSecrets(dir string, opts SecretsOptions) error { return secrets.Init(dir, opts) }

// DefaultCADir is secrets.DefaultCADir.
func DefaultCADir(dir string) string { return secrets.DefaultCADir(dir) }

// HostSubject is secrets.HostSubject.
func HostSubject(host string) string { return secrets.HostSubject(host) }

// RoleSubject is secrets.RoleSubject.
func RoleSubject(role string) string { return secrets.RoleSubject(role) }

// ServerRole is secrets.ServerRole.
func ServerRole(host string) string { return secrets.ServerRole(host) }

// ServerTLSRole is secrets.ServerTLSRole.
func ServerTLSRole(dir, host string) string { return secrets.ServerTLSRole(dir, host) }

// ServerHosts is secrets.ServerHosts.
func ServerHosts(dir string) ([]string, error) { return secrets.ServerHosts(dir) }

// NewCert is secrets.NewCert.
func NewCert(ca *x509.Certificate, caKey *ecdsa.PrivateKey, spec CertSpec) ([]byte, *ecdsa.PrivateKey, error) {
	return secrets.NewCert(ca, caKey, spec)
}

// WriteCertFiles is secrets.WriteCertFiles.
func WriteCertFiles(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	return secrets.WriteCertFiles(certPath, keyPath, der, key)
}
