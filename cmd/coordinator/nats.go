package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/natsserver"
	"github.com/scanplane/scanplane/internal/secrets"
)

// natsSetup turns the NATS flags into the embedded server's configuration
// (nil with an external --nats) and the JetStream replica count of the
// buckets this coordinator creates. replicasSet says whether --replicas
// was given; without it the count is 3 for an embedded node clustered
// with at least two other nodes' routes (3+ nodes), else 1. When the
// replicas are as many as the nodes the routes name, every node answers
// the direct gets of the blocks from its own replica
// (natsserver.ServerConfig.LocalDirectGets). Errors name the flag.
func natsSetup(o options, replicasSet bool) (*natsserver.ServerConfig, int, error) {
	if replicasSet && (o.replicas < 1 || o.replicas > 5) {
		return nil, 0, fmt.Errorf("--replicas %d: want 1..5 (and at most the number of NATS nodes)", o.replicas)
	}
	replicas := 1
	if replicasSet {
		replicas = o.replicas
	}
	if o.natsURL != "" {
		for _, f := range []struct{ name, val string }{{"--nats-cluster", o.natsCluster}, {"--nats-routes", o.natsRoutes}, {"--nats-name", o.natsName}} {
			if f.val != "" {
				return nil, 0, fmt.Errorf("%s is for the embedded NATS server and cannot be used with --nats %s", f.name, o.natsURL)
			}
		}
		return nil, replicas, nil
	}
	sc := natsserver.DefaultServerConfig()
	host, port, err := splitHostPort(o.natsListen)
	if err != nil {
		return nil, 0, fmt.Errorf("--nats-listen %q: %v", o.natsListen, err)
	}
	sc.Host, sc.Port = host, port
	if port == 0 {
		sc.Port = -1
	}
	sc.StoreDir = filepath.Join(o.data, "nats")
	sc.Name = o.natsName
	if o.natsCluster == "" {
		if o.natsRoutes != "" {
			return nil, 0, errors.New("--nats-routes needs --nats-cluster (the route listener of this node)")
		}
		if err := sc.Validate(); err != nil {
			return nil, 0, flagErr(err)
		}
		return &sc, replicas, nil
	}
	sc.ClusterListen = o.natsCluster
	for _, r := range strings.Split(o.natsRoutes, ",") {
		if r = strings.TrimSpace(r); r != "" {
			sc.Routes = append(sc.Routes, r)
		}
	}
	if err := sc.Validate(); err != nil {
		return nil, 0, flagErr(err)
	}
	others := otherRoutes(o.natsCluster, sc.Routes)
	if !replicasSet && others >= 2 {
		replicas = 3
	}
	if replicas > others {
		// Every node holds a replica of the blocks: each answers the
		// block reads of its own clients from its own.
		sc.LocalDirectGets = []string{"KV_" + bus.DefaultConfig().BlocksBucket}
	}
	return &sc, replicas, nil
}

// flagErr renames the ServerConfig fields in a validation error after the
// flags that set them.
func flagErr(err error) error {
	msg := strings.NewReplacer(
		"natsserver: ServerConfig.ClusterListen", "--nats-cluster",
		"natsserver: ServerConfig.Routes", "--nats-routes",
		"ServerConfig.Routes", "--nats-routes",
		"natsserver: ServerConfig.Name", "--nats-name",
		"ServerConfig.Port", "--nats-listen port",
		"ServerConfig.ClusterListen", "--nats-cluster",
	).Replace(err.Error())
	return errors.New(msg)
}

// otherRoutes counts the distinct routes that are not this node's own
// route listener.
func otherRoutes(self string, routes []string) int {
	seen := map[string]bool{self: true}
	n := 0
	for _, r := range routes {
		u, err := url.Parse(r)
		if err != nil {
			continue
		}
		hp := net.JoinHostPort(u.Hostname(), u.Port())
		if !seen[hp] {
			seen[hp] = true
			n++
		}
	}
	return n
}

// jetStreamWait bounds how long a clustered coordinator waits at start for
// a majority of the NATS nodes (JetStream's metadata leader).
const jetStreamWait = 2 * time.Minute

// natsUsers are the users of the embedded NATS server with --secrets DIR:
// each role's certificate subject mapped to its role; when DIR has
// per-host scan server certificates (secrets init --server-hosts), those
// instead of scanserver.crt, each held to its own host's subjects.
func natsUsers(dir string) ([]natsserver.CertUser, error) {
	hosts, err := secrets.ServerHosts(dir)
	if err != nil {
		return nil, err
	}
	var users []natsserver.CertUser
	for _, r := range secrets.Roles {
		if r == natsserver.RoleScanServer && len(hosts) > 0 {
			continue
		}
		users = append(users, natsserver.CertUser{Subject: secrets.RoleSubject(r), Role: r})
	}
	for _, h := range hosts {
		users = append(users, natsserver.CertUser{Subject: secrets.HostSubject(h), Role: natsserver.RoleScanServer, Host: h})
	}
	return users, nil
}
