package bus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/tablets/storetest"
)

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestBlockStore(t *testing.T) {
	srv := startServer(t)
	c := connect(t, srv)
	ctx := testCtx(t)
	bs, err := c.BlockStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A second binding (another process) sees the same bucket.
	bs2, err := connect(t, srv).BlockStore(ctx)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := bs.Get(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get missing: %v", err)
	}
	block := randomBytes(64<<10, 1)
	keys := []string{"f0001/b000000", "f0001/index", "odd key:1=2", ".lead", "a..b"}
	for i, k := range keys {
		data := append([]byte{byte(i)}, block...)
		if err := bs.Put(ctx, k, data); err != nil {
			t.Fatalf("Put %q: %v", k, err)
		}
	}
	for i, k := range keys {
		got, err := bs2.Get(ctx, k)
		if err != nil {
			t.Fatalf("Get %q: %v", k, err)
		}
		if want := append([]byte{byte(i)}, block...); !bytes.Equal(got, want) {
			t.Fatalf("Get %q: %d bytes, differs from the %d put", k, len(got), len(want))
		}
	}
	// Overwrite, empty value.
	if err := bs.Put(ctx, keys[0], nil); err != nil {
		t.Fatal(err)
	}
	if got, err := bs.Get(ctx, keys[0]); err != nil || len(got) != 0 {
		t.Fatalf("Get after empty put: %d bytes, %v", len(got), err)
	}
	// Delete, twice, and a missing key.
	for _, k := range []string{keys[1], keys[1], "never-there"} {
		if err := bs.Delete(ctx, k); err != nil {
			t.Fatalf("Delete %q: %v", k, err)
		}
	}
	if _, err := bs.Get(ctx, keys[1]); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get deleted: %v", err)
	}
	// Put after delete works.
	if err := bs.Put(ctx, keys[1], []byte("again")); err != nil {
		t.Fatal(err)
	}
	if got, err := bs.Get(ctx, keys[1]); err != nil || string(got) != "again" {
		t.Fatalf("Get after re-put: %q, %v", got, err)
	}
	// Too large is refused before sending.
	if err := bs.Put(ctx, "big", make([]byte, MaxBlockBytes+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Put too large: %v", err)
	}
	if err := bs.Put(ctx, "", []byte("x")); err == nil {
		t.Fatal("Put with empty key succeeded")
	}
}

func tableMeta(name string, gen uint64, tag string) *messages.TableMeta {
	return &messages.TableMeta{
		Name:        name,
		Generation:  gen,
		SplitPoints: [][]byte{[]byte("g"), []byte("p")},
		Tablets: []*messages.TabletMeta{
			{Ref: &messages.TabletRef{Table: name, Generation: gen, Index: 0}, Files: []*messages.FileRef{{Id: tag + "-f0", Blocks: 3}}},
			{Ref: &messages.TabletRef{Table: name, Generation: gen, Index: 1}},
			{Ref: &messages.TabletRef{Table: name, Generation: gen, Index: 2}},
		},
		Rows: 42,
	}
}

// blockStore binds c's blocks bucket; a failure fails t.
func blockStore(t *testing.T, c *Conn) *BlockStore {
	t.Helper()
	bs, err := c.BlockStore(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

func metaStore(t *testing.T, c *Conn) *MetaStore {
	t.Helper()
	ms, err := c.MetaStore(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// MetaStore passes the MetaStore conformance suite; every store that
// open returns has its own connection to one server.
func TestMetaStore(t *testing.T) {
	storetest.TestMetaStore(t, storetest.Backend{
		Fresh: func(t *testing.T) func() tablets.MetaStore {
			srv := startServer(t)
			return func() tablets.MetaStore { return metaStore(t, connect(t, srv)) }
		},
		NotFound: ErrNotFound,
		Conflict: ErrConflict,
	})
}

func TestMetaStoreWatch(t *testing.T) {
	srv := startServer(t)
	ms := metaStore(t, connect(t, srv))
	ctx := testCtx(t)
	if err := ms.Publish(ctx, tableMeta("a", 1, "x"), 0); err != nil {
		t.Fatal(err)
	}
	type change struct {
		table string
		gen   uint64
	}
	var mu sync.Mutex
	var seen []change
	wctx, cancel := context.WithCancel(ctx)
	if err := metaStore(t, connect(t, srv)).Watch(wctx, func(table string, gen uint64) {
		mu.Lock()
		seen = append(seen, change{table, gen})
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	snapshot := func() []change {
		mu.Lock()
		defer mu.Unlock()
		return append([]change(nil), seen...)
	}
	// Initial values have been delivered when Watch returns.
	if s := snapshot(); len(s) != 1 || s[0] != (change{"a", 1}) {
		t.Fatalf("initial values = %v", s)
	}
	if err := ms.Publish(ctx, tableMeta("a", 2, "y"), 1); err != nil {
		t.Fatal(err)
	}
	if err := ms.Publish(ctx, tableMeta("b.c", 7, "z"), 0); err != nil {
		t.Fatal(err)
	}
	// Writing other keys is not a pointer change.
	if _, err := ms.kv.Put(ctx, "cluster.coordinator", []byte("x")); err != nil {
		t.Fatal(err)
	}
	want := []change{{"a", 1}, {"a", 2}, {"b.c", 7}}
	eventually(t, "watch sees the switches", func() bool { return len(snapshot()) >= len(want) })
	if s := snapshot(); fmt.Sprint(s) != fmt.Sprint(want) {
		t.Fatalf("watch saw %v, want %v", s, want)
	}
	cancel()
	// After the context ends no more calls arrive: publish, then prove the
	// watch goroutine would have had time by round-tripping through the
	// server with another watch.
	if err := ms.Publish(ctx, tableMeta("a", 3, "w"), 2); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var once sync.Once
	wctx2, cancel2 := context.WithCancel(ctx)
	defer cancel2()
	if err := ms.Watch(wctx2, func(table string, gen uint64) {
		if table == "a" && gen == 3 {
			once.Do(func() { close(done) })
		}
	}); err != nil {
		t.Fatal(err)
	}
	receive(t, done)
	if s := snapshot(); len(s) != len(want) {
		t.Fatalf("watch called after its context ended: %v", s)
	}
}

// benchKeys is how many 64 KiB blocks the read benchmarks cycle through.
const benchKeys = 64

func benchKey(i int) string { return fmt.Sprintf("bench/f0/b%06d", i%benchKeys) }

// benchBlock is the 64 KiB block the read benchmarks store under every key.
func benchBlock() []byte { return randomBytes(64<<10, 7) }

// benchBlockStore returns a BlockStore on a fresh server holding
// benchBlock() under benchKey(0..benchKeys-1), and that block.
func benchBlockStore(b *testing.B) (*BlockStore, []byte) {
	b.Helper()
	ctx := context.Background()
	bs, err := connect(b, startServer(b)).BlockStore(ctx)
	if err != nil {
		b.Fatal(err)
	}
	block := benchBlock()
	for i := range benchKeys {
		if err := bs.Put(ctx, benchKey(i), block); err != nil {
			b.Fatal(err)
		}
	}
	return bs, block
}

// Reading a 64 KiB block from JetStream KV over a loopback connection.
func BenchmarkBlockStoreGet64K(b *testing.B) {
	bs, block := benchBlockStore(b)
	ctx := context.Background()
	b.SetBytes(int64(len(block)))
	for i := 0; b.Loop(); i++ {
		data, err := bs.Get(ctx, benchKey(i))
		if err != nil || len(data) != len(block) {
			b.Fatalf("Get: %d bytes, %v", len(data), err)
		}
	}
}

// The same from several goroutines sharing one connection, as the
// scan-server actors of a host do.
func BenchmarkBlockStoreGet64KParallel(b *testing.B) {
	bs, block := benchBlockStore(b)
	ctx := context.Background()
	b.SetBytes(int64(len(block)))
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			data, err := bs.Get(ctx, benchKey(i))
			if err != nil || len(data) != len(block) {
				b.Errorf("Get: %d bytes, %v", len(data), err)
				return
			}
		}
	})
}

// For comparison (docs/storage.md, blocks; MEASUREMENTS.md, "Reading blocks"): the
// same read from a JetStream object store, which BlockStore does not use.
func BenchmarkObjectStoreGet64K(b *testing.B) {
	c := connect(b, startServer(b))
	ctx := context.Background()
	obs, err := c.JetStream().CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "bench-objects"})
	if err != nil {
		b.Fatal(err)
	}
	block := benchBlock()
	for i := range benchKeys {
		if _, err := obs.PutBytes(ctx, benchKey(i), block); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(block)))
	for i := 0; b.Loop(); i++ {
		data, err := obs.GetBytes(ctx, benchKey(i))
		if err != nil || len(data) != len(block) {
			b.Fatalf("GetBytes: %d bytes, %v", len(data), err)
		}
	}
}

// TestBlockStorePutAsync: values sent with PutAsync are stored once their
// wait returns nil; a value the stream refuses (over its MaxBytes) and a
// bucket whose stream is gone give errors wrapping a sentinel from wait,
// and a refused value is not stored.
func TestBlockStorePutAsync(t *testing.T) {
	srv := startServer(t)
	c := connect(t, srv)
	ctx := testCtx(t)
	bs, err := c.BlockStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	waits := make([]func() error, n)
	for i := range waits {
		if waits[i], err = bs.PutAsync(ctx, fmt.Sprintf("t.g1.b%03d", i), randomBytes(8<<10, uint64(i))); err != nil {
			t.Fatalf("PutAsync %d: %v", i, err)
		}
	}
	for i, wait := range waits {
		if err := wait(); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	for i := range n {
		got, err := bs.Get(ctx, fmt.Sprintf("t.g1.b%03d", i))
		if err != nil || !bytes.Equal(got, randomBytes(8<<10, uint64(i))) {
			t.Fatalf("Get %d: %d bytes, %v; want the value put", i, len(got), err)
		}
	}
	if _, err := bs.PutAsync(ctx, "big", make([]byte, MaxBlockBytes+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("PutAsync too large: %v, want ErrTooLarge", err)
	}
	if _, err := bs.PutAsync(ctx, "", []byte("x")); err == nil {
		t.Fatal("PutAsync with an empty key succeeded")
	}

	// A stream at its MaxBytes refuses: the error comes from wait.
	js := c.JetStream()
	st, err := js.Stream(ctx, "KV_"+c.cfg.BlocksBucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	scfg := info.Config
	scfg.MaxBytes = int64(info.State.Bytes) + 100<<10
	if _, err := js.UpdateStream(ctx, scfg); err != nil {
		t.Fatal(err)
	}
	var refused []string
	var stored int
	for i := range 8 {
		key := fmt.Sprintf("full.b%d", i)
		wait, err := bs.PutAsync(ctx, key, randomBytes(64<<10, uint64(1000+i)))
		if err != nil {
			t.Fatalf("PutAsync %s: %v", key, err)
		}
		switch err := wait(); {
		case err == nil:
			stored++
		case errors.Is(err, ErrStoreFull):
			refused = append(refused, key)
		default:
			t.Fatalf("put %s into a full stream: %v, want nil or ErrStoreFull", key, err)
		}
	}
	if len(refused) == 0 || stored == 0 {
		t.Fatalf("into a stream with room for one more value: %d stored, %d refused; want both", stored, len(refused))
	}
	for _, key := range refused {
		if _, err := bs.Get(ctx, key); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get of refused %s: %v, want ErrNotFound", key, err)
		}
	}

	// Without the bucket's stream no JetStream server answers.
	if err := js.DeleteStream(ctx, "KV_"+c.cfg.BlocksBucket); err != nil {
		t.Fatal(err)
	}
	wait, err := bs.PutAsync(ctx, "gone.b0", []byte("x"))
	if err == nil {
		err = wait()
	}
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("put without the bucket's stream: %v, want ErrUnavailable", err)
	}
}
