package natsserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scanplane/scanplane/internal/testutil"

	"github.com/scanplane/scanplane/bus"
)

// freeBytes is the space left on the file system of dir.
func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// fill writes a file into dir until leave bytes are free and returns it.
func fill(t *testing.T, dir string, leave int64) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for freeBytes(t, dir) > leave+int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// TestFullDiskRecovers: a JetStream server whose disk fills (something
// else took the space its limit counted on) refuses the writes that do
// not fit, and once space is freed the store takes writes and reads
// again, without a restart.
func TestFullDiskRecovers(t *testing.T) {
	t.Parallel()
	disk := testutil.Tmpfs(t, 64<<20)
	cfg := DefaultServerConfig()
	cfg.Port, cfg.StoreDir = -1, filepath.Join(disk, "nats")
	srv, err := StartServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	bc := bus.DefaultConfig()
	bc.URL, bc.OpTimeout = srv.ClientURL(), 2*time.Second
	conn, err := bus.Connect(ctx, bc)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	bs, err := conn.BlockStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	block := make([]byte, 64<<10)
	if err := bs.Put(ctx, "before", block); err != nil {
		t.Fatal(err)
	}
	filler := fill(t, disk, 4<<20)
	// Write until JetStream says it is out of space: a write that fails
	// before (a slow server answering after OpTimeout) is no sign of a
	// full disk yet. 20 failed writes bound the wait when it never says so.
	var werr error
	for i, failed := 0, 0; i < 1000 && failed < 20 && !srv.OutOfSpace(); i++ {
		if err := bs.Put(ctx, fmt.Sprintf("b%d", i), block); err != nil {
			werr, failed = err, failed+1
			if !(errors.Is(err, bus.ErrStoreFull) || errors.Is(err, bus.ErrUnavailable)) {
				t.Fatalf("write on a full disk: %v, want ErrStoreFull or ErrUnavailable", err)
			}
		}
	}
	t.Logf("write on a full disk: %v", werr)
	if werr == nil {
		t.Fatal("every write succeeded on a full disk")
	}
	if !srv.OutOfSpace() {
		t.Error("OutOfSpace is false after writes failed on a full disk")
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	testutil.EventuallyErr(t, 30*time.Second, "the store to be back after space was freed", func() error {
		_, gerr := bs.Get(ctx, "before")
		perr := bs.Put(ctx, "after", block)
		if gerr != nil || perr != nil {
			return fmt.Errorf("get %v, put %v", gerr, perr)
		}
		return nil
	})
	t.Logf("store back %v after space was freed", time.Since(freed).Round(time.Millisecond))
	if srv.OutOfSpace() || srv.SpaceRestarts() != 1 {
		t.Errorf("OutOfSpace %v, SpaceRestarts %d after space was freed; want false, 1", srv.OutOfSpace(), srv.SpaceRestarts())
	}
}
