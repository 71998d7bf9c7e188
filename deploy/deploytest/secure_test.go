package deploytest

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/natsserver"
	"github.com/scanplane/scanplane/internal/secrets"
)

// TestSecureNATSConfig: deploy/nats-server-secure.conf, read by
// nats-server's own parser with a real secrets directory in place of
// /etc/scanplane/secrets, requires TLS and client certificates on the
// client and route ports, maps certificates to users, and gives each
// role's certificate subject exactly the permissions natsserver.UserPermissions
// gives the embedded server (so the file and the code cannot drift), in
// the account the embedded server puts the role in.
func TestSecureNATSConfig(t *testing.T) {
	const path = "../nats-server-secure.conf"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	secDir := filepath.Join(t.TempDir(), "secrets")
	if err := secrets.Init(secDir, secrets.InitOptions{Hosts: []string{"n1", "n2", "n3"}}); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "nats-server.conf")
	if err := os.WriteFile(conf, []byte(strings.ReplaceAll(string(data), "/etc/scanplane/secrets", secDir)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NATS_SERVER_NAME", "n1")
	o, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if o.TLSConfig == nil || o.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert || !o.TLSMap {
		t.Errorf("client port: TLS %v, map %v; want TLS requiring a verified certificate, mapped to a user", o.TLSConfig != nil, o.TLSMap)
	}
	if o.Cluster.TLSConfig == nil || o.Cluster.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Errorf("route port: TLS %v; want TLS requiring a verified certificate", o.Cluster.TLSConfig != nil)
	}
	users := map[string]*server.User{}
	for _, u := range o.Users {
		users[u.Username] = u
	}
	if len(users) != 4 {
		t.Errorf("%d users, want the 4 roles", len(users))
	}
	for _, role := range []string{natsserver.RoleCoordinator, natsserver.RoleAdmin, natsserver.RoleScanServer, natsserver.RoleClient} {
		subj := secrets.RoleSubject(role)
		u := users[subj]
		if u == nil {
			t.Errorf("role %s: no user %q", role, subj)
			continue
		}
		// The data account holds the buckets and the roles that may do
		// everything; the edge account the restricted roles (see the
		// file's header).
		wantAccount := "SCANPLANE"
		if role == natsserver.RoleScanServer || role == natsserver.RoleClient {
			wantAccount = "EDGE"
		}
		if u.Account == nil || u.Account.Name != wantAccount {
			t.Errorf("role %s: account %v, want %s", role, u.Account, wantAccount)
		}
		want, err := natsserver.UserPermissions(natsserver.CertUser{Subject: subj, Role: role}, bus.DefaultConfig(), bus.DefaultLeaseConfig())
		if err != nil {
			t.Fatal(err)
		}
		if !samePermissions(u.Permissions, want) {
			t.Errorf("role %s: permissions in %s differ from natsserver.UserPermissions:\n file %s\n code %s", role, path, describe(u.Permissions), describe(want))
		}
	}
}

func samePermissions(a, b *server.Permissions) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	set := func(p *server.SubjectPermission) []string {
		if p == nil {
			return nil
		}
		l := slices.Clone(p.Allow)
		slices.Sort(l)
		return append(l, append([]string{"deny:"}, p.Deny...)...)
	}
	return slices.Equal(set(a.Publish), set(b.Publish)) && slices.Equal(set(a.Subscribe), set(b.Subscribe))
}

func describe(p *server.Permissions) string {
	if p == nil {
		return "everything"
	}
	s := func(sp *server.SubjectPermission) string {
		if sp == nil {
			return "-"
		}
		return strings.Join(sp.Allow, " ")
	}
	return "publish [" + s(p.Publish) + "] subscribe [" + s(p.Subscribe) + "]"
}
