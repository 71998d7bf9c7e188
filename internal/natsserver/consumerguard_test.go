package natsserver_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/messages"
)

// TestNATSClientConsumers: the client certificate can still watch a
// bucket (an ordered consumer: ephemeral, in memory, one replica), but
// a consumer of any other kind it creates — durable, on disk, kept
// after a long inactivity — is deleted by the server's guard, and the
// legacy durable endpoint is refused outright.
func TestNATSClientConsumers(t *testing.T) {
	ctx := context.Background()
	srv, dir := secureServer(t)
	coord := roleConn(t, srv, dir, "coordinator")
	cmeta, err := coord.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmeta.Publish(ctx, &messages.TableMeta{Name: "t", Generation: 1,
		Tablets: []*messages.TabletMeta{{Ref: &messages.TabletRef{Table: "t", Generation: 1}}}}, 0); err != nil {
		t.Fatal(err)
	}
	const stream = "KV_scanplane-meta"
	filter := "$KV.scanplane-meta.>"

	cl := roleConn(t, srv, dir, "client")
	js := cl.JetStream()
	made := map[string]string{}
	for i := range 5 {
		name := fmt.Sprintf("durable%d", i)
		if _, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: name, FilterSubject: filter}); err != nil {
			t.Fatalf("client: create %s: %v (the subject is allowed; the guard acts after)", name, err)
		}
		made[name] = "durable"
	}
	for name, cfg := range map[string]jetstream.ConsumerConfig{
		"ondisk":  {Name: "ondisk", FilterSubject: filter, InactiveThreshold: time.Second},
		"forever": {Name: "forever", FilterSubject: filter, MemoryStorage: true, InactiveThreshold: 24 * time.Hour},
	} {
		if _, err := js.CreateConsumer(ctx, stream, cfg); err != nil {
			t.Fatalf("client: create %s: %v", name, err)
		}
		made[name] = "ephemeral " + name
	}
	cjs := coord.JetStream()
	for name, what := range made {
		testutil.EventuallyErr(t, 10*time.Second, fmt.Sprintf("the guard to delete the client's %s consumer %s", what, name), func() error {
			if _, err := cjs.Consumer(ctx, stream, name); !errors.Is(err, jetstream.ErrConsumerNotFound) {
				return fmt.Errorf("still there (lookup: %v)", err)
			}
			return nil
		})
	}

	// The legacy endpoints, an unfiltered create and a filter outside
	// the bucket's keys are not among the client's subjects.
	raw, refused := rawConn(t, srv, dir, "client")
	for _, subj := range []string{
		"$JS.API.CONSUMER.DURABLE.CREATE." + stream + ".old",
		"$JS.API.CONSUMER.CREATE." + stream,
		"$JS.API.CONSUMER.CREATE." + stream + ".unfiltered",
		"$JS.API.CONSUMER.CREATE." + stream + ".x.$KV.scanplane-blocks.>",
	} {
		publishRefused(t, raw, refused, subj, []byte(`{"stream_name":"`+stream+`","config":{"durable_name":"old"}}`))
	}

	// The client's watch (an ordered consumer) works and is left alone.
	climeta, err := cl.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	watched := make(chan uint64, 16)
	go func() {
		_ = climeta.Watch(wctx, func(table string, gen uint64) { watched <- gen })
	}()
	select {
	case gen := <-watched:
		if gen != 1 {
			t.Fatalf("watch: generation %d, want 1", gen)
		}
	case <-wctx.Done():
		t.Fatal("the client's metadata watch saw no table")
	}
	if err := cmeta.Publish(ctx, &messages.TableMeta{Name: "t", Generation: 2,
		Tablets: []*messages.TabletMeta{{Ref: &messages.TabletRef{Table: "t", Generation: 2}}}}, 1); err != nil {
		t.Fatal(err)
	}
	for gen := uint64(0); gen != 2; {
		select {
		case gen = <-watched:
		case <-wctx.Done():
			t.Fatal("the client's metadata watch missed generation 2")
		}
	}
	// The guard deleted the client's made consumers, not its watch's.
	if n := srv.ConsumersDeleted(); n != uint64(len(made)) {
		t.Fatalf("the guard deleted %d consumers, want the %d made", n, len(made))
	}
}

// TestNATSClusterConsumerGuard: on a secured 3-node cluster, a durable
// consumer (three replicas, a Raft group) that the client certificate
// creates through one node is deleted by the guards, while a scan
// server's metadata watch through another node is left alone: it sees
// the generation published after the delete. On failure the test prints
// its trace: its steps, what the watch delivered, the scan server
// connection's log, the nodes' warnings and the stream's consumers.
func TestNATSClusterConsumerGuard(t *testing.T) {
	ctx := context.Background()
	var trace testutil.SyncBuffer
	start := time.Now()
	note := func(format string, args ...any) {
		fmt.Fprintf(&trace, "%7.3fs "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
	}
	traceLog := func(level slog.Level, args ...any) *slog.Logger {
		return slog.New(slog.NewTextHandler(&trace, &slog.HandlerOptions{Level: level})).With(args...)
	}
	dir := newSecrets(t)
	tc := newCluster(t, 3, func(_ int, addrs []string) []string { return addrs })
	for i := range tc.cfgs {
		secure(t, &tc.cfgs[i], dir, nil)
		tc.cfgs[i].Logger = traceLog(slog.LevelWarn, "node", i)
	}
	tc.startAndWait(0, 3)
	note("cluster up")
	cfg := bus.DefaultConfig()
	cfg.URL, cfg.TLS, cfg.Replicas = tc.nodes[0].ClientURL(), roleTLS(t, dir, "coordinator"), 3
	coord, err := bus.Connect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	const stream = "KV_scanplane-meta"
	defer func() {
		if t.Failed() {
			logConsumers(coord, stream, note)
			t.Logf("trace:\n%s", trace.String())
		}
	}()
	cmeta, err := coord.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmeta.Publish(ctx, tableGen("t", 1), 0); err != nil {
		t.Fatal(err)
	}
	note("published generation 1")
	ss := roleConnLog(t, tc.nodes[2].ClientURL(), dir, "scanserver", traceLog(slog.LevelInfo, "conn", "scanserver"))
	smeta, err := ss.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watched := make(chan uint64, 16)
	watchErr := make(chan error, 1)
	go func() {
		watchErr <- smeta.Watch(wctx, func(table string, gen uint64) {
			note("watch delivered table %q generation %d", table, gen)
			select {
			case watched <- gen:
			case <-wctx.Done():
			}
		})
	}()

	cl := roleConn(t, tc.nodes[1], dir, "client")
	if _, err := cl.JetStream().CreateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "kept", FilterSubject: "$KV.scanplane-meta.>"}); err != nil {
		t.Fatal(err)
	}
	note("client created durable consumer")
	guardDeleted := func() uint64 {
		var n uint64
		for _, node := range tc.nodes {
			n += node.ConsumersDeleted()
		}
		return n
	}
	// Gone, and by a guard: a lookup racing the creation can also answer
	// not found. A lookup of a consumer whose group is being removed can
	// go unanswered: each one is bounded, so a slow answer costs a try,
	// not the wait.
	testutil.EventuallyErr(t, 15*time.Second, "a guard to delete the client's durable consumer", func() error {
		lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := coord.JetStream().Consumer(lctx, stream, "kept")
		if errors.Is(err, jetstream.ErrConsumerNotFound) && guardDeleted() > 0 {
			return nil
		}
		return fmt.Errorf("lookup: %v, guards deleted %d", err, guardDeleted())
	})
	note("guards deleted the durable consumer")
	if err := cmeta.Publish(ctx, tableGen("t", 2), 1); err != nil {
		t.Fatal(err)
	}
	note("published generation 2")
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for gen := uint64(0); gen != 2; {
		select {
		case gen = <-watched:
		case err := <-watchErr:
			if err != nil {
				t.Fatalf("the scan server's metadata watch: %v", err)
			}
			watchErr = nil // set up; it delivers from its own goroutine
		case <-deadline.C:
			t.Fatal("the scan server's metadata watch missed generation 2 (30 s after its publish)")
		}
	}
	if deleted := guardDeleted(); deleted != 1 {
		t.Fatalf("the guards deleted %d consumers, want 1 (the durable)", deleted)
	}
}

// logConsumers notes the stream's state and its consumers: which exist,
// on which node, what each delivered and has pending.
func logConsumers(c *bus.Conn, stream string, note func(string, ...any)) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.JetStream().Stream(ctx, stream)
	if err != nil {
		note("stream %s: %v", stream, err)
		return
	}
	info := st.CachedInfo()
	note("stream %s: last seq %d, leader %s", stream, info.State.LastSeq, info.Cluster.Leader)
	lister := st.ListConsumers(ctx)
	for ci := range lister.Info() {
		note("consumer %s on %s: durable %q, deliver subject %q, delivered stream seq %d, pending %d, last active %v",
			ci.Name, ci.Cluster.Leader, ci.Config.Durable, ci.Config.DeliverSubject, ci.Delivered.Stream, ci.NumPending, ci.Delivered.Last)
	}
	if err := lister.Err(); err != nil {
		note("list consumers: %v", err)
	}
}
