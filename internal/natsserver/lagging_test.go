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

// laggingCluster is three nodes, each in a process of its own, one of
// which, a follower of a bucket's stream, is SIGSTOPped and cut off:
// the leader dropped its routes to it.
type laggingCluster struct {
	nodes           []*procNode
	cfgs            []natsserver.ServerConfig
	writer          *bus.Conn // dialled to every node
	reader          *bus.Conn // dialled to the lagging node alone, no node check
	leader, lagging int       // of the bucket's stream
}

// shortOps bounds a test connection's operations and read tries.
func shortOps(c *bus.Config) { c.OpTimeout, c.ReadTry = 2*time.Second, 500*time.Millisecond }

// pauseFollower starts the cluster (each node's configuration changed
// by mod), runs write through the writer, waits until bucket's three
// replicas are current, runs ready (nil: none) with the reader dialled,
// and SIGSTOPs the follower the reader is on until the leader dropped
// its routes to it: what is written afterwards the lagging replica
// lacks.
func pauseFollower(t *testing.T, bucket string, mod func(*natsserver.ServerConfig), write func(*bus.Conn), ready func(*laggingCluster)) *laggingCluster {
	t.Helper()
	l := &laggingCluster{}
	l.nodes, l.cfgs = startProcClusterWith(t, 3, mod)
	l.writer = procDialWith(t, shortOps, l.nodes[0].url, l.nodes[1].url, l.nodes[2].url)
	write(l.writer)
	info := waitReplicasCurrent(t, l.writer, bucket)
	// The lagging node is a follower: a paused leader would, once
	// resumed, lead on for a moment (until it finds its quorum lost).
	l.leader = slices.IndexFunc(l.cfgs, func(c natsserver.ServerConfig) bool { return c.Name == info.Cluster.Leader })
	l.lagging = (l.leader + 1) % 3
	l.reader = procDialWith(t, func(c *bus.Config) { shortOps(c); c.NodeCheck = 0 }, l.nodes[l.lagging].url)
	if ready != nil {
		ready(l)
	}
	// A connection to the leader alone learns the cluster's client URLs
	// from it: the lagging node's leaves them once the leader dropped
	// its routes to it.
	observer := procDialWith(t, func(c *bus.Config) { c.NodeCheck = 0 }, l.nodes[l.leader].url)
	name, url := l.cfgs[l.lagging].Name, l.nodes[l.lagging].url
	testutil.Eventually(t, 30*time.Second, "the leader tells of "+name, func() bool {
		return slices.Contains(observer.NATS().DiscoveredServers(), url)
	})
	pauseNode(t, l.nodes[l.lagging])
	testutil.Eventually(t, 60*time.Second, "the leader drops its routes to the stopped "+name, func() bool {
		return !slices.Contains(observer.NATS().DiscoveredServers(), url)
	})
	return l
}

// resume SIGCONTs the lagging node.
func (l *laggingCluster) resume(t *testing.T) {
	t.Helper()
	if err := l.nodes[l.lagging].cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// resumeAlone SIGKILLs the other two nodes, resumes the lagging one and
// waits until the reader is on it.
func (l *laggingCluster) resumeAlone(t *testing.T) {
	t.Helper()
	for i := range l.nodes {
		if i != l.lagging {
			_ = l.nodes[i].cmd.Process.Kill()
			_, _ = l.nodes[i].cmd.Process.Wait()
		}
	}
	l.resume(t)
	name := l.cfgs[l.lagging].Name
	testutil.Eventually(t, 30*time.Second, "the reader on "+name, func() bool {
		return l.reader.NATS().ConnectedServerName() == name
	})
}

// laggingReplica runs TestBlockGetOnLaggingReplicaWithoutQuorum (alone)
// or TestBlockGetOnLaggingReplicaWithLeader.
func laggingReplica(t *testing.T, alone bool) {
	bucket := bus.DefaultConfig().BlocksBucket
	stream := "KV_" + bucket
	direct := "$JS.API.DIRECT.GET." + stream + ".$KV." + bucket + "."
	var bs, rbs *bus.BlockStore
	var early map[string][]byte
	l := pauseFollower(t, bucket, func(c *natsserver.ServerConfig) { c.LocalDirectGets = []string{stream} }, func(writer *bus.Conn) {
		if _, err := retry(60*time.Second, func(ctx context.Context) (err error) {
			bs, err = writer.BlockStore(ctx)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		early = putRandomBlocks(t, bs, 2, 21)
	}, func(l *laggingCluster) {
		var err error
		if rbs, err = l.reader.BlockStore(ctxFor(t, 30*time.Second)); err != nil {
			t.Fatal(err)
		}
		var someEarly string
		for k := range early {
			someEarly = k
		}
		testutil.EventuallyErr(t, 30*time.Second, "direct gets answered by "+l.cfgs[l.lagging].Name, func() error {
			_, err := l.reader.NATS().Request(direct+someEarly, nil, 2*time.Second)
			return err
		})
	})
	reader, cfgs, lagging, leader := l.reader, l.cfgs, l.lagging, l.leader
	const lateKey = "t.g1.t0.cafe.late"
	late := bytes.Repeat([]byte("late block "), 4<<10)
	if err := bs.Put(ctxFor(t, 30*time.Second), lateKey, late); err != nil {
		t.Fatal(err)
	}
	if !alone {
		l.resume(t)
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
	l.resumeAlone(t)
	if m, err := reader.NATS().Request(direct+lateKey, nil, 2*time.Second); err != nil || m.Header.Get("Status") != "404" {
		t.Fatalf("direct get of %s on %s alone: %v; want the 404 of a replica that lacks it", lateKey, cfgs[lagging].Name, err)
	}
	linfo := leaderlessInfo(t, reader, stream, "$KV."+bucket+"."+lateKey)
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

	l.nodes[leader] = startProcNode(t, cfgs[leader])
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

// TestGenerationsOnLaggingReplicaWithoutQuorum: the metadata bucket's
// follower paused and cut off while a table's first generation is
// published, the other two nodes killed, the follower resumed alone: its
// replica has no record of the table, and the stream info it answers
// for want of a leader counts none. Generations is ErrUnavailable, not
// an empty list (the orphan sweep deletes what the list leaves out);
// with the leader back it lists the generation.
func TestGenerationsOnLaggingReplicaWithoutQuorum(t *testing.T) {
	t.Parallel()
	bucket := bus.DefaultConfig().MetaBucket
	var ms, rms *bus.MetaStore
	l := pauseFollower(t, bucket, nil, func(writer *bus.Conn) {
		if _, err := retry(60*time.Second, func(ctx context.Context) (err error) {
			if ms, err = writer.MetaStore(ctx); err != nil {
				return err
			}
			return ms.Publish(ctx, tableGen("early", 1), 0)
		}); err != nil {
			t.Fatal(err)
		}
	}, func(l *laggingCluster) {
		var err error
		if rms, err = l.reader.MetaStore(ctxFor(t, 30*time.Second)); err != nil {
			t.Fatal(err)
		}
	})
	if err := ms.Publish(ctxFor(t, 30*time.Second), tableGen("late", 1), 0); err != nil {
		t.Fatal(err)
	}
	l.resumeAlone(t)
	leaderlessInfo(t, l.reader, "KV_"+bucket, "$KV."+bucket+".>")
	for range 3 {
		gens, err := rms.Generations(ctxFor(t, 30*time.Second), "late")
		if !errors.Is(err, bus.ErrUnavailable) {
			t.Fatalf("Generations(late) from the lone replica that lacks it, without a quorum: %v, %v; want ErrUnavailable", gens, err)
		}
	}
	l.nodes[l.leader] = startProcNode(t, l.cfgs[l.leader])
	testutil.EventuallyErr(t, 90*time.Second, "the late table's generations with "+l.cfgs[l.leader].Name+" back", func() error {
		gens, err := rms.Generations(ctxFor(t, 30*time.Second), "late")
		if err != nil {
			return err
		}
		if !slices.Equal(gens, []uint64{1}) {
			t.Fatalf("Generations(late) with the leader back: %v, want [1]", gens)
		}
		return nil
	})
}

// procDialWith is procDial with the configuration changed by mod (nil:
// none).
func procDialWith(t *testing.T, mod func(*bus.Config), urls ...string) *bus.Conn {
	t.Helper()
	cfg := bus.DefaultConfig()
	cfg.URL, cfg.Name, cfg.Replicas = strings.Join(urls, ","), t.Name(), 3
	if mod != nil {
		mod(&cfg)
	}
	c, err := bus.Connect(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// leaderlessInfo waits until the node c is connected to answers the
// info of stream (with the counts of the subjects filter matches)
// although the stream has no leader, and returns it.
func leaderlessInfo(t *testing.T, c *bus.Conn, stream, filter string) *jetstream.StreamInfo {
	t.Helper()
	req, err := json.Marshal(map[string]string{"subjects_filter": filter})
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
