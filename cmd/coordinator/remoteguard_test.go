package main

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/scanplane/scanplane/internal/cliutil"
	"github.com/scanplane/scanplane/internal/secrets"
)

// TestRemoteGuardKeepsProcessesUp calls, with only a client certificate,
// protoactor's unary methods (whose handlers panic) and sends a malformed
// message batch (whose indices protoactor's reader trusts) to a secured
// coordinator's and scan server's actor ports: each call answers
// Unimplemented, the batch is dropped, and both processes keep running
// and answering.
func TestRemoteGuardKeepsProcessesUp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs coordinator and scanserver processes")
	}
	coord := buildCmd(t, ".", "coordinator")
	server := buildCmd(t, "../scanserver", "scanserver")
	secDir := filepath.Join(t.TempDir(), "secrets")
	if err := secrets.Init(secDir, secrets.InitOptions{ServerHosts: []string{"h1"}}); err != nil {
		t.Fatal(err)
	}
	co, r := startReady(t, coord, "--data", t.TempDir(), "--nats-listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--cluster-provider", "none", "--listen", "127.0.0.1:0", "--secrets", secDir)
	ss, sr := startReady(t, server, "--nats", r.NATS, "--listen", "127.0.0.1:0", "--host", "h1", "--secrets", secDir)
	tlsCfg, err := cliutil.RemoteTLS(secDir, "client")
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []struct {
		who  string
		p    *proc
		addr string
	}{{"coordinator", co, r.Actor}, {"scanserver", ss, sr.Actor}} {
		conn, err := grpc.NewClient(target.addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg.Clone())))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		rc := remote.NewRemotingClient(conn)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for round := range 2 {
			if _, err := rc.ListProcesses(ctx, &remote.ListProcessesRequest{}); status.Code(err) != codes.Unimplemented {
				t.Fatalf("%s ListProcesses (round %d): %v, want Unimplemented\n%s", target.who, round, err, target.p.stderr.String())
			}
			if _, err := rc.GetProcessDiagnostics(ctx, &remote.GetProcessDiagnosticsRequest{Pid: &actor.PID{Address: target.addr, Id: "x"}}); status.Code(err) != codes.Unimplemented {
				t.Fatalf("%s GetProcessDiagnostics (round %d): %v, want Unimplemented\n%s", target.who, round, err, target.p.stderr.String())
			}
			stream, err := rc.Receive(ctx)
			if err != nil {
				t.Fatalf("%s Receive: %v", target.who, err)
			}
			bad := &remote.MessageBatch{TypeNames: []string{"actor.PID"},
				Envelopes: []*remote.MessageEnvelope{{Target: 5, TypeId: 0}}}
			if err := stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: bad}}); err != nil {
				t.Fatalf("%s send: %v", target.who, err)
			}
			if err := stream.CloseSend(); err != nil {
				t.Fatal(err)
			}
			// The server ends the stream once it has read the batch.
			for {
				_, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("%s: stream with a malformed batch ended with %v, want a clean end\n%s", target.who, err, target.p.stderr.String())
				}
			}
		}
		select {
		case <-target.p.exited:
			t.Fatalf("%s exited: %v\n%s", target.who, target.p.err, target.p.stderr.String())
		default:
		}
	}
	ss.stop(t)
	co.stop(t)
}
