package natsserver_test

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/procstop"
	"github.com/scanplane/scanplane/internal/testutil"
)

// waitReplicasCurrent waits until the three replicas of bucket's stream
// are current, none lagging (every put applied everywhere), and returns
// its info.
func waitReplicasCurrent(t *testing.T, conn *bus.Conn, bucket string) *jetstream.StreamInfo {
	t.Helper()
	var info *jetstream.StreamInfo
	testutil.EventuallyErr(t, 60*time.Second, "3 current replicas of "+bucket, func() (err error) {
		info, err = kvStreamInfo(ctxFor(t, 5*time.Second), conn, bucket)
		if err != nil {
			return err
		}
		if n := currentReplicas(info); n != 3 || slices.ContainsFunc(info.Cluster.Replicas, func(p *jetstream.PeerInfo) bool { return p.Lag > 0 }) {
			return fmt.Errorf("%d current, %+v", n, info.Cluster.Replicas)
		}
		return nil
	})
	return info
}

// pauseNode SIGSTOPs node n; the test's cleanup resumes it.
func pauseNode(t *testing.T, n *procNode) {
	t.Helper()
	proc := n.cmd.Process
	if err := procstop.Stop(proc.Pid, time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.Signal(syscall.SIGCONT) })
}

// waitMetaLeader waits until JetStream answers conn's account info:
// its meta leader, which also places consumers, is up (a new one, if
// the paused node led).
func waitMetaLeader(t *testing.T, conn *bus.Conn, paused string) {
	t.Helper()
	if d, err := retry(60*time.Second, func(ctx context.Context) error {
		_, err := conn.JetStream().AccountInfo(ctx)
		return err
	}); err != nil {
		t.Fatalf("no JetStream meta leader %v after node %s stopped: %v", d, paused, err)
	}
}
