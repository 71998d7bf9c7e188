package remoting

// Binding a secured peer to the addresses it may name.
//
// protoactor opens every stream with a ConnectRequest naming the dialling
// system's advertised address (ServerConnection.Address), and every PID
// that system makes (its actors, its futures) has that address. So the
// Guard binds each stream to the address of its ConnectRequest, once, and
// only if the peer certificate is valid for that address's host (an IP or
// DNS subject alternative name, as a dialler checks a server's). From
// then on every address the peer gives for itself must be that one: the
// envelope's Sender, and the PID fields of the message body the role
// table marks Own (reply-to fields: ScanRequest.client, StartScan.
// tablet_actor, Probe.reply_to, RowBatch.server_pid, ScanRouted.
// tablet_actor), and a scan server's id (ScanStarted.server, ...), which
// begins with its process's address. The body fields are read in the
// Guard with protowire, without unmarshalling the message (a RowBatch's
// rows are skipped in one step), taking for each field the value an
// unmarshal would: the last occurrence.
//
// What an actor must decide from its own state (a Cancel or BatchAck is
// for an attempt whose client or tablet actor is that peer) it decides
// from the bound address, which the Guard writes into the envelope's
// header for the message types marked Tag (PeerAddressHeader); the Guard
// refuses that header from the network, so a peer cannot forge it.
//
// A client or admin certificate may also limit the tables its holder may
// scan (a grant, internal/grants). For the message types whose Rule has
// Grant (ScanRequest), the Guard writes such a peer's grant into the
// envelope's header (GrantHeader, refused from the network likewise) and
// refuses a request for a table outside it unless it goes to the actor
// that answers it with a permission error (Rule.GrantAnswerer, the
// router): the paths that drop headers (dead letters, a stopping tablet
// actor's mailbox passing its messages on to the router) then never carry
// such a request.
//
// This needs no change to protoactor: the Guard sees the RemoteMessages
// before protoactor's reader does and edits a batch's envelope list and
// headers in place.

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/asynkron/protoactor-go/remote"
	"github.com/scanplane/scanplane/internal/grants"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// Reason is why the Guard (or an actor behind it, Guard.Refuse) refused a
// call, a stream or an envelope: the label of the refusal counter.
type Reason int

const (
	// ReasonUnserved: a gRPC method the remote does not serve.
	ReasonUnserved Reason = iota
	// ReasonMalformed: a batch whose indices point outside its tables,
	// or a message body that is not well-formed protobuf where the
	// Guard reads it.
	ReasonMalformed
	// ReasonNoRole: a certificate that names no role (the stream ends).
	ReasonNoRole
	// ReasonAddress: a ConnectRequest whose address the peer's
	// certificate is not valid for (the stream ends), or a second one
	// naming another address (dropped).
	ReasonAddress
	// ReasonUnbound: a secured peer's batch before its ConnectRequest.
	ReasonUnbound
	// ReasonType: a message type no role may send (or not protobuf).
	ReasonType
	// ReasonRole: a message type the peer's role may not send.
	ReasonRole
	// ReasonTarget: a target that is not an actor of this system, or
	// is its event stream.
	ReasonTarget
	// ReasonSender: an envelope sender on another address than the
	// peer's.
	ReasonSender
	// ReasonReplyTo: a reply-to PID in the body on another address than
	// the peer's.
	ReasonReplyTo
	// ReasonServer: a scan-server id in the body that is not one of the
	// peer's servers.
	ReasonServer
	// ReasonHost: a scan-server host in the body other than the one the
	// peer's certificate is bound to.
	ReasonHost
	// ReasonHeader: a header the Guard reserves for itself.
	ReasonHeader
	// ReasonAttempt: a Cancel or BatchAck for an attempt whose client or
	// tablet actor is not the peer (refused by the scan server).
	ReasonAttempt
	// ReasonHandshake: a connection whose TLS handshake failed (no
	// certificate, another CA, not TLS) or did not end within
	// RemoteLimits.HandshakeTimeout.
	ReasonHandshake
	// ReasonConnLimit: a connection accepted while RemoteLimits.MaxConns
	// were open (closed at once).
	ReasonConnLimit
	// ReasonSourceLimit: a connection accepted while
	// RemoteLimits.MaxConnsPerSource were open from its source (closed at
	// once).
	ReasonSourceLimit
	// ReasonGrant: a scan request for a table the peer's grant does not
	// allow, sent to another actor than the one that answers it
	// (Rule.GrantAnswerer), or answered by that one with a permission
	// error (Guard.Refuse).
	ReasonGrant

	numReasons
)

var reasonNames = [numReasons]string{
	ReasonUnserved:    "unserved method",
	ReasonMalformed:   "malformed message batch",
	ReasonNoRole:      "certificate without a role",
	ReasonAddress:     "address not the certificate's",
	ReasonUnbound:     "batch before connect request",
	ReasonType:        "message type not allowed",
	ReasonRole:        "message type not allowed for role",
	ReasonTarget:      "target not a local actor",
	ReasonSender:      "sender not the peer",
	ReasonReplyTo:     "reply-to not the peer",
	ReasonServer:      "server not the peer's",
	ReasonHost:        "host not the certificate's",
	ReasonHeader:      "reserved header",
	ReasonAttempt:     "not the attempt's peer",
	ReasonHandshake:   "connection: TLS handshake failed",
	ReasonConnLimit:   "connection: too many open",
	ReasonSourceLimit: "connection: too many open from its source",
	ReasonGrant:       "table not granted",
}

var reasonLabels = [numReasons]string{
	ReasonUnserved:    "unserved_method",
	ReasonMalformed:   "malformed",
	ReasonNoRole:      "no_role",
	ReasonAddress:     "address",
	ReasonUnbound:     "unbound",
	ReasonType:        "type",
	ReasonRole:        "role",
	ReasonTarget:      "target",
	ReasonSender:      "sender",
	ReasonReplyTo:     "reply_to",
	ReasonServer:      "server",
	ReasonHost:        "host",
	ReasonHeader:      "header",
	ReasonAttempt:     "attempt",
	ReasonHandshake:   "handshake",
	ReasonConnLimit:   "conn_limit",
	ReasonSourceLimit: "source_limit",
	ReasonGrant:       "grant",
}

// String is the reason as log lines say it ("remote: refused REASON").
func (r Reason) String() string { return reasonNames[r] }

// Label is the reason as the reason label of RefusedMetric says it.
func (r Reason) Label() string { return reasonLabels[r] }

// Reasons lists every reason.
func Reasons() []Reason {
	out := make([]Reason, numReasons)
	for i := range out {
		out[i] = Reason(i)
	}
	return out
}

// peerIdentity is the identity of the peer of ctx's stream: from its
// verified certificate, or AllRoles on a plain-text connection.
func peerIdentity(ctx context.Context) (Identity, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return Identity{Role: AllRoles, Grant: grants.All("")}, nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return Identity{Role: AllRoles, Grant: grants.All("")}, nil
	}
	if len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return Identity{}, fmt.Errorf("TLS peer without a verified certificate")
	}
	return IdentityOf(ti.State.VerifiedChains[0][0])
}

// bind handles a ConnectRequest: a secured stream is bound to its
// address if the certificate is valid for the address's host, else it
// ends (err). pass reports whether protoactor gets the request.
func (s *guardedStream) bind(c *remote.ConnectRequest) (pass bool, err error) {
	if !s.id.Secure {
		return true, nil
	}
	sc := c.GetServerConnection()
	if sc == nil {
		s.g.refuse(peerAddr(s.Context()), ReasonAddress, "role", s.id.Role, "err", "connect request without a server connection")
		return false, nil
	}
	addr := sc.GetAddress()
	if s.bound != "" {
		if addr != s.bound {
			s.g.refuse(peerAddr(s.Context()), ReasonAddress, "role", s.id.Role, "address", addr, "bound", s.bound, "err", "stream already bound to another address")
			return false, nil
		}
		return true, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err == nil && host == "" {
		err = fmt.Errorf("no host")
	}
	if err == nil {
		err = s.id.cert.VerifyHostname(host)
	}
	if err != nil {
		s.g.refuse(peerAddr(s.Context()), ReasonAddress, "role", s.id.Role, "address", addr, "err", err)
		return false, status.Errorf(codes.PermissionDenied, "connect request address %q: %v", addr, err)
	}
	s.bound = addr
	return true, nil
}

// filter drops the envelopes of b that g refuses from s's peer and
// reports whether any is left.
func (g *Guard) filter(s *guardedStream, b *remote.MessageBatch) bool {
	if s.id.Secure && s.bound == "" {
		g.refuse(peerAddr(s.Context()), ReasonUnbound, "role", s.id.Role, "envelopes", len(b.Envelopes))
		return false
	}
	kept := b.Envelopes[:0]
	for _, e := range b.Envelopes {
		if r, args := g.authorize(s, b, e); r >= 0 {
			g.refuse(peerAddr(s.Context()), r, append([]any{"role", s.id.Role, "address", s.bound, "type", b.TypeNames[e.TypeId], "target", b.Targets[e.Target].GetId()}, args...)...)
			continue
		}
		kept = append(kept, e)
	}
	clear(b.Envelopes[len(kept):])
	b.Envelopes = kept
	return len(kept) > 0
}

// authorize returns -1 if g lets e through, else the reason it refuses it
// and log arguments naming the bad value. It writes PeerAddressHeader
// into the envelopes it lets through whose rule has Tag.
func (g *Guard) authorize(s *guardedStream, b *remote.MessageBatch, e *remote.MessageEnvelope) (Reason, []any) {
	name := b.TypeNames[e.TypeId]
	rule := g.rules[name]
	if rule == nil {
		return ReasonType, nil
	}
	if e.SerializerId != 0 {
		return ReasonType, []any{"serializer", e.SerializerId}
	}
	if t := b.Targets[e.Target]; (g.sys != nil && t.GetAddress() != g.sys.Address()) || t.GetId() == eventStreamID {
		return ReasonTarget, []any{"target_address", t.GetAddress()}
	}
	if rule.Senders&s.id.Role == 0 {
		return ReasonRole, []any{"allowed", rule.Senders}
	}
	for _, h := range [...]string{PeerAddressHeader, GrantHeader} {
		if _, forged := e.GetMessageHeader().GetHeaderData()[h]; forged {
			return ReasonHeader, []any{"header", h}
		}
	}
	if !s.id.Secure {
		return -1, nil
	}
	if e.Sender > 0 {
		if a := b.Senders[e.Sender-1].GetAddress(); a != s.bound {
			return ReasonSender, []any{"sender", a}
		}
	}
	if rule.checksPayload {
		if r, args := s.checkPayload(rule, e.MessageData); r >= 0 {
			return r, args
		}
	}
	if rule.grant != 0 && s.id.Grant.Restricted() {
		table, _, err := nestedBytes(e.MessageData, rule.grant, rule.grantTable)
		if err != nil {
			return ReasonMalformed, []any{"field", rule.Grant, "err", err}
		}
		if !s.id.Grant.Allows(string(table)) && b.Targets[e.Target].GetId() != rule.GrantAnswerer {
			return ReasonGrant, []any{"principal", s.id.Grant.Principal(), "table", string(table)}
		}
		setHeader(e, GrantHeader, s.id.Grant.URI().String())
	}
	if rule.Tag {
		setHeader(e, PeerAddressHeader, s.bound)
	}
	return -1, nil
}

// setHeader sets header k of e to v.
func setHeader(e *remote.MessageEnvelope, k, v string) {
	if e.MessageHeader == nil || e.MessageHeader.HeaderData == nil {
		e.MessageHeader = &remote.MessageHeader{HeaderData: map[string]string{}}
	}
	e.MessageHeader.HeaderData[k] = v
}

// eventStreamID is the id under which every protoactor system registers
// its event stream: a message sent to it is published to the process's
// own subscribers (the coordinator's topology and dead-letter handlers).
const eventStreamID = "eventstream"

// checkPayload checks the body fields rule names against s's identity.
func (s *guardedStream) checkPayload(rule *compiledRule, data []byte) (Reason, []any) {
	for _, f := range rule.own {
		if r, args := s.checkPid(data, f); r >= 0 {
			return r, args
		}
	}
	if s.id.Role != RoleCoordinator {
		for _, f := range rule.relayed {
			if r, args := s.checkPid(data, f); r >= 0 {
				return r, args
			}
		}
	}
	if rule.server != 0 && s.id.Role == RoleScanServer {
		v, _, err := lastBytes(data, rule.server)
		if err != nil {
			return ReasonMalformed, []any{"field", rule.Server, "err", err}
		}
		if !strings.HasPrefix(string(v), s.bound+"/") {
			return ReasonServer, []any{"server", string(v)}
		}
	}
	if rule.host != 0 && s.id.Host != "" {
		v, _, err := lastBytes(data, rule.host)
		if err != nil {
			return ReasonMalformed, []any{"field", rule.Host, "err", err}
		}
		if string(v) != s.id.Host {
			return ReasonHost, []any{"host", string(v), "certificate_host", s.id.Host}
		}
	}
	return -1, nil
}

// checkPid checks that PID field f of data, if it has an address, has the
// bound one.
func (s *guardedStream) checkPid(data []byte, f pidField) (Reason, []any) {
	addr, ok, err := pidAddressOf(data, f.num)
	switch {
	case err != nil:
		return ReasonMalformed, []any{"field", f.name, "err", err}
	case ok && addr != s.bound:
		return ReasonReplyTo, []any{"field", f.name, "pid_address", addr}
	}
	return -1, nil
}

// lastBytes returns the last occurrence of the length-delimited field
// num in the message data (what an unmarshal keeps of a string field),
// and whether there is one. A field num of another wire type, or data
// that is not well-formed at the top level, is an error.
func lastBytes(data []byte, num protowire.Number) (v []byte, ok bool, err error) {
	err = eachField(data, func(n protowire.Number, typ protowire.Type, b []byte) error {
		if n != num {
			return nil
		}
		if typ != protowire.BytesType {
			return fmt.Errorf("field %d has wire type %d", n, typ)
		}
		v, ok = b, true
		return nil
	})
	return v, ok, err
}

// pidAddressOf returns the address an unmarshal of data gives the
// scanplane.internal.v1.Pid field num (occurrences of a message field are merged:
// the last address of the last occurrence that has one), and whether any
// occurrence has one.
func pidAddressOf(data []byte, num protowire.Number) (addr string, ok bool, err error) {
	v, ok, err := nestedBytes(data, num, pidAddress)
	return string(v), ok, err
}

// nestedBytes returns the length-delimited field inner of the message
// field num of data as an unmarshal gives it (occurrences of a message
// field are merged: the last inner value of the last occurrence that has
// one), and whether any occurrence has one.
func nestedBytes(data []byte, num, inner protowire.Number) (v []byte, ok bool, err error) {
	err = eachField(data, func(n protowire.Number, typ protowire.Type, b []byte) error {
		if n != num {
			return nil
		}
		if typ != protowire.BytesType {
			return fmt.Errorf("field %d has wire type %d", n, typ)
		}
		return eachField(b, func(n protowire.Number, typ protowire.Type, b []byte) error {
			if n != inner {
				return nil
			}
			if typ != protowire.BytesType {
				return fmt.Errorf("field %d.%d has wire type %d", num, n, typ)
			}
			v, ok = b, true
			return nil
		})
	})
	return v, ok, err
}

// eachField calls fn for each top-level field of data in order, with the
// field's contents for length-delimited fields (nil for the others).
func eachField(data []byte, fn func(protowire.Number, protowire.Type, []byte) error) error {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return protowire.ParseError(n)
		}
		data = data[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(data)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, data)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		data = data[n:]
		if err := fn(num, typ, v); err != nil {
			return err
		}
	}
	return nil
}
