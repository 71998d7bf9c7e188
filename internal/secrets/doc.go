// Package secrets writes and reads scanplane secrets directories. Init
// (`scanctl secrets init`) makes one: a cluster CA, a certificate and key
// per role and per scan-server host, the HTTP endpoints' bearer token,
// with the CA's key in a directory of its own. CheckDir refuses a
// directory a process must not use, and RoleTLS loads a role's
// certificate and the cluster CA into a mutual TLS configuration. The
// client library and every command use it.
package secrets
