package natsserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/natsserver"
	"github.com/scanplane/scanplane/internal/procstop"
	"github.com/scanplane/scanplane/internal/testutil"
)

// TestBlockGetOnLaggingReplicaWithoutQuorum: three nodes in processes
// of their own, which keep the blocks bucket's direct gets on their own
// replica (LocalDirectGets). A follower of the blocks' stream is
// SIGSTOPped until the other nodes dropped their routes to it (their
// pings unanswered), a block is put, the other two nodes are SIGKILLed
// and the follower resumed: its replica lacks the block. Alone, without
// a quorum or a leader, that replica still takes its clients' direct
// gets and answers them from what it has, and so does the stream info
// it answers for want of a leader. Neither answer is authoritative: Get
// is ErrUnavailable, never ErrNotFound, while a block the replica holds
// is still read from it. Once a node with the block is back (a leader;
// the lagging replica catches up), Get returns the block, and no read
// in between is ErrNotFound.
func TestBlockGetOnLaggingReplicaWithoutQuorum(t *testing.T) {
	t.Parallel()
	laggingReplica(t, true)
}

// TestBlockGetOnLaggingReplicaWithLeader: as
// TestBlockGetOnLaggingReplicaWithoutQuorum, but the other two nodes
// stay up: the follower resumed lacks the block until it caught up with
// the leader, and every Get through it returns the block or
// ErrUnavailable (no leader reached yet), never ErrNotFound. How many
// reads fall in that window varies from run to run; the test logs it.
func TestBlockGetOnLaggingReplicaWithLeader(t *testing.T) {
	t.Parallel()
	laggingReplica(t, false)
}

// laggingReplica runs TestBlockGetOnLaggingReplicaWithoutQuorum (alone)
// or TestBlockGetOnLaggingReplicaWithLeader.
func laggingReplica(t *testing.T, alone bool) {
	bucket := bus.DefaultConfig().BlocksBucket
	stream := "KV_" + bucket
	nodes, cfgs := startProcClusterWith(t, 3, func(c *natsserver.ServerConfig) { c.LocalDirectGets = []string{stream} })
	short := func(c *bus.Config) {
		c.OpTimeout, c.ReadTry = 2*time.Second, 500*time.Millisecond
	}
	writer := procDialWith(t, short, nodes[0].url, nodes[1].url, nodes[2].url)
	var bs *bus.BlockStore
	if _, err := retry(60*time.Second, func(ctx context.Context) (err error) {
		bs, err = writer.BlockStore(ctx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	early := putRandomBlocks(t, bs, 2, 21)
	var info *jetstream.StreamInfo
	testutil.EventuallyErr(t, 60*time.Second, "3 current replicas of the blocks", func() (err error) {
		info, err = kvStreamInfo(ctxFor(t, 10*time.Second), writer, bucket)
		if err != nil {
			return err
		}
		if n := currentReplicas(info); n != 3 || slices.ContainsFunc(info.Cluster.Replicas, func(p *jetstream.PeerInfo) bool { return p.Lag > 0 }) {
			return fmt.Errorf("%d current, %+v", n, info.Cluster.Replicas)
		}
		return nil
	})
	// The lagging node is a follower: a paused leader would, once
	// resumed, lead on for a moment (until it finds its quorum lost).
	leader := slices.IndexFunc(cfgs, func(c natsserver.ServerConfig) bool { return c.Name == info.Cluster.Leader })
	lagging := (leader + 1) % 3
	reader := procDialWith(t, func(c *bus.Config) { short(c); c.NodeCheck = 0 }, nodes[lagging].url)
	rbs, err := reader.BlockStore(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var someEarly string
	for k := range early {
		someEarly = k
	}
	direct := "$JS.API.DIRECT.GET." + stream + ".$KV." + bucket + "."
	testutil.EventuallyErr(t, 30*time.Second, "direct gets answered by "+cfgs[lagging].Name, func() error {
		_, err := reader.NATS().Request(direct+someEarly, nil, 2*time.Second)
		return err
	})
	// A connection to the leader alone learns the cluster's client URLs
	// from it: the lagging node's leaves them once the leader dropped
	// its routes to it.
	observer := procDialWith(t, func(c *bus.Config) { c.NodeCheck = 0 }, nodes[leader].url)
	testutil.Eventually(t, 30*time.Second, "the leader tells of "+cfgs[lagging].Name, func() bool {
		return slices.Contains(observer.NATS().DiscoveredServers(), nodes[lagging].url)
	})

	proc := nodes[lagging].cmd.Process
	if err := procstop.Stop(proc.Pid, time.Minute); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "the leader drops its routes to the stopped "+cfgs[lagging].Name, func() bool {
		return !slices.Contains(observer.NATS().DiscoveredServers(), nodes[lagging].url)
	})
	const lateKey = "t.g1.t0.cafe.late"
	late := bytes.Repeat([]byte("late block "), 4<<10)
	if err := bs.Put(ctxFor(t, 30*time.Second), lateKey, late); err != nil {
		t.Fatal(err)
	}
	if !alone {
		if err := proc.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		behind, unavailable := 0, 0
		testutil.EventuallyErr(t, 60*time.Second, "the late block through "+cfgs[lagging].Name, func() error {
			on := reader.NATS().ConnectedServerName()
			m, derr := reader.NATS().Request(direct+lateKey, nil, 2*time.Second)
			lacks := derr == nil && m.Header.Get("Status") == "404"
			got, err := rbs.Get(ctxFor(t, 30*time.Second), lateKey)
			if errors.Is(err, bus.ErrNotFound) || errors.Is(err, bus.ErrCorrupt) {
				t.Fatalf("Get %s through %s, resumed, the leader up: %v", lateKey, on, err)
			}
			if lacks && on == cfgs[lagging].Name {
				behind++
			}
			if err != nil {
				unavailable++
				return err
			}
			if !bytes.Equal(got, late) {
				t.Fatalf("Get %s: %d bytes, not the block put", lateKey, len(got))
			}
			return nil
		})
		t.Logf("%s resumed: %d reads while its replica lacked %s, %d unavailable", cfgs[lagging].Name, behind, lateKey, unavailable)
		return
	}
	for i := range nodes {
		if i != lagging {
			_ = nodes[i].cmd.Process.Kill()
			_, _ = nodes[i].cmd.Process.Wait()
		}
	}
	if err := proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the reader on "+cfgs[lagging].Name, func() bool {
		return reader.NATS().ConnectedServerName() == cfgs[lagging].Name
	})
	if m, err := reader.NATS().Request(direct+lateKey, nil, 2*time.Second); err != nil || m.Header.Get("Status") != "404" {
		t.Fatalf("direct get of %s on %s alone: %v; want the 404 of a replica that lacks it", lateKey, cfgs[lagging].Name, err)
	}
	linfo := leaderlessInfo(t, reader, stream, lateKey)
	t.Logf("%s alone, paused while %s was put; stream info answered without a leader: %d messages, %d of %s",
		cfgs[lagging].Name, lateKey, linfo.State.Msgs, linfo.State.Subjects["$KV."+bucket+"."+lateKey], lateKey)

	for k, data := range early {
		got, err := rbs.Get(ctxFor(t, 30*time.Second), k)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get %s, which the lone replica holds: %d bytes, %v", k, len(got), err)
		}
	}
	for range 3 {
		_, err := rbs.Get(ctxFor(t, 30*time.Second), lateKey)
		if !errors.Is(err, bus.ErrUnavailable) || errors.Is(err, bus.ErrNotFound) || errors.Is(err, bus.ErrCorrupt) {
			t.Fatalf("Get %s from the lone replica that lacks it, without a quorum: %v; want ErrUnavailable", lateKey, err)
		}
		t.Logf("Get %s alone: %v", lateKey, err)
	}

	nodes[leader] = startProcNode(t, cfgs[leader])
	testutil.EventuallyErr(t, 90*time.Second, "the late block through "+cfgs[lagging].Name+" with "+cfgs[leader].Name+" back", func() error {
		got, err := rbs.Get(ctxFor(t, 30*time.Second), lateKey)
		if errors.Is(err, bus.ErrNotFound) || errors.Is(err, bus.ErrCorrupt) {
			t.Fatalf("Get %s with %s back: %v", lateKey, cfgs[leader].Name, err)
		}
		if err == nil && !bytes.Equal(got, late) {
			t.Fatalf("Get %s: %d bytes, not the block put", lateKey, len(got))
		}
		return err
	})
}

// procDialWith is procDial with the configuration changed by mod.
func procDialWith(t *testing.T, mod func(*bus.Config), urls ...string) *bus.Conn {
	t.Helper()
	cfg := bus.DefaultConfig()
	cfg.URL, cfg.Name, cfg.Replicas = strings.Join(urls, ","), t.Name(), 3
	mod(&cfg)
	c, err := bus.Connect(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// leaderlessInfo waits until the node c is connected to answers the
// info of stream (with the count of key's subject) although the stream
// has no leader, and returns it.
func leaderlessInfo(t *testing.T, c *bus.Conn, stream, key string) *jetstream.StreamInfo {
	t.Helper()
	subj := "$KV." + bus.DefaultConfig().BlocksBucket + "." + key
	req, err := json.Marshal(map[string]string{"subjects_filter": subj})
	if err != nil {
		t.Fatal(err)
	}
	var info jetstream.StreamInfo
	testutil.EventuallyErr(t, 60*time.Second, "stream info without a leader", func() error {
		m, err := c.NATS().Request("$JS.API.STREAM.INFO."+stream, req, 2*time.Second)
		if err != nil {
			return err
		}
		var resp struct {
			jetstream.StreamInfo
			Error *jetstream.APIError `json:"error"`
		}
		if err := json.Unmarshal(m.Data, &resp); err != nil {
			return err
		}
		if resp.Error != nil {
			return resp.Error
		}
		if resp.Cluster == nil || resp.Cluster.Leader != "" {
			return fmt.Errorf("cluster %+v", resp.Cluster)
		}
		info = resp.StreamInfo
		return nil
	})
	return &info
}
