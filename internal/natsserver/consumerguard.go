package natsserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Consumers of restricted users (the scanserver and client roles).
//
// Reading a KV bucket needs consumers: a watch (and listing keys) is an
// ordered consumer, which nats.go creates through
// $JS.API.CONSUMER.CREATE.<stream>.<random name>.<filter>. A durable
// consumer is created through the same subject, with durable_name in the
// request's body; nats-server's permissions see subjects only, so they
// cannot allow the one and refuse the other. A durable created this way
// outlives its creator's connection, takes the stream's replicas (a Raft
// group each on a clustered server) and counts against the stream's
// consumer limit until someone deletes it.
//
// Per-account JetStream limits (JetStreamAccountLimits.MaxConsumers)
// would bound a user's consumers only if the user's account held the
// streams: a consumer created through another account's imported
// JetStream API counts against the account of the stream. The buckets
// live in the data account (accounts.go), and the restricted users reach
// them through the edge account's imports, so such a limit would bound
// the coordinators' and the clients' consumers together.
//
// So an embedded server with users (ServerConfig.Users) runs a guard:
// a connection of its own (in-process, with its own certificate, which
// must map to a coordinator or admin user) that follows JetStream's API
// audit advisories ($JS.EVENT.ADVISORY.API: each answered request with
// the requesting user, the subject and the answer) and deletes every
// consumer a restricted user created that is not what an ordered
// consumer is (restrictedConsumerRefusal). The consumer exists from its
// creation until the guard's delete, which follows the create's answer
// (it is a reaction, not a refusal: the create succeeds). Each
// node of a cluster runs a guard; the second delete of a consumer finds
// it gone. A consumer created while no guard is connected (every
// coordinator of the cluster down) is not deleted. An external
// nats-server (deploy/) runs no guard. The count of consumers of each
// stream stays bounded by nats-server's default of 1000 per stream.

// maxRestrictedInactive is the longest inactive threshold a restricted
// user's consumer may have: how long the server keeps a consumer nobody
// reads. An ordered consumer gets the server's default for ephemeral
// consumers, 5 s.
const maxRestrictedInactive = time.Minute

// restrictedConsumerRefusal says why a restricted user may not keep a
// consumer of config c, or "" when c is what nats.go's ordered consumer
// creates: ephemeral (no durable name), in memory, one replica, deleted
// by the server after at most maxRestrictedInactive without a reader,
// neither direct nor sourcing (internal consumers of mirrors and
// sources).
func restrictedConsumerRefusal(c *server.ConsumerConfig) string {
	switch {
	case c.Durable != "":
		return fmt.Sprintf("durable %q", c.Durable)
	case !c.MemoryStorage:
		return "file storage, not memory"
	case c.Replicas > 1:
		return fmt.Sprintf("%d replicas, not 1", c.Replicas)
	case c.InactiveThreshold <= 0 || c.InactiveThreshold > maxRestrictedInactive:
		return fmt.Sprintf("inactive threshold %s, not in (0, %s]", c.InactiveThreshold, maxRestrictedInactive)
	case c.Direct || c.Sourcing:
		return "a direct or sourcing consumer"
	}
	return ""
}

// consumerGuard deletes the consumers restricted users create that
// restrictedConsumerRefusal refuses.
type consumerGuard struct {
	nc         *nats.Conn
	js         jetstream.JetStream
	log        *slog.Logger
	restricted map[string]bool // subjects of the restricted users
	deleted    atomic.Uint64
}

// consumerGuardTimeout bounds the guard's connection and each delete.
const consumerGuardTimeout = 5 * time.Second

// startConsumerGuard connects to srv in-process with the certificate of
// cfg.TLS (the server's own) and follows the API audit advisories.
func startConsumerGuard(srv *server.Server, cfg ServerConfig, log *slog.Logger) (*consumerGuard, error) {
	g := &consumerGuard{log: log.With("component", "bus", "guard", "consumers"), restricted: map[string]bool{}}
	for _, u := range cfg.Users {
		if u.Role == RoleScanServer || u.Role == RoleClient {
			g.restricted[u.Subject] = true
		}
	}
	nc, err := connectInProcess(srv, cfg, "scanplane consumer guard", consumerGuardTimeout)
	if err != nil {
		return nil, fmt.Errorf("natsserver: consumer guard: %w", err)
	}
	g.nc = nc
	if g.js, err = jetstream.New(nc); err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsserver: consumer guard: %w", err)
	}
	if _, err := nc.Subscribe(server.JSAuditAdvisory, g.audit); err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsserver: consumer guard: subscribe %s: %w", server.JSAuditAdvisory, err)
	}
	if err := nc.Flush(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsserver: consumer guard: subscribe %s: %w", server.JSAuditAdvisory, err)
	}
	return g, nil
}

// audit handles one API audit advisory: a consumer created by a
// restricted user that it may not keep is deleted.
func (g *consumerGuard) audit(msg *nats.Msg) {
	var ev server.JSAPIAudit
	if err := json.Unmarshal(msg.Data, &ev); err != nil || ev.Client == nil || !g.restrictedClient(ev.Client) {
		return
	}
	if !strings.HasPrefix(ev.Subject, "$JS.API.CONSUMER.CREATE.") && !strings.HasPrefix(ev.Subject, "$JS.API.CONSUMER.DURABLE.CREATE.") {
		return
	}
	var resp server.JSApiConsumerCreateResponse
	if err := json.Unmarshal([]byte(ev.Response), &resp); err != nil || resp.Error != nil || resp.ConsumerInfo == nil || resp.Config == nil {
		return
	}
	why := restrictedConsumerRefusal(resp.Config)
	if why == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), consumerGuardTimeout)
	defer cancel()
	err := g.js.DeleteConsumer(ctx, resp.Stream, resp.Name)
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		g.log.Error("cannot delete a consumer a restricted user created", "user", ev.Client.User, "stream", resp.Stream, "consumer", resp.Name, "reason", why, "err", err)
		return
	}
	if err != nil {
		return // another node's guard was first
	}
	g.deleted.Add(1)
	g.log.Warn("deleted a consumer a restricted user may not keep", "user", ev.Client.User, "stream", resp.Stream, "consumer", resp.Name, "reason", why)
}

// restrictedClient reports whether the requester of an audited API call
// is a restricted user: one of the edge account's (whose requests cross a
// service import, so the advisory names the account, not the user), or a
// restricted user by name.
func (g *consumerGuard) restrictedClient(ci *server.ClientInfo) bool {
	return ci.Account == edgeAccount || g.restricted[ci.User]
}

// close ends the guard's connection.
func (g *consumerGuard) close() {
	if g != nil {
		g.nc.Close()
	}
}
