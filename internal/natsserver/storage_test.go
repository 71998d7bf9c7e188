package natsserver_test

// Storage faults on a real embedded JetStream server: bytes flipped in the
// server's message-block files (running, and after a restart), a store
// that stops answering, and a store that is full.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/natsserver"
	"github.com/scanplane/scanplane/tablets"
)

// storeServer starts an embedded server over dir on port (-1 = any) and
// returns it with its port.
func storeServer(t *testing.T, dir string, port int, maxStore int64) (*natsserver.EmbeddedServer, int) {
	t.Helper()
	cfg := natsserver.DefaultServerConfig()
	cfg.Port, cfg.StoreDir, cfg.MaxStore = port, dir, maxStore
	srv, err := natsserver.StartServer(cfg)
	if err != nil {
		t.Fatalf("StartServer: %v", err)
	}
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return srv, p
}

func dial(t testing.TB, srv *natsserver.EmbeddedServer, mod func(*bus.Config)) *bus.Conn {
	t.Helper()
	cfg := bus.DefaultConfig()
	cfg.URL, cfg.Name = srv.ClientURL(), t.Name()
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

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// blockFiles lists the message-block files of a KV bucket's stream.
func blockFiles(t *testing.T, storeDir, bucket string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(storeDir, "jetstream", "$G", "streams", "KV_"+bucket, "msgs", "*.blk"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no block files of bucket %s under %s (%v)", bucket, storeDir, err)
	}
	return files
}

// flipBytes inverts n bytes at each fraction of the file, in place.
func flipBytes(t *testing.T, path string, n int, at ...float64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	for _, frac := range at {
		off := int64(float64(st.Size()) * frac)
		buf := make([]byte, n)
		if _, err := f.ReadAt(buf, off); err != nil {
			t.Fatal(err)
		}
		for i := range buf {
			buf[i] ^= 0xff
		}
		if _, err := f.WriteAt(buf, off); err != nil {
			t.Fatal(err)
		}
	}
}

// readBack gets every key and sorts the outcomes: identical bytes, an
// error wrapping ErrCorrupt, one wrapping ErrNotFound. Any other outcome
// fails the test; so does a Get that takes longer than the caller's
// context (30s, far above OpTimeout) — a hang.
func readBack(t *testing.T, bs *bus.BlockStore, want map[string][]byte, allowMissing bool) (ok, corrupt, missing int, slowest time.Duration) {
	t.Helper()
	for key, data := range want {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		got, err := bs.Get(ctx, key)
		took := time.Since(start)
		cerr := ctx.Err()
		cancel()
		slowest = max(slowest, took)
		switch {
		case cerr != nil:
			t.Fatalf("Get %s hung until the caller's deadline: %v", key, err)
		case err == nil && bytes.Equal(got, data):
			ok++
		case err == nil:
			t.Fatalf("Get %s returned %d wrong bytes without an error", key, len(got))
		case errors.Is(err, bus.ErrCorrupt):
			corrupt++
		case allowMissing && errors.Is(err, bus.ErrNotFound):
			missing++
		default:
			t.Fatalf("Get %s of a damaged store: %v; want the value or an error wrapping bus.ErrCorrupt", key, err)
		}
	}
	return ok, corrupt, missing, slowest
}

// TestBlockStoreCorruptOnDisk: bytes flipped in a JetStream block file.
// A running server answers a read of the damaged message with "not
// found" (and logs nothing); BlockStore.Get must report it as ErrCorrupt,
// at once. After a restart the server drops damaged records (and may
// truncate the rest of their file): those keys are ErrCorrupt or
// ErrNotFound, never wrong bytes, never a hang, and the store stays
// usable.
func TestBlockStoreCorruptOnDisk(t *testing.T) {
	dir := t.TempDir()
	srv, port := storeServer(t, dir, -1, 0)
	bs, err := dial(t, srv, nil).BlockStore(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := putRandomBlocks(t, bs, 120, 1)
	// Restart once so that the server reads blocks from disk, not from
	// the cache it keeps of blocks it wrote recently.
	srv.Close()
	srv, _ = storeServer(t, dir, port, 0)
	bs, err = dial(t, srv, nil).BlockStore(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	files := blockFiles(t, dir, bus.DefaultConfig().BlocksBucket)
	for _, f := range files {
		flipBytes(t, f, 8, 0.3, 0.7)
	}
	ok, corrupt, _, slowest := readBack(t, bs, want, false)
	t.Logf("running server, %d block files damaged at 2 places each: %d keys read back intact, %d ErrCorrupt; slowest Get %v", len(files), ok, corrupt, slowest)
	if corrupt == 0 {
		t.Fatal("no Get reported the damage")
	}

	// Corrupt, then restart: what a user does next.
	srv.Close()
	srv, _ = storeServer(t, dir, port, 0)
	bs, err = dial(t, srv, nil).BlockStore(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ok, corrupt, missing, slowest := readBack(t, bs, want, true)
	t.Logf("after a restart: %d intact, %d ErrCorrupt, %d ErrNotFound (dropped by the server's recovery); slowest Get %v", ok, corrupt, missing, slowest)
	if corrupt+missing == 0 {
		t.Fatal("after the restart no Get reported the damage")
	}
	// The store stays usable: deleting a damaged key returns (the server
	// keeps a damaged message it cannot load, so Get may still say
	// ErrCorrupt), and new keys are written and read.
	ctx := ctxFor(t, 30*time.Second)
	for key := range want {
		if _, err := bs.Get(ctx, key); err == nil {
			continue
		}
		if err := bs.Delete(ctx, key); err != nil {
			t.Fatalf("Delete of damaged %s: %v", key, err)
		}
		if _, err := bs.Get(ctx, key); !errors.Is(err, bus.ErrNotFound) && !errors.Is(err, bus.ErrCorrupt) {
			t.Fatalf("Get of deleted damaged %s: %v, want ErrNotFound or ErrCorrupt", key, err)
		}
	}
	if err := bs.Put(ctx, "t.g2.t0.beef.b0", []byte("new")); err != nil {
		t.Fatalf("Put after the damage: %v", err)
	}
	if got, err := bs.Get(ctx, "t.g2.t0.beef.b0"); err != nil || string(got) != "new" {
		t.Fatalf("Get after the damage: %q, %v", got, err)
	}
}

// TestStoreOpTimeout: a store that does not answer (the server is gone,
// the connection keeps reconnecting) fails each operation with
// ErrUnavailable after Config.OpTimeout, not at the caller's deadline,
// and never as the caller's context.DeadlineExceeded.
func TestStoreOpTimeout(t *testing.T) {
	srv, _ := storeServer(t, t.TempDir(), -1, 0)
	c := dial(t, srv, func(c *bus.Config) { c.OpTimeout = 300 * time.Millisecond })
	ctx := ctxFor(t, 30*time.Second)
	bs, err := c.BlockStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := c.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := bs.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	ops := map[string]func() error{
		"Get":     func() error { _, err := bs.Get(ctx, "k"); return err },
		"Put":     func() error { return bs.Put(ctx, "k", []byte("w")) },
		"Delete":  func() error { return bs.Delete(ctx, "k") },
		"Current": func() error { _, err := ms.Current(ctx, "t"); return err },
	}
	for name, op := range ops {
		start := time.Now()
		err := op()
		took := time.Since(start)
		switch {
		case ctx.Err() != nil:
			t.Fatalf("%s on a dead server ran into the caller's 30s deadline: %v", name, err)
		case !errors.Is(err, bus.ErrUnavailable):
			t.Fatalf("%s on a dead server: %v, want an error wrapping ErrUnavailable", name, err)
		case errors.Is(err, context.DeadlineExceeded):
			t.Fatalf("%s: %v must not pass for the caller's context.DeadlineExceeded", name, err)
		}
		t.Logf("%s on a dead server: %v after %v", name, err, took.Round(time.Millisecond))
	}
}

// storeBytes is what the blocks bucket holds now.
func storeBytes(t *testing.T, c *bus.Conn) (msgs, size uint64) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	st, err := c.JetStream().Stream(ctx, "KV_"+bus.DefaultConfig().BlocksBucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs, info.State.Bytes
}

// TestIngestIntoFullStore: an ingest that does not fit the JetStream
// store fails with ErrStoreFull and removes every block it wrote, even
// though the store is full at that moment; a later small ingest then
// succeeds and reads back exactly.
func TestIngestIntoFullStore(t *testing.T) {
	const limit = 6 << 20
	srv, _ := storeServer(t, t.TempDir(), -1, limit)
	c := dial(t, srv, nil)
	ctx := ctxFor(t, 60*time.Second)
	bs, err := c.BlockStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := c.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A table that is there before and must survive.
	small := tablets.GenerateRows(1000)
	if _, err := tablets.Ingest(ctx, bs, ms, "kept", small, tablets.DefaultIngestConfig()); err != nil {
		t.Fatal(err)
	}
	_, before := storeBytes(t, c)

	big := tablets.GenerateRows(150000) // ~11 MB of blocks
	_, err = tablets.Ingest(ctx, bs, ms, "big", big, tablets.DefaultIngestConfig())
	if !errors.Is(err, bus.ErrStoreFull) {
		t.Fatalf("ingest of %d rows into a %d-byte store: %v, want an error wrapping bus.ErrStoreFull", len(big), limit, err)
	}
	t.Logf("failed ingest: %v", err)
	msgs, after := storeBytes(t, c)
	t.Logf("blocks bucket: %d bytes before the failed ingest, %d after (%d messages)", before, after, msgs)
	if after > before {
		t.Fatalf("the failed ingest left %d bytes of blocks behind", after-before)
	}
	if gen, err := ms.Current(ctx, "big"); err != nil || gen != 0 {
		t.Fatalf("failed table: generation %d, %v; want none", gen, err)
	}
	if _, err := ms.Get(ctx, "big", 1); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("failed table's generation 1 metadata: %v, want ErrNotFound", err)
	}

	// A later small ingest succeeds and reads back; the kept table too.
	for _, table := range []string{"later", "kept"} {
		if table == "later" {
			if _, err := tablets.Ingest(ctx, bs, ms, table, small, tablets.DefaultIngestConfig()); err != nil {
				t.Fatalf("small ingest after the failed one: %v", err)
			}
		}
		gen, err := ms.Current(ctx, table)
		if err != nil {
			t.Fatal(err)
		}
		tm, err := ms.Get(ctx, table, gen)
		if err != nil {
			t.Fatal(err)
		}
		var got []tablets.Entry
		for _, tab := range tm.GetTablets() {
			it := tablets.NewTabletReader(tab.GetFiles(), tablets.StoreFetcher{Store: bs}).Scan(ctx, tablets.Range{}, nil)
			for it.Next() {
				e := it.Entry()
				got = append(got, tablets.Entry{Key: bytes.Clone(e.Key), Value: bytes.Clone(e.Value)})
			}
			if err := it.Err(); err != nil {
				t.Fatalf("read %s: %v", table, err)
			}
		}
		if len(got) != len(small) {
			t.Fatalf("%s: %d rows, want %d", table, len(got), len(small))
		}
		for i := range got {
			if !bytes.Equal(got[i].Key, small[i].Key) || !bytes.Equal(got[i].Value, small[i].Value) {
				t.Fatalf("%s: row %d differs", table, i)
			}
		}
	}
}

// putRandomBlocks puts n blocks of 48 KiB of seeded random bytes into bs
// and returns them by key.
func putRandomBlocks(t testing.TB, bs *bus.BlockStore, n int, seed uint64) map[string][]byte {
	t.Helper()
	rnd := rand.New(rand.NewPCG(seed, seed+1))
	want := map[string][]byte{}
	for i := range n {
		data := make([]byte, 48<<10)
		for j := range data {
			data[j] = byte(rnd.Uint32())
		}
		key := fmt.Sprintf("t.g1.t0.cafe.b%d", i)
		want[key] = data
		if err := bs.Put(ctxFor(t, 30*time.Second), key, data); err != nil {
			t.Fatal(err)
		}
	}
	return want
}
