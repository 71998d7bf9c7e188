package natsserver

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/scanplane/scanplane/bus"
)

// A secured server with users (ServerConfig.Users) keeps two NATS
// accounts. The data account is nats-server's global account, as on a
// server without users: it holds the buckets, and the coordinator and
// admin users. The edge account holds the client and scan-server users
// and reaches the data account only through the imports below.
//
// The split is what keeps a request's reply subject harmless. Whoever
// answers a request — the JetStream API, a stream's direct get, a
// coordinator's discovery responder — publishes to the reply subject the
// requester chose, with the answerer's rights. Within one account a
// reply subject naming a bucket key ($KV.<bucket>.<key>) would store the
// answer in the bucket; a request that crosses a service import has its
// reply mapped to a subject of the edge account, where no stream listens.
//
// Imports of the edge account from the data account:
//   - services: the JetStream API ($JS.API.>, narrowed per user by its
//     publish permissions), flow-control replies of its watches
//     ($JS.FC.>), and bus.DiscoverSubject;
//   - streams: each edge user's own reply inbox (bus.InboxPrefix), where its
//     watches' consumers deliver, and bus.MetaChangedSubject.
//
// Imports of the data account from the edge account: the heartbeat,
// busy and timeout subjects the scan servers publish.
const (
	dataAccount = "$G"
	edgeAccount = "EDGE"
)

// streamedResponseWait bounds how long a request through the edge
// account's service imports may receive responses.
const streamedResponseWait = 10 * time.Second

// edgeRole reports whether users of role live in the edge account.
func edgeRole(role string) bool { return role == RoleClient || role == RoleScanServer }

// userAccounts builds the data and edge accounts for users, with the
// imports and exports above. The data account carries the name of
// nats-server's global account, so the server fills its global account
// with these exports and JetStream, and the streams stay where a server
// without users keeps them.
func userAccounts(users []CertUser) (data, edge *server.Account, err error) {
	var o server.Options
	// JetStream limits of an account are set only through configuration.
	if err := o.ProcessConfigString("accounts: { SCANPLANE_DATA: { jetstream: enabled }, " + edgeAccount + ": {} }"); err != nil {
		return nil, nil, fmt.Errorf("natsserver: accounts: %w", err)
	}
	for _, a := range o.Accounts {
		switch a.Name {
		case "SCANPLANE_DATA":
			data = a
		case edgeAccount:
			edge = a
		}
	}
	if data == nil || edge == nil {
		return nil, nil, fmt.Errorf("natsserver: accounts: configuration gave %d accounts, want the data and edge accounts", len(o.Accounts))
	}
	data.Name = dataAccount
	exportService := func(subj string) error {
		// Streamed: a request may have several responses (a batched
		// direct get answers with one message per key), each mapped
		// back to the requester until the threshold passes.
		if err := data.AddServiceExportWithResponse(subj, server.Streamed, []*server.Account{edge}); err != nil {
			return fmt.Errorf("natsserver: export service %s: %w", subj, err)
		}
		if err := data.SetServiceExportResponseThreshold(subj, streamedResponseWait); err != nil {
			return fmt.Errorf("natsserver: export service %s: %w", subj, err)
		}
		if err := edge.AddServiceImport(data, subj, subj); err != nil {
			return fmt.Errorf("natsserver: import service %s: %w", subj, err)
		}
		return nil
	}
	exportStream := func(from, to *server.Account, subj string) error {
		if err := from.AddStreamExport(subj, []*server.Account{to}); err != nil {
			return fmt.Errorf("natsserver: export stream %s: %w", subj, err)
		}
		if err := to.AddStreamImport(from, subj, ""); err != nil {
			return fmt.Errorf("natsserver: import stream %s: %w", subj, err)
		}
		return nil
	}
	for _, s := range []string{"$JS.API.>", "$JS.FC.>", bus.DiscoverSubject} {
		if err := exportService(s); err != nil {
			return nil, nil, err
		}
	}
	if err := exportStream(data, edge, bus.MetaChangedSubject); err != nil {
		return nil, nil, err
	}
	seen := map[string]bool{}
	for _, u := range users {
		p := bus.InboxPrefix(u.Subject)
		if !edgeRole(u.Role) || seen[p] {
			continue
		}
		seen[p] = true
		if err := exportStream(data, edge, p+".>"); err != nil {
			return nil, nil, err
		}
	}
	for _, p := range []string{bus.HeartbeatPrefix, bus.BusyPrefix, bus.TimeoutPrefix} {
		if err := exportStream(edge, data, p+">"); err != nil {
			return nil, nil, err
		}
	}
	return data, edge, nil
}
