package e2e

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/client"
	"github.com/scanplane/scanplane/internal/natsserver"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/internal/testutil/clustertest"
	"github.com/scanplane/scanplane/localcluster"
	"github.com/scanplane/scanplane/tablets"
)

// storageNATS is a NATS server owned by the test (the cluster uses it as
// an external server), so the test can damage its store and restart it on
// the same port and directory.
type storageNATS struct {
	t   *testing.T
	cfg natsserver.ServerConfig
	srv *natsserver.EmbeddedServer
}

// startStorageNATS skips in -short mode and starts an embedded NATS
// server with its own store directory (stopped when the test ends).
func startStorageNATS(t *testing.T) *storageNATS {
	t.Helper()
	clustertest.SkipShort(t)
	n := &storageNATS{t: t, cfg: natsserver.DefaultServerConfig()}
	n.cfg.Port, n.cfg.StoreDir = -1, t.TempDir()
	n.start()
	t.Cleanup(func() { n.srv.Close() })
	return n
}

func (n *storageNATS) start() {
	n.t.Helper()
	srv, err := natsserver.StartServer(n.cfg)
	if err != nil {
		n.t.Fatalf("StartServer: %v", err)
	}
	n.srv = srv
	if n.cfg.Port == -1 {
		u, err := url.Parse(srv.ClientURL())
		if err != nil {
			n.t.Fatal(err)
		}
		if n.cfg.Port, err = strconv.Atoi(u.Port()); err != nil {
			n.t.Fatal(err)
		}
	}
}

func (n *storageNATS) restart() {
	n.t.Helper()
	n.srv.Close()
	n.start()
}

// damageBlockFile inverts 8 bytes in the middle of the oldest message-block
// file of the blocks bucket and returns its path.
func (n *storageNATS) damageBlockFile() string {
	n.t.Helper()
	files, err := filepath.Glob(filepath.Join(n.cfg.StoreDir, "jetstream", "$G", "streams", "KV_"+bus.DefaultConfig().BlocksBucket, "msgs", "*.blk"))
	if err != nil || len(files) == 0 {
		n.t.Fatalf("no block files (%v)", err)
	}
	num := func(p string) int { i, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(p), ".blk")); return i }
	sort.Slice(files, func(i, j int) bool { return num(files[i]) < num(files[j]) })
	f, err := os.OpenFile(files[0], os.O_RDWR, 0)
	if err != nil {
		n.t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		n.t.Fatal(err)
	}
	buf := make([]byte, 8)
	off := st.Size() / 2
	if _, err := f.ReadAt(buf, off); err != nil {
		n.t.Fatal(err)
	}
	for i := range buf {
		buf[i] ^= 0xff
	}
	if _, err := f.WriteAt(buf, off); err != nil {
		n.t.Fatal(err)
	}
	return files[0]
}

// scanUntilError scans the whole table and returns how many rows it got
// (each checked against truth, in order) and the error that ended it.
func scanUntilError(ctx context.Context, c *client.Client, truth []tablets.Entry) (int, error) {
	rows := c.Scan(ctx, table, tablets.Range{}, client.ScanOptions{})
	defer rows.Close()
	i := 0
	for rows.Next() {
		r := rows.Row()
		if i >= len(truth) || !bytes.Equal(r.Key, truth[i].Key) || !bytes.Equal(r.Value, truth[i].Value) {
			return i, errors.New("wrong row " + strconv.Itoa(i) + ": " + string(r.Key))
		}
		i++
	}
	return i, rows.Err()
}

// TestDamagedBlockFileFailsScanPromptly: bytes flipped in a JetStream
// message-block file on disk, as a user would find after a disk fault.
// A full scan must end with exactly the rows before the damaged block and
// then a CORRUPT_BLOCK error naming the block — not hang until its
// deadline — both while the server runs and after it is restarted (when
// it drops the damaged records), and the scan server logs it.
func TestDamagedBlockFileFailsScanPromptly(t *testing.T) {
	ctx := context.Background()
	n := startStorageNATS(t)

	truth := tablets.GenerateRows(100000)
	ingest(t, n.srv.ClientURL(), truth, 8)
	// Restart once so the server reads blocks from disk rather than from
	// the cache it keeps of what it wrote last.
	n.restart()

	dataDir := t.TempDir()
	clustertest.Start(t, ctx, localcluster.Config{Hosts: 2, ServersPerHost: 1, DataDir: dataDir,
		NATSURL: n.srv.ClientURL(), Heartbeat: 200 * time.Millisecond, ReadyTimeout: 60 * time.Second})
	c := clustertest.Client(t, ctx, n.srv.ClientURL(), nil)

	damaged := n.damageBlockFile()
	t.Logf("damaged %s", damaged)
	const deadline = 60 * time.Second
	for _, phase := range []string{"running server", "after a restart"} {
		if phase == "after a restart" {
			n.restart()
		}
		sctx, cancel := context.WithTimeout(ctx, deadline)
		start := time.Now()
		got, err := scanUntilError(sctx, c, truth)
		took := time.Since(start)
		hitDeadline := sctx.Err() != nil
		cancel()
		var se *client.ScanError
		switch {
		case hitDeadline:
			t.Fatalf("%s: the full scan returned %d correct rows and then ran into its %v deadline: %v; want a CORRUPT_BLOCK error", phase, got, deadline, err)
		case !errors.As(err, &se) || se.Code != client.CodeCorruptBlock:
			t.Fatalf("%s: the full scan returned %d rows and %v; want a CORRUPT_BLOCK error", phase, got, err)
		case got >= len(truth):
			t.Fatalf("%s: the scan returned every row and then %v", phase, err)
		}
		t.Logf("%s: %d correct rows, then after %v: %v", phase, got, took.Round(time.Millisecond), err)
	}
	// The scan servers logged it.
	logs, _ := filepath.Glob(filepath.Join(dataDir, "logs", "host*.log"))
	var warned int
	for _, p := range logs {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "level=WARN") && strings.Contains(line, "CORRUPT_BLOCK") {
				warned++
			}
		}
	}
	if warned == 0 {
		t.Fatalf("no scan server logged the damaged block at warn (logs %v)", logs)
	}
}

// TestClientSeesIngestAfterNATSRestart: a client that lived through a
// restart of the NATS server (same port, same store) sees a table
// generation ingested after the restart within a few seconds, as it does
// without the restart — its metadata watch re-synchronises on reconnect
// instead of waiting for the JetStream library to notice its consumer is
// gone.
func TestClientSeesIngestAfterNATSRestart(t *testing.T) {
	ctx := context.Background()
	n := startStorageNATS(t)
	newGeneration := func() uint64 {
		t.Helper()
		return ingest(t, n.srv.ClientURL(), tablets.GenerateRows(1000), tablets.DefaultIngestConfig().Tablets).GetGeneration()
	}
	newGeneration()
	clustertest.Start(t, ctx, localcluster.Config{Hosts: 1, ServersPerHost: 1,
		NATSURL: n.srv.ClientURL(), Heartbeat: 200 * time.Millisecond, ReadyTimeout: 60 * time.Second})
	c := clustertest.Client(t, ctx, n.srv.ClientURL(), nil)

	const bound = 3 * time.Second
	sees := func(label string) {
		t.Helper()
		gen := newGeneration()
		start := time.Now()
		var tm client.TableInfo
		var err error
		if !testutil.Poll(bound, func() bool {
			tm, err = c.Table(ctx, table)
			return err == nil && tm.Generation == gen
		}) {
			t.Fatalf("%s: the client still reads generation %d (%v) %v after generation %d was ingested",
				label, tm.Generation, err, time.Since(start).Round(time.Millisecond), gen)
		}
		t.Logf("%s: the client read generation %d %v after its ingest returned", label, gen, time.Since(start).Round(time.Millisecond))
	}
	sees("no restart")
	n.restart()
	sees("first ingest after a NATS restart")
	sees("second ingest after a NATS restart")
}
