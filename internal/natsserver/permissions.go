package natsserver

import (
	"errors"
	"fmt"
	"sort"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/scanplane/scanplane/bus"
)

// The roles a certificate maps to (ServerConfig.Users). Each is a NATS
// user with publish and subscribe permissions that the server enforces:
// a message a user may not publish is dropped by the server, which
// answers the publisher with a "Permissions Violation" error (nats.go
// ErrPermissionViolation), whoever else listens.
const (
	// RoleCoordinator may publish and subscribe to everything: it runs
	// the embedded server, creates the buckets, renews its lease and
	// publishes load signals of its own.
	RoleCoordinator = "coordinator"
	// RoleAdmin may publish and subscribe to everything: ingest creates
	// the buckets and writes blocks and metadata.
	RoleAdmin = "admin"
	// RoleScanServer may publish heartbeats and busy and timeout signals
	// (of any host, or of CertUser.Host's only: the subjects carry the
	// host), read the blocks and metadata buckets, subscribe to its own
	// reply inbox (bus.InboxPrefix), and nothing else: it cannot write a
	// block, a table's metadata or a lease, nor read another user's
	// replies.
	RoleScanServer = "scanserver"
	// RoleClient may read the metadata and lease buckets (the tables and
	// the live coordinators), and subscribe to its own reply inbox, and
	// nothing else: it cannot publish a heartbeat or a signal, nor write
	// or read a block, nor list the block keys.
	RoleClient = "client"
)

// CertUser maps the subject of a client certificate to a role.
type CertUser struct {
	// Subject is the certificate's subject distinguished name as
	// RFC 4514 writes it (crypto/x509's pkix.Name.String), e.g.
	// "CN=scanplane client,OU=client,O=scanplane". It also names the
	// user's reply inbox (bus.InboxPrefix), which bus.Connect derives from the
	// certificate's subject the same way: written otherwise (another
	// order of attributes), the certificate still maps to the user but
	// its connections cannot subscribe to their own replies.
	Subject string
	// Role is one of RoleCoordinator, RoleAdmin, RoleScanServer,
	// RoleClient.
	Role string
	// Host, for RoleScanServer only, narrows the heartbeats and signals
	// the user may publish to that host's subjects
	// (scanplane.v1.hb.<bus.Token(Host)>.>, likewise busy and timeout).
	// Empty = any host's.
	Host string
}

// ErrUnknownRole is wrapped by the error of a CertUser with a role not
// listed above.
var ErrUnknownRole = errors.New("natsserver: unknown role")

// UserPermissions returns the NATS permissions of u for the buckets
// named by cfg (BlocksBucket, MetaBucket) and leases (the lease bucket):
// nil (everything) for the coordinator and admin roles. u.Subject names
// the user's inbox (bus.InboxPrefix); u.Host, for a scan server, narrows its
// heartbeats and signals to that host's.
//
// No role may answer requests of others (nats-server's allow_responses):
// every request a restricted user makes is a JetStream API call, which
// the server itself answers, and none serves requests on NATS.
func UserPermissions(u CertUser, cfg bus.Config, leases bus.LeaseConfig) (*server.Permissions, error) {
	switch u.Role {
	case RoleCoordinator, RoleAdmin:
		return nil, nil
	case RoleScanServer:
		tail := ">"
		if u.Host != "" {
			tail = bus.Token(u.Host) + ".>"
		}
		pub := []string{bus.HeartbeatPrefix + tail, bus.BusyPrefix + tail, bus.TimeoutPrefix + tail}
		pub = append(pub, kvRead(cfg.BlocksBucket)...)
		pub = append(pub, kvRead(cfg.MetaBucket)...)
		return perms(u.Subject, pub), nil
	case RoleClient:
		// Nothing of the blocks bucket, not even its stream info (which
		// lists the block keys to a subjects filter): a client opens the
		// metadata bucket read-only (Config.ReadOnly).
		pub := append(kvRead(cfg.MetaBucket), kvRead(leases.Bucket)...)
		// Asking the coordinators who is there (core NATS, Discover).
		pub = append(pub, bus.DiscoverSubject)
		return perms(u.Subject, pub), nil
	}
	return nil, fmt.Errorf("%w %q: want %s, %s, %s or %s", ErrUnknownRole, u.Role, RoleCoordinator, RoleAdmin, RoleScanServer, RoleClient)
}

// perms allows publishing on pub and subscribing to the user's own reply
// inboxes (the answers of its JetStream API requests, the deliveries of
// its KV watches; see bus.InboxPrefix) and to metadata changes.
func perms(subject string, pub []string) *server.Permissions {
	sort.Strings(pub)
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: []string{bus.InboxPrefix(subject) + ".>", bus.MetaChangedSubject}},
	}
}

// kvRead are the JetStream API subjects that reading a KV bucket needs:
// the stream's info (binding the bucket), direct and stream message gets
// (Get), the ordered consumers of a watch and their flow-control
// replies. Not among them: creating or updating the stream, publishing
// to $KV.<bucket>.> (Put, Delete), purging.
//
// Consumers: nats.go creates a watch's ordered consumer with
// $JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>, the filter being
// the watched keys' subjects ($KV.<bucket>.<keys>), so that form is
// allowed with a filter on the bucket's keys only; the legacy forms
// ($JS.API.CONSUMER.CREATE.<stream> for an ephemeral,
// $JS.API.CONSUMER.DURABLE.CREATE.<stream>.<name>) and an unfiltered
// create are not. The allowed form still takes a durable in its body:
// the embedded server's consumer guard deletes that (consumerguard.go).
// Info and delete by name stay: nats.go asks after and deletes its own
// ordered consumer (a watch's Stop waits for the delete), and a
// consumer's name is random and reaches only its creator's inbox.
func kvRead(bucket string) []string {
	st := bus.KVStreamPrefix + bucket
	return []string{
		"$JS.API.STREAM.INFO." + st,
		"$JS.API.DIRECT.GET." + st,
		"$JS.API.DIRECT.GET." + st + ".>",
		"$JS.API.STREAM.MSG.GET." + st,
		"$JS.API.CONSUMER.CREATE." + st + ".*." + bus.KVSubjectPrefix + bucket + ".>",
		"$JS.API.CONSUMER.INFO." + st + ".>",
		"$JS.API.CONSUMER.DELETE." + st + ".>",
		"$JS.FC." + st + ".>",
	}
}

// natsUsers turns cfg.Users into the server's users, each with its role's
// permissions for the default bucket names.
func natsUsers(users []CertUser) ([]*server.User, []*server.Account, error) {
	data, edge, err := userAccounts(users)
	if err != nil {
		return nil, nil, err
	}
	var out []*server.User
	seen := map[string]bool{}
	for i, u := range users {
		if u.Subject == "" {
			return nil, nil, fmt.Errorf("natsserver: ServerConfig.Users[%d].Subject is empty", i)
		}
		if seen[u.Subject] {
			return nil, nil, fmt.Errorf("natsserver: ServerConfig.Users[%d].Subject %q is listed twice", i, u.Subject)
		}
		seen[u.Subject] = true
		if u.Host != "" && u.Role != RoleScanServer {
			return nil, nil, fmt.Errorf("natsserver: ServerConfig.Users[%d].Host %q is for role %s only", i, u.Host, RoleScanServer)
		}
		p, err := UserPermissions(u, bus.DefaultConfig(), bus.DefaultLeaseConfig())
		if err != nil {
			return nil, nil, fmt.Errorf("natsserver: ServerConfig.Users[%d].Role: %w", i, err)
		}
		acc := data
		if edgeRole(u.Role) {
			acc = edge
		}
		out = append(out, &server.User{Username: u.Subject, Permissions: p, Account: acc})
	}
	return out, []*server.Account{data, edge}, nil
}
