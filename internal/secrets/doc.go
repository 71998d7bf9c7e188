// Package secrets reads a scanplane secrets directory (made by `scanctl
// secrets init`): it refuses one a process must not use (CheckDir) and
// loads a role's certificate and the cluster CA into a mutual TLS
// configuration (RoleTLS). The client library and every command use it;
// writing secrets directories stays with scanctl (internal/cliutil).
package secrets
