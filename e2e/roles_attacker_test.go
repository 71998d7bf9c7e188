package e2e

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// attacker speaks protoactor's remote protocol by hand over gRPC with
// mutual TLS, holding one certificate of the cluster's CA: it opens a
// stream to any actor system as protoactor's endpoint writer does (a
// ConnectRequest naming its own address, then message batches), with
// any message, target and sender, and it serves a remote of its own
// (its address is what it names in PIDs), where it counts what arrives
// and, when forging is on, answers every StartScan with a forged result.
type attacker struct {
	t    *testing.T
	tls  *tls.Config
	srv  *grpc.Server
	addr string

	mu      sync.Mutex
	conns   map[string]*grpc.ClientConn
	streams map[string]remote.Remoting_ReceiveClient

	// what arrived at its remote
	gotMu sync.Mutex
	got   map[string]int // by message type
	rows  atomic.Int64   // rows of the RowBatches that arrived

	forge  atomic.Bool  // answer StartScans with forged results
	forged atomic.Int64 // StartScans answered
}

// newAttacker starts an attacker holding the certificate of cfg (nil: a
// plain-text peer of a cluster without TLS), serving on a new loopback
// port; it stops when t ends. It speaks protoactor's remote protocol over
// gRPC without starting a protoactor remote, so a test process that runs
// one (a client) can run attackers beside it.
func (a *attacker) creds() credentials.TransportCredentials {
	if a.tls == nil {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(a.tls)
}

// newAttacker starts an attacker (see attacker.creds).
func newAttacker(t *testing.T, cfg *tls.Config) *attacker {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &attacker{t: t, tls: cfg, addr: lis.Addr().String(), conns: map[string]*grpc.ClientConn{},
		streams: map[string]remote.Remoting_ReceiveClient{}, got: map[string]int{}}
	a.srv = grpc.NewServer(grpc.Creds(a.creds()))
	remote.RegisterRemotingServer(a.srv, attackerServer{a: a})
	go a.srv.Serve(lis)
	t.Cleanup(a.close)
	return a
}

func (a *attacker) close() {
	a.mu.Lock()
	for _, s := range a.streams {
		_ = s.CloseSend()
	}
	for _, c := range a.conns {
		c.Close()
	}
	a.conns, a.streams = map[string]*grpc.ClientConn{}, map[string]remote.Remoting_ReceiveClient{}
	a.mu.Unlock()
	a.srv.Stop()
}

// pid is a PID on the attacker's own address.
func (a *attacker) pid(id string) *actor.PID { return actor.NewPID(a.addr, id) }

// received is how many messages of type name arrived at the attacker.
func (a *attacker) received(name string) int {
	a.gotMu.Lock()
	defer a.gotMu.Unlock()
	return a.got[name]
}

// send sends msg to target with sender (nil: none) on the attacker's
// stream to target's address, opening it first. An error means the
// stream broke (it is opened again at the next send).
func (a *attacker) send(target, sender *actor.PID, msg proto.Message) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, err := a.stream(target.Address)
	if err != nil {
		return err
	}
	data, err := proto.Marshal(msg)
	if err != nil {
		return err
	}
	b := &remote.MessageBatch{TypeNames: []string{string(proto.MessageName(msg))}, Targets: []*actor.PID{target},
		Envelopes: []*remote.MessageEnvelope{{MessageData: data}}}
	if sender != nil {
		b.Senders = []*actor.PID{sender}
		b.Envelopes[0].Sender = 1
	}
	if err := s.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: b}}); err != nil {
		delete(a.streams, target.Address)
		return err
	}
	return nil
}

func (a *attacker) stream(addr string) (remote.Remoting_ReceiveClient, error) {
	if s := a.streams[addr]; s != nil {
		return s, nil
	}
	conn := a.conns[addr]
	if conn == nil {
		var err error
		if conn, err = grpc.NewClient(addr, grpc.WithTransportCredentials(a.creds())); err != nil {
			return nil, err
		}
		a.conns[addr] = conn
	}
	s, err := remote.NewRemotingClient(conn).Receive(context.Background())
	if err != nil {
		return nil, err
	}
	err = s.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{ConnectRequest: &remote.ConnectRequest{
		ConnectionType: &remote.ConnectRequest_ServerConnection{ServerConnection: &remote.ServerConnection{SystemId: "attacker", Address: a.addr}}}}})
	if err != nil {
		return nil, err
	}
	if _, err := s.Recv(); err != nil { // the ConnectResponse
		return nil, err
	}
	go func() { // drain (a DisconnectRequest, the end)
		for {
			if _, err := s.Recv(); err != nil {
				return
			}
		}
	}()
	a.streams[addr] = s
	return s, nil
}

type attackerServer struct {
	remote.UnimplementedRemotingServer
	a *attacker
}

func (s attackerServer) Receive(stream remote.Remoting_ReceiveServer) error {
	for {
		m, err := stream.Recv()
		if err != nil {
			return nil
		}
		switch t := m.MessageType.(type) {
		case *remote.RemoteMessage_ConnectRequest:
			if err := stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectResponse{
				ConnectResponse: &remote.ConnectResponse{MemberId: "attacker"}}}); err != nil {
				return nil
			}
		case *remote.RemoteMessage_MessageBatch:
			b := t.MessageBatch
			for _, e := range b.Envelopes {
				if int(e.TypeId) >= len(b.TypeNames) {
					continue
				}
				s.a.handle(b.TypeNames[e.TypeId], e.MessageData)
			}
		}
	}
}

func (a *attacker) handle(name string, data []byte) {
	a.gotMu.Lock()
	a.got[name]++
	a.gotMu.Unlock()
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name))
	if err != nil {
		return
	}
	m := mt.New().Interface()
	if proto.Unmarshal(data, m) != nil {
		return
	}
	switch m := m.(type) {
	case *messages.RowBatch:
		n, _ := tablets.BatchRows(m, 0)
		a.rows.Add(int64(len(n)))
	case *messages.StartScan:
		if a.forge.Load() {
			a.answer(m)
		}
	}
}

// fakeServer is the scan-server id the attacker announces.
func (a *attacker) fakeServer() string { return a.addr + "/0" }

// answer answers a StartScan with, in turn, one forged row (inside the
// range, its counts and checksum right), no row at all, or a damaged
// block, as a fake scan server would.
func (a *attacker) answer(m *messages.StartScan) {
	n := a.forged.Add(1)
	client, tablet := actor.NewPID(m.GetClient().GetAddress(), m.GetClient().GetId()), actor.NewPID(m.GetTabletActor().GetAddress(), m.GetTabletActor().GetId())
	fin := &messages.ScanFinished{RequestId: m.GetRequestId(), Attempt: m.GetAttempt(), Server: a.fakeServer()}
	key := append([]byte(nil), m.GetRange().GetStart()...)
	if after := m.GetResumeAfter(); len(after) > 0 && string(after) >= string(key) {
		key = append(append([]byte(nil), after...), 0)
	}
	if end := m.GetRange().GetEnd(); len(end) > 0 && string(key) >= string(end) {
		n = 2 // no room for a row
	}
	switch n % 3 {
	case 1:
		var d tablets.RowDigest
		val := []byte("forged")
		d.Add(key, val)
		fin.Rows, fin.Batches, fin.Checksum, fin.LastKey = 1, 1, d.Sum(), key
		_ = a.send(tablet, nil, &messages.ScanStarted{RequestId: m.GetRequestId(), Attempt: m.GetAttempt(), Server: a.fakeServer(), FirstData: true})
		_ = a.send(client, nil, &messages.RowBatch{RequestId: m.GetRequestId(), Attempt: m.GetAttempt(), Seq: 1, Server: a.fakeServer(),
			ServerPid: &messages.Pid{Address: a.addr, Id: "scanserver-0"}, RowCount: 1, Checksum: d.Sum(),
			PackedRows: tablets.AppendPackedRow(nil, key, val), Finished: fin})
		_ = a.send(tablet, nil, fin)
	case 2:
		_ = a.send(client, nil, fin)
		_ = a.send(tablet, nil, fin)
	case 0:
		fin.Error, fin.ErrorMessage = messages.ErrorCode_ERROR_CODE_CORRUPT_BLOCK, "forged: block damaged"
		_ = a.send(client, nil, fin)
		_ = a.send(tablet, nil, fin)
	}
}

// heartbeat is the Heartbeat of the attacker's fake scan server.
func (a *attacker) heartbeat() *messages.Heartbeat {
	return &messages.Heartbeat{Host: "evil", Server: a.fakeServer(), Zone: "zone-1", Group: "default",
		Pid: &messages.Pid{Address: a.addr, Id: "scanserver-0"}, Incarnation: "evil", Workers: 64,
		SentUnixMs: time.Now().UnixMilli(), IntervalMs: 200, CacheHitRatio: 1}
}
