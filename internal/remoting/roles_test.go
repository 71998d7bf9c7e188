package remoting

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/secrets"
	"github.com/scanplane/scanplane/messages"
)

// TestRoleTableListsEveryMessage: every message of messages/ has a line
// in the role table, so a new message must decide who may send it; and
// every entry resolves (its type and fields exist, with the right types).
func TestRoleTableListsEveryMessage(t *testing.T) {
	msgs := messages.File_scanplane_proto.Messages()
	for i := 0; i < msgs.Len(); i++ {
		md := msgs.Get(i)
		name := string(md.FullName())
		r, ok := rules[name]
		if !ok {
			t.Errorf("%s is not in the role table (roles.go): decide which roles may send it on the actor remote", name)
			continue
		}
		if r.Senders == 0 {
			continue
		}
		// Every PID the message carries is decided: the sender's own
		// (checked against its address) or relayed by a coordinator.
		fields := md.Fields()
		for j := 0; j < fields.Len(); j++ {
			f := fields.Get(j)
			if f.Kind() != protoreflect.MessageKind || f.Message().FullName() != pidType {
				continue
			}
			n := string(f.Name())
			if !contains(r.Own, n) && !contains(r.Relayed, n) {
				t.Errorf("%s.%s is a Pid that is neither Own nor Relayed in the role table", name, n)
			}
		}
	}
	_, errs := compileRules(rules)
	for _, err := range errs {
		t.Error(err)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestIdentityOf reads roles and hosts from certificate subjects.
func TestIdentityOf(t *testing.T) {
	sec := newSecrets(t)
	for _, tc := range []struct {
		file string
		role Role
		host string
	}{
		{"coordinator", RoleCoordinator, ""}, {"client", RoleClient, ""}, {"admin", RoleAdmin, ""},
		{"scanserver", RoleScanServer, ""}, {"scanserver.h1", RoleScanServer, "h1"},
	} {
		id, err := IdentityOf(sec.leaf(t, tc.file))
		if err != nil || id.Role != tc.role || id.Host != tc.host || !id.Secure {
			t.Errorf("%s: %+v, %v; want role %v host %q", tc.file, id, err, tc.role, tc.host)
		}
	}
	for _, ous := range [][]string{nil, {"ops"}, {"client", "admin"}} {
		c := &x509.Certificate{}
		c.Subject.OrganizationalUnit = ous
		if _, err := IdentityOf(c); err == nil {
			t.Errorf("OU %q: accepted", ous)
		}
	}
}

// TestGuardRoles sends, on a mutual-TLS remote, each message from a peer
// holding one role's certificate, followed on the same stream by a Row
// from the same peer: the message reaches the actor or is refused for the
// reason given, and the stream goes on either way (a Cancel, which every
// role may send, arrives after it).
func TestGuardRoles(t *testing.T) {
	sec := newSecrets(t)
	sys, g, got, addr := guardedRemoteWith(t, sec.tls(t, "coordinator"))
	const me = "127.0.0.1:7000" // the peers' advertised address
	probe := actor.NewPID(sys.Address(), "probe")
	elsewhere := &messages.Pid{Address: "127.0.0.1:7001", Id: "x"}
	mine := &messages.Pid{Address: me, Id: "x"}
	noReason := Reason(-1)
	for _, tc := range []struct {
		name string
		role string
		env  *remote.MessageBatch
		want Reason // noReason: delivered
	}{
		{"client StartScan", "client", batchOf(probe, &messages.StartScan{TabletActor: mine}), ReasonRole},
		{"coordinator StartScan", "coordinator", batchOf(probe, &messages.StartScan{TabletActor: mine, Client: elsewhere}), noReason},
		{"coordinator StartScan, tablet actor elsewhere", "coordinator", batchOf(probe, &messages.StartScan{TabletActor: elsewhere, Client: mine}), ReasonReplyTo},
		{"scanserver StartScan", "scanserver", batchOf(probe, &messages.StartScan{TabletActor: mine}), ReasonRole},
		{"client ScanRequest", "client", batchOf(probe, &messages.ScanRequest{Client: mine}), noReason},
		{"client ScanRequest, client elsewhere", "client", batchOf(probe, &messages.ScanRequest{Client: elsewhere}), ReasonReplyTo},
		{"client ScanRequest, client pid twice", "client", batchOf(probe, &messages.ScanRequest{Client: mine}, &messages.ScanRequest{Client: elsewhere}), ReasonReplyTo},
		{"coordinator forwards ScanRequest", "coordinator", batchOf(probe, &messages.ScanRequest{Client: elsewhere}), noReason},
		{"admin ScanRequest", "admin", batchOf(probe, &messages.ScanRequest{Client: mine}), noReason},
		{"client Probe", "client", batchOf(probe, &messages.Probe{ReplyTo: mine}), ReasonRole},
		{"coordinator Probe, reply elsewhere", "coordinator", batchOf(probe, &messages.Probe{ReplyTo: elsewhere}), ReasonReplyTo},
		{"client RowBatch", "client", batchOf(probe, &messages.RowBatch{Server: me + "/0"}), ReasonRole},
		{"scanserver RowBatch", "scanserver", batchOf(probe, &messages.RowBatch{Server: me + "/0", ServerPid: mine}), noReason},
		{"scanserver RowBatch, acks elsewhere", "scanserver", batchOf(probe, &messages.RowBatch{Server: me + "/0", ServerPid: elsewhere}), ReasonReplyTo},
		{"scanserver RowBatch of another server", "scanserver", batchOf(probe, &messages.RowBatch{Server: "127.0.0.1:7001/0"}), ReasonServer},
		{"scanserver Busy", "scanserver.h1", batchOf(probe, &messages.Busy{Server: me + "/1", Host: "h1"}), noReason},
		{"scanserver Busy for another host", "scanserver.h1", batchOf(probe, &messages.Busy{Server: me + "/1", Host: "h2"}), ReasonHost},
		{"role-wide scanserver Busy for any host", "scanserver", batchOf(probe, &messages.Busy{Server: me + "/1", Host: "h2"}), noReason},
		{"client Busy", "client", batchOf(probe, &messages.Busy{Server: me + "/1"}), ReasonRole},
		{"coordinator ScanStarted", "coordinator", batchOf(probe, &messages.ScanStarted{Server: me + "/1"}), ReasonRole},
		{"coordinator ScanFinished", "coordinator", batchOf(probe, &messages.ScanFinished{}), noReason},
		{"client ScanFinished", "client", batchOf(probe, &messages.ScanFinished{}), ReasonRole},
		{"client ScanRouted", "client", batchOf(probe, &messages.ScanRouted{}), ReasonRole},
		{"scanserver ScanError", "scanserver", batchOf(probe, &messages.ScanError{}), ReasonRole},
		{"client Heartbeat", "client", batchOf(probe, &messages.Heartbeat{Host: "h1"}), ReasonType},
		{"scanserver Heartbeat", "scanserver.h1", batchOf(probe, &messages.Heartbeat{Host: "h1"}), ReasonType},
		{"client ReloadProfiles", "client", batchOf(probe, &messages.ReloadProfiles{}), ReasonRole},
		{"admin ReloadProfiles", "admin", batchOf(probe, &messages.ReloadProfiles{}), noReason},
		{"client Stop", "client", batchOf(probe, &actor.Stop{}), ReasonType},
		{"coordinator Stop", "coordinator", batchOf(probe, &actor.Stop{}), ReasonType},
		{"coordinator PoisonPill", "coordinator", batchOf(probe, &actor.PoisonPill{}), ReasonType},
		{"coordinator Terminated", "coordinator", batchOf(probe, &actor.Terminated{Who: probe}), ReasonType},
		{"coordinator Watch", "coordinator", batchOf(probe, &actor.Watch{Watcher: actor.NewPID(me, "w")}), ReasonType},
		{"client GossipRequest", "client", batchOf(actor.NewPID(sys.Address(), "gossip"), &cluster.GossipRequest{}), ReasonRole},
		{"client ActorPidRequest", "client", batchOf(actor.NewPID(sys.Address(), "activator"), &remote.ActorPidRequest{Kind: "tablet"}), ReasonType},
		{"client Row to another process", "client", batchOf(actor.NewPID("127.0.0.1:7001", "probe"), &messages.Row{}), ReasonTarget},
		{"client Row to the event stream", "client", batchOf(actor.NewPID(sys.Address(), "eventstream"), &messages.Row{}), ReasonTarget},
		{"client Row, json serializer", "client", withEnvelope(batchOf(probe, &messages.Row{}), func(e *remote.MessageEnvelope) { e.SerializerId = 1 }), ReasonType},
		{"client Row, sender elsewhere", "client", withSender(batchOf(probe, &messages.Row{}), actor.NewPID("127.0.0.1:7001", "f")), ReasonSender},
		{"client Row, own sender", "client", withSender(batchOf(probe, &messages.Row{}), actor.NewPID(me, "f")), noReason},
		{"client BatchAck, forged peer header", "client", withEnvelope(batchOf(probe, &messages.BatchAck{}), func(e *remote.MessageEnvelope) {
			e.MessageHeader = &remote.MessageHeader{HeaderData: map[string]string{PeerAddressHeader: "127.0.0.1:7001"}}
		}), ReasonHeader},
		{"client BatchAck", "client", batchOf(probe, &messages.BatchAck{}), noReason},
		{"coordinator BatchAck (its public API's scans)", "coordinator", batchOf(probe, &messages.BatchAck{}), noReason},
		{"scanserver BatchAck", "scanserver", batchOf(probe, &messages.BatchAck{}), ReasonRole},
		{"client Cancel", "client", batchOf(probe, &messages.Cancel{}), noReason},
		{"scanserver Cancel", "scanserver", batchOf(probe, &messages.Cancel{}), noReason},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := refusedCounts(g)
			conn := dialTLS(t, addr, sec.tls(t, tc.role))
			marker := batchOf(probe, &messages.Cancel{Reason: "marker"})
			sendStream(t, conn, me, tc.env, marker)
			msgs := collectUntil(t, got, "marker")
			delivered := len(msgs) > 0
			if delivered != (tc.want == noReason) {
				t.Fatalf("delivered %v (%v); want refused for %q: %v", delivered, msgs, tc.want, diffCounts(before, refusedCounts(g)))
			}
			if tc.want == noReason {
				if d := diffCounts(before, refusedCounts(g)); len(d) > 0 {
					t.Fatalf("delivered, but refusals %v", d)
				}
				return
			}
			if d := diffCounts(before, refusedCounts(g)); len(d) != 1 || d[tc.want] != 1 {
				t.Fatalf("refusals %v; want one %q", d, tc.want)
			}
		})
	}

	t.Run("tag", func(t *testing.T) {
		conn := dialTLS(t, addr, sec.tls(t, "client"))
		sendStream(t, conn, me, batchOf(probe, &messages.BatchAck{RequestId: "r"}), batchOf(probe, &messages.Row{Key: []byte("marker")}))
		msgs := collectUntil(t, got, "marker")
		if len(msgs) != 1 || msgs[0].typ != "*messages.BatchAck" || msgs[0].header != me {
			t.Fatalf("got %+v; want the BatchAck with header %s=%s", msgs, PeerAddressHeader, me)
		}
	})
}

// TestGuardBindsStreams: a secured peer must open its stream with a
// ConnectRequest for an address its certificate is valid for; a second
// one naming another address is dropped; a certificate without a role
// gets no stream.
func TestGuardBindsStreams(t *testing.T) {
	sec := newSecrets(t)
	sys, g, got, addr := guardedRemoteWith(t, sec.tls(t, "coordinator"))
	probe := actor.NewPID(sys.Address(), "probe")
	row := func(k string) *remote.MessageBatch { return batchOf(probe, &messages.Row{Key: []byte(k)}) }

	t.Run("address not in the certificate", func(t *testing.T) {
		before := g.RefusedBy(ReasonAddress)
		err := sendStreamErr(t, dialTLS(t, addr, sec.tls(t, "client")), "10.9.9.9:7000", row("never"))
		if status.Code(err) != codes.PermissionDenied || g.RefusedBy(ReasonAddress) != before+1 {
			t.Fatalf("stream ended with %v, address refusals %d; want PermissionDenied and one", err, g.RefusedBy(ReasonAddress)-before)
		}
	})
	t.Run("DNS name of the certificate", func(t *testing.T) {
		sendStream(t, dialTLS(t, addr, sec.tls(t, "client")), "localhost:7000", row("dns"))
		collectUntil(t, got, "dns")
	})
	t.Run("batch before connect", func(t *testing.T) {
		before := g.RefusedBy(ReasonUnbound)
		conn := dialTLS(t, addr, sec.tls(t, "client"))
		sendRaw(t, conn, &remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: row("early")}},
			connectMsg("127.0.0.1:7000"), &remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: row("late")}})
		if msgs := collectUntil(t, got, "late"); len(msgs) != 0 || g.RefusedBy(ReasonUnbound) != before+1 {
			t.Fatalf("got %v before the bound row, unbound refusals %d; want none and one", msgs, g.RefusedBy(ReasonUnbound)-before)
		}
	})
	t.Run("rebinding", func(t *testing.T) {
		before := g.RefusedBy(ReasonAddress)
		conn := dialTLS(t, addr, sec.tls(t, "client"))
		sendRaw(t, conn, connectMsg("127.0.0.1:7000"), connectMsg("127.0.0.1:7001"),
			&remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: withSender(row("rebound"), actor.NewPID("127.0.0.1:7001", "f"))}},
			&remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: row("after")}})
		if msgs := collectUntil(t, got, "after"); len(msgs) != 0 || g.RefusedBy(ReasonAddress) != before+1 {
			t.Fatalf("got %v, address refusals %d; want the rebound sender refused, one address refusal", msgs, g.RefusedBy(ReasonAddress)-before)
		}
	})
	t.Run("certificate without a role", func(t *testing.T) {
		before := g.RefusedBy(ReasonNoRole)
		err := sendStreamErr(t, dialTLS(t, addr, sec.certWithOU(t, "ops")), "127.0.0.1:7000", row("never"))
		if status.Code(err) != codes.PermissionDenied || g.RefusedBy(ReasonNoRole) != before+1 {
			t.Fatalf("stream ended with %v; want PermissionDenied, counted", err)
		}
	})
}

// TestGuardPlainText: without certificates every role is allowed and no
// address is bound, but message types no role may send, foreign targets
// and forged headers are still refused.
func TestGuardPlainText(t *testing.T) {
	sys, g, got, addr := guardedRemoteWith(t, nil)
	probe := actor.NewPID(sys.Address(), "probe")
	conn := dial(t, addr)
	elsewhere := &messages.Pid{Address: "127.0.0.1:7001", Id: "x"}
	sendStream(t, conn, "127.0.0.1:7000",
		batchOf(probe, &messages.StartScan{TabletActor: elsewhere}),
		batchOf(probe, &actor.Stop{}),
		batchOf(probe, &actor.PoisonPill{}),
		batchOf(actor.NewPID(sys.Address(), "eventstream"), &messages.Row{}),
		batchOf(probe, &messages.Row{Key: []byte("marker")}))
	msgs := collectUntil(t, got, "marker")
	if len(msgs) != 1 || msgs[0].typ != "*messages.StartScan" {
		t.Fatalf("got %+v; want the StartScan only", msgs)
	}
	if g.RefusedBy(ReasonType) != 2 || g.RefusedBy(ReasonTarget) != 1 {
		t.Fatalf("refusals %v; want 2 types and 1 target", refusedCounts(g))
	}
}

// BenchmarkGuardRowBatch is the guard's cost on a 256 KiB RowBatch from
// a scan server (server id and server pid read in the body).
func BenchmarkGuardRowBatch(b *testing.B) {
	g := NewGuard(nil, nil)
	s := &guardedStream{g: g, id: Identity{Role: RoleScanServer, Secure: true}, bound: "127.0.0.1:7000", ServerStream: fakeStream{}}
	rb := &messages.RowBatch{RequestId: "r", Attempt: 1, Seq: 1, Server: "127.0.0.1:7000/0", ServerPid: &messages.Pid{Address: "127.0.0.1:7000", Id: "scanserver-0"},
		PackedRows: make([]byte, 256<<10)}
	batch := batchOf(actor.NewPID("127.0.0.1:1", "client"), rb)
	env := batch.Envelopes[0]
	b.ReportAllocs()
	for b.Loop() {
		batch.Envelopes = []*remote.MessageEnvelope{env}
		if !g.filter(s, batch) {
			b.Fatal("refused")
		}
	}
}

type testSecrets struct{ dir string }

func newSecrets(t *testing.T) testSecrets {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "secrets")
	if err := secrets.Init(dir, secrets.InitOptions{ServerHosts: []string{"h1"}}); err != nil {
		t.Fatal(err)
	}
	return testSecrets{dir}
}

func (s testSecrets) tls(t *testing.T, role string) *tls.Config {
	t.Helper()
	cfg, err := cliutil.RemoteTLS(s.dir, role)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func (s testSecrets) leaf(t *testing.T, role string) *x509.Certificate {
	t.Helper()
	c, err := x509.ParseCertificate(s.tls(t, role).Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// certWithOU is a client TLS config with a certificate of the CA whose
// organizational unit is ou.
func (s testSecrets) certWithOU(t *testing.T, ou string) *tls.Config {
	t.Helper()
	return s.certWith(t, secrets.CertSpec{CommonName: "scanplane " + ou, Role: ou})
}

// certWith is a client TLS config with a certificate of the CA made
// from spec, valid for 127.0.0.1 for an hour around now.
func (s testSecrets) certWith(t *testing.T, spec secrets.CertSpec) *tls.Config {
	t.Helper()
	kp, err := tls.LoadX509KeyPair(filepath.Join(s.dir, "ca.crt"), filepath.Join(secrets.DefaultCADir(s.dir), "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(kp.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	spec.IPs = []net.IP{net.ParseIP("127.0.0.1")}
	spec.NotBefore, spec.NotAfter = now.Add(-time.Hour), now.Add(time.Hour)
	der, key, err := secrets.NewCert(ca, kp.PrivateKey.(*ecdsa.PrivateKey), spec)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.tls(t, "client")
	cfg.Certificates = []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}
	return cfg
}

// got is what the probe actor received: the message type, a Row's key
// and the peer-address header.
type gotMsg struct{ typ, key, header string }

// guardedRemoteWith starts a remote behind a Guard (mutual TLS with
// tlsCfg, plain text if nil) with one actor, "probe", that hands what it
// receives to got.
func guardedRemoteWith(t *testing.T, tlsCfg *tls.Config) (*actor.ActorSystem, *Guard, chan gotMsg, string) {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	g := NewGuard(nil, sys)
	tr := NewTracker()
	var creds credentials.TransportCredentials
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	rem := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0, TransportOptions(creds, g, tr.ServerOption())...))
	rem.Start()
	t.Cleanup(func() {
		tr.Stop(rem, 10*time.Second)
		sys.Shutdown()
	})
	got := make(chan gotMsg, 64)
	_, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case actor.SystemMessage, actor.AutoReceiveMessage:
		case *messages.Row:
			got <- gotMsg{typ: "*messages.Row", key: string(m.GetKey()), header: PeerAddress(c)}
		case *messages.Cancel:
			got <- gotMsg{typ: "*messages.Cancel", key: m.GetReason(), header: PeerAddress(c)}
		default:
			got <- gotMsg{typ: fmt.Sprintf("%T", m), header: PeerAddress(c)}
		}
	}), "probe")
	if err != nil {
		t.Fatal(err)
	}
	return sys, g, got, sys.Address()
}

// collectUntil returns what the probe got before the Row with key marker
// or the Cancel with reason marker.
func collectUntil(t *testing.T, got chan gotMsg, marker string) []gotMsg {
	t.Helper()
	var out []gotMsg
	timeout := time.After(30 * time.Second)
	for {
		select {
		case m := <-got:
			if (m.typ == "*messages.Row" || m.typ == "*messages.Cancel") && m.key == marker {
				return out
			}
			out = append(out, m)
		case <-timeout:
			t.Fatalf("the probe did not get the Row %q", marker)
		}
	}
}

func dialTLS(t *testing.T, addr string, cfg *tls.Config) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func connectMsg(addr string) *remote.RemoteMessage {
	return &remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{ConnectRequest: &remote.ConnectRequest{
		ConnectionType: &remote.ConnectRequest_ServerConnection{ServerConnection: &remote.ServerConnection{SystemId: "test", Address: addr}}}}}
}

// sendStream sends, as protoactor's endpoint writer does, a ConnectRequest
// for self and then batches on one stream, and waits for the server's end
// of it, which must be clean.
func sendStream(t *testing.T, conn *grpc.ClientConn, self string, batches ...*remote.MessageBatch) {
	t.Helper()
	if err := sendStreamErr(t, conn, self, batches...); err != nil {
		t.Fatalf("stream ended with %v, want a clean end", err)
	}
}

func sendStreamErr(t *testing.T, conn *grpc.ClientConn, self string, batches ...*remote.MessageBatch) error {
	t.Helper()
	msgs := []*remote.RemoteMessage{connectMsg(self)}
	for _, b := range batches {
		msgs = append(msgs, &remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: b}})
	}
	return sendRawErr(t, conn, msgs...)
}

func sendRaw(t *testing.T, conn *grpc.ClientConn, msgs ...*remote.RemoteMessage) {
	t.Helper()
	if err := sendRawErr(t, conn, msgs...); err != nil {
		t.Fatalf("stream ended with %v, want a clean end", err)
	}
}

func sendRawErr(t *testing.T, conn *grpc.ClientConn, msgs ...*remote.RemoteMessage) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := remote.NewRemotingClient(conn).Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			break // the server ended the stream; Recv says why
		}
	}
	_ = stream.CloseSend()
	for {
		_, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// batchOf is a batch with one envelope per message, each to target.
func batchOf(target *actor.PID, msgs ...proto.Message) *remote.MessageBatch {
	b := &remote.MessageBatch{Targets: []*actor.PID{target}}
	for _, m := range msgs {
		data, err := proto.Marshal(m)
		if err != nil {
			panic(err)
		}
		b.TypeNames = append(b.TypeNames, string(proto.MessageName(m)))
		b.Envelopes = append(b.Envelopes, &remote.MessageEnvelope{TypeId: int32(len(b.TypeNames) - 1), MessageData: data})
	}
	if len(msgs) == 2 {
		// Two messages of one type: as one message with its fields
		// twice (the second one's PID after the first's).
		b.Envelopes[0].MessageData = append(b.Envelopes[0].MessageData, b.Envelopes[1].MessageData...)
		b.Envelopes = b.Envelopes[:1]
		b.TypeNames = b.TypeNames[:1]
	}
	return b
}

func withEnvelope(b *remote.MessageBatch, mut func(*remote.MessageEnvelope)) *remote.MessageBatch {
	for _, e := range b.Envelopes {
		mut(e)
	}
	return b
}

func withSender(b *remote.MessageBatch, sender *actor.PID) *remote.MessageBatch {
	b.Senders = append(b.Senders, sender)
	return withEnvelope(b, func(e *remote.MessageEnvelope) { e.Sender = int32(len(b.Senders)) })
}

func refusedCounts(g *Guard) map[Reason]uint64 {
	m := map[Reason]uint64{}
	for _, r := range Reasons() {
		m[r] = g.RefusedBy(r)
	}
	return m
}

// diffCounts is after − before, without zeros.
func diffCounts(before, after map[Reason]uint64) map[Reason]uint64 {
	d := map[Reason]uint64{}
	for r, n := range after {
		if n != before[r] {
			d[r] = n - before[r]
		}
	}
	return d
}
