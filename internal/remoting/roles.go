package remoting

import (
	"crypto/x509"
	"fmt"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/scanplane/scanplane/internal/grants"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Role is what a certificate of the cluster CA lets its holder send on the
// actor remote: the role named by the certificate subject's organizational
// unit (secrets.Init writes OU=coordinator, scanserver, client or
// admin). A Roles value is a set of them.
type Role uint8

const (
	RoleCoordinator Role = 1 << iota
	RoleScanServer
	RoleClient
	RoleAdmin

	// AllRoles is the set of every role: a peer on a plain-text remote,
	// which has no certificate, holds all of them.
	AllRoles = RoleCoordinator | RoleScanServer | RoleClient | RoleAdmin
)

var roleNames = []struct {
	r    Role
	name string
}{{RoleCoordinator, "coordinator"}, {RoleScanServer, "scanserver"}, {RoleClient, "client"}, {RoleAdmin, "admin"}}

// String names the roles of r, separated by "|" ("none" for none).
func (r Role) String() string {
	var names []string
	for _, n := range roleNames {
		if r&n.r != 0 {
			names = append(names, n.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "|")
}

// scanServerCN is the common name prefix of a per-host scan-server
// certificate: "scanplane scanserver HOST" (secrets.Init with
// ServerHosts). The role-wide scan-server certificate's common name is
// "scanplane scanserver", bound to no host.
const scanServerCN = "scanplane scanserver "

// Identity is who the peer of an inbound stream is: the role of its
// certificate and, for a per-host scan-server certificate, the host it
// names. On a plain-text remote (no certificate) Role is AllRoles and
// Secure is false.
type Identity struct {
	Role   Role
	Host   string // the scan-server host the certificate is bound to; "" = any
	Secure bool   // the peer presented a verified certificate
	// Grant is what a client or admin certificate may scan (its grant
	// URI, grants.FromCertificate); every table for the other roles and
	// on a plain-text remote.
	Grant grants.Grant
	cert  *x509.Certificate
}

// IdentityOf reads the identity from a verified peer certificate: its
// subject must name exactly one role in its organizational units.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	var role Role
	for _, ou := range cert.Subject.OrganizationalUnit {
		for _, n := range roleNames {
			if ou == n.name {
				role |= n.r
			}
		}
	}
	switch role {
	case RoleCoordinator, RoleScanServer, RoleClient, RoleAdmin:
	case 0:
		return Identity{}, fmt.Errorf("certificate %q names no role (organizational unit %q; want one of coordinator, scanserver, client, admin)",
			cert.Subject.String(), cert.Subject.OrganizationalUnit)
	default:
		return Identity{}, fmt.Errorf("certificate %q names several roles (organizational unit %q)", cert.Subject.String(), cert.Subject.OrganizationalUnit)
	}
	id := Identity{Role: role, Secure: true, Grant: grants.All(""), cert: cert}
	if role == RoleClient || role == RoleAdmin {
		g, err := grants.FromCertificate(cert)
		if err != nil {
			return Identity{}, err
		}
		id.Grant = g
	}
	if h, ok := strings.CutPrefix(cert.Subject.CommonName, scanServerCN); ok && role == RoleScanServer {
		id.Host = h
	}
	return id, nil
}

// Rule is what the guard lets through of one message type. Every field
// name is a top-level field of the message; the names are resolved to
// field numbers through the protobuf registry when a Guard is made.
type Rule struct {
	// Senders are the roles that may send the message.
	Senders Role
	// Own are fields of type scanplane.internal.v1.Pid that name the sender
	// itself (where replies go): their address must be the address the
	// sender's stream is bound to.
	Own []string
	// Relayed are fields of type scanplane.internal.v1.Pid that a coordinator
	// relays from a client (ScanRequest.client forwarded between
	// coordinators, StartScan.client): from a coordinator they are not
	// checked, from any other role they are checked as Own.
	Relayed []string
	// Server is a string field holding a scan-server id, which is
	// "ADDRESS/N" with ADDRESS the scan-server process's actor address:
	// from a scan server, it must name one of that peer's own servers.
	Server string
	// Host is a string field naming a scan-server host: from a per-host
	// scan-server certificate it must be that host.
	Host string
	// Tag: the guard writes the sender's bound address into the
	// envelope's header (PeerAddressHeader), for the receiving actor to
	// check the message against the attempt it names.
	Tag bool
	// Grant is a scanplane.internal.v1.TabletRef field whose table a peer's grant
	// must allow (Identity.Grant). From a peer whose grant leaves out some
	// table, the Guard writes the grant into the envelope's header
	// (GrantHeader) and refuses (ReasonGrant) a message for a table the
	// grant does not allow unless its target is GrantAnswerer, the actor
	// that answers it with a permission error.
	Grant         string
	GrantAnswerer string
}

// ScanEntry is the actor id of a coordinator's router
// (wire.RouterName), where scan requests enter: it answers a request for
// a table outside the sender's grant with a permission error.
const ScanEntry = "scanplane-router"

// GrantHeader is the message header in which the Guard hands the
// receiving actor the grant (grants.Grant.URI) of a secured peer whose
// grant leaves out some table, for messages whose Rule has Grant. As
// PeerAddressHeader, a header of that name from the network is refused;
// a message without it comes from a peer that may scan every table, a
// plain-text remote or this process.
const GrantHeader = "scanplane-grant"

// PeerGrant is the grant of the message c is handling (GrantHeader), and
// false when it has none: then the sender may scan every table.
func PeerGrant(c actor.Context) (grants.Grant, bool, error) {
	h := c.MessageHeader()
	if h == nil {
		return grants.Grant{}, false, nil
	}
	v := h.Get(GrantHeader)
	if v == "" {
		return grants.Grant{}, false, nil
	}
	g, err := grants.ParseURI(v)
	return g, true, err
}

// PeerAddressHeader is the message header in which the guard hands the
// receiving actor the address a secured peer's stream is bound to (for
// messages whose Rule has Tag). A header of that name from the network is
// refused, so an actor that finds it knows the guard wrote it; a local
// message, or one from a plain-text remote, has none.
const PeerAddressHeader = "scanplane-peer-address"

// PeerAddress is the PeerAddressHeader of the message c is handling: the
// address of the secured peer it came from, or "" for a local message or
// one from a plain-text remote.
func PeerAddress(c actor.Context) string {
	if h := c.MessageHeader(); h != nil {
		return h.Get(PeerAddressHeader)
	}
	return ""
}

// Who may send what on the actor remote: the role table. A message type
// that is not listed, or lists no role, is refused from every peer (also
// on a plain-text remote): that covers protoactor's system and control
// messages, actor.Stop, actor.PoisonPill, actor.Watch, actor.Unwatch,
// actor.Terminated and actor.Touch, which no scanplane process sends to
// another, remote.ActorPidRequest (remote spawning), and the messages that
// travel only on NATS (Heartbeat, LoadSignal). docs/security.md explains
// each line; roles_test.go checks that every message of
// messages/scanplane.proto is listed.
var rules = map[string]Rule{
	// client (or admin) → coordinator: router or tablet actor; a
	// coordinator forwards a request to the tablet's owner.
	// A client's grant limits the tables it may scan (Grant).
	"scanplane.internal.v1.ScanRequest": {Senders: RoleClient | RoleAdmin | RoleCoordinator, Relayed: []string{"client"}, Grant: "tablet", GrantAnswerer: ScanEntry},
	"scanplane.internal.v1.ScanDone":    {Senders: RoleClient | RoleAdmin | RoleCoordinator},
	// A coordinator asks its peers for their counters (/status).
	"scanplane.internal.v1.StatusRequest":  {Senders: RoleClient | RoleAdmin | RoleCoordinator},
	"scanplane.internal.v1.RouteRequest":   {Senders: RoleClient | RoleAdmin},
	"scanplane.internal.v1.ReloadProfiles": {Senders: RoleAdmin},

	// coordinator → client
	"scanplane.internal.v1.ScanRouted": {Senders: RoleCoordinator, Own: []string{"tablet_actor"}},
	"scanplane.internal.v1.ScanError":  {Senders: RoleCoordinator},
	// the tablet actor's keep-alive of a request without data
	"scanplane.internal.v1.ScanProgress": {Senders: RoleCoordinator},
	"scanplane.internal.v1.StatusReply":  {Senders: RoleCoordinator},
	"scanplane.internal.v1.RouteReply":   {Senders: RoleCoordinator},
	"scanplane.internal.v1.ReloadReply":  {Senders: RoleCoordinator},

	// coordinator (tablet actor, host actor) → scan server
	"scanplane.internal.v1.StartScan": {Senders: RoleCoordinator, Own: []string{"tablet_actor"}, Relayed: []string{"client"}},
	"scanplane.internal.v1.Probe":     {Senders: RoleCoordinator, Own: []string{"reply_to"}},

	// scan server → coordinator (tablet actor) and client
	"scanplane.internal.v1.ScanStarted":  {Senders: RoleScanServer, Server: "server"},
	"scanplane.internal.v1.Busy":         {Senders: RoleScanServer, Server: "server", Host: "host"},
	"scanplane.internal.v1.RowBatch":     {Senders: RoleScanServer, Server: "server", Own: []string{"server_pid"}},
	"scanplane.internal.v1.ProbeReply":   {Senders: RoleScanServer, Server: "server"},
	"scanplane.internal.v1.ScanFinished": {Senders: RoleScanServer | RoleCoordinator, Server: "server"},

	// client → scan server (flow control; cancelling its own streams),
	// tablet actor → scan server (cancelling attempts; the host actor's
	// connection probe, an empty Cancel), scan server → host actor (the
	// probe's answer). A coordinator acknowledges batches too: its public
	// API scans through a client on the coordinator's own actor system.
	// The scan server takes a Cancel or BatchAck of an attempt only from
	// that attempt's client or tablet actor (Tag).
	"scanplane.internal.v1.BatchAck": {Senders: RoleClient | RoleAdmin | RoleCoordinator, Tag: true},
	"scanplane.internal.v1.Cancel":   {Senders: RoleClient | RoleAdmin | RoleCoordinator | RoleScanServer, Tag: true},

	// client.Ping: a Row to a host agent's echo actor, and its answer.
	"scanplane.internal.v1.Row": {Senders: RoleClient | RoleAdmin | RoleScanServer},

	// NATS only (heartbeats and load signals are published with per-host
	// permissions), or parts of other messages: never on the remote.
	"scanplane.internal.v1.Heartbeat":       {},
	"scanplane.internal.v1.CoordinatorList": {},
	"scanplane.internal.v1.LoadSignal":      {},
	"scanplane.internal.v1.Pid":             {},
	"scanplane.internal.v1.KeyRange":        {},
	"scanplane.internal.v1.TabletRef":       {},
	"scanplane.internal.v1.FileRef":         {},
	"scanplane.internal.v1.ManifestRef":     {},
	"scanplane.internal.v1.BlockProof":      {},
	"scanplane.internal.v1.TabletMeta":      {},
	"scanplane.internal.v1.TableMeta":       {},
	"scanplane.internal.v1.ClusterInfo":     {},
	"scanplane.internal.v1.AttemptInfo":     {},
	"scanplane.internal.v1.ServerStatus":    {},
	"scanplane.internal.v1.TableStatus":     {},

	// protoactor: cluster gossip between coordinators, and the answer
	// of a process to a request for an actor it does not have.
	"cluster.GossipRequest":    {Senders: RoleCoordinator},
	"cluster.GossipResponse":   {Senders: RoleCoordinator},
	"actor.DeadLetterResponse": {Senders: RoleCoordinator | RoleScanServer},
}

// Rules returns a copy of the role table, by message type full name.
func Rules() map[string]Rule {
	out := make(map[string]Rule, len(rules))
	for k, v := range rules {
		out[k] = v
	}
	return out
}

// compiledRule is a Rule with its fields resolved to numbers.
type compiledRule struct {
	Rule
	own, relayed []pidField
	server, host protoreflect.FieldNumber
	// grant, grantTable: the TabletRef field of Rule.Grant and its table.
	grant, grantTable protoreflect.FieldNumber
	checksPayload     bool
}

// pidField is a scanplane.internal.v1.Pid field of a message.
type pidField struct {
	num  protoreflect.FieldNumber
	name string
}

// compileRules resolves every rule's field names in the protobuf
// registry. A rule of a type the registry does not have, or naming a
// field its message lacks or of the wrong type, is left out: that type is
// then refused (a renamed field fails closed; roles_test.go fails first).
func compileRules(rs map[string]Rule) (map[string]*compiledRule, []error) {
	out := make(map[string]*compiledRule, len(rs))
	var errs []error
	for name, r := range rs {
		if r.Senders == 0 {
			continue
		}
		mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		c, err := compileRule(mt.Descriptor(), r)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		out[name] = c
	}
	return out, errs
}

func compileRule(md protoreflect.MessageDescriptor, r Rule) (*compiledRule, error) {
	c := &compiledRule{Rule: r}
	field := func(name string, kind protoreflect.Kind, msg protoreflect.FullName) (protoreflect.FieldNumber, error) {
		f := md.Fields().ByName(protoreflect.Name(name))
		switch {
		case f == nil:
			return 0, fmt.Errorf("no field %q", name)
		case f.Kind() != kind || f.Cardinality() == protoreflect.Repeated:
			return 0, fmt.Errorf("field %q is %v %v, want a single %v", name, f.Cardinality(), f.Kind(), kind)
		case msg != "" && f.Message().FullName() != msg:
			return 0, fmt.Errorf("field %q is a %s, want %s", name, f.Message().FullName(), msg)
		}
		return f.Number(), nil
	}
	for _, n := range r.Own {
		num, err := field(n, protoreflect.MessageKind, pidType)
		if err != nil {
			return nil, err
		}
		c.own = append(c.own, pidField{num, n})
	}
	for _, n := range r.Relayed {
		num, err := field(n, protoreflect.MessageKind, pidType)
		if err != nil {
			return nil, err
		}
		c.relayed = append(c.relayed, pidField{num, n})
	}
	var err error
	if r.Server != "" {
		if c.server, err = field(r.Server, protoreflect.StringKind, ""); err != nil {
			return nil, err
		}
	}
	if r.Host != "" {
		if c.host, err = field(r.Host, protoreflect.StringKind, ""); err != nil {
			return nil, err
		}
	}
	if r.Grant != "" {
		if c.grant, err = field(r.Grant, protoreflect.MessageKind, tabletRefType); err != nil {
			return nil, err
		}
		c.grantTable = md.Fields().ByName(protoreflect.Name(r.Grant)).Message().Fields().ByName("table").Number()
	}
	c.checksPayload = len(c.own)+len(c.relayed) > 0 || c.server != 0 || c.host != 0
	return c, nil
}

// tabletRefType is the wire tablet reference, whose field "table" a
// Rule.Grant checks.
const tabletRefType protoreflect.FullName = "scanplane.internal.v1.TabletRef"

// pidType is the wire PID message; its field 1 is the address.
const (
	pidType    protoreflect.FullName    = "scanplane.internal.v1.Pid"
	pidAddress protoreflect.FieldNumber = 1
)
