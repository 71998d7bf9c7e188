package tablets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/messages"
)

func TestValidateObjectKey(t *testing.T) {
	good := []string{"a", "t.g1.t0.b12", "t.g1.t0.idx", "A-b_c=d.e", "x.0123456789abcdef"}
	bad := []string{"", ".hidden", "a/b", "../x", "a..b", "a.", "a b", "ä", "a\x00", string(bytes.Repeat([]byte("a"), MaxObjectKeyLen+1))}
	for _, k := range good {
		if err := ValidateObjectKey(k); err != nil {
			t.Errorf("ValidateObjectKey(%q) = %v", k, err)
		}
	}
	for _, k := range bad {
		if err := ValidateObjectKey(k); !errors.Is(err, ErrBadName) {
			t.Errorf("ValidateObjectKey(%q) = %v, want ErrBadName", k, err)
		}
	}
}

func TestDirStore(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "sub", "blocks")
	s, err := NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get missing: %v", err)
	}
	if err := s.Delete(ctx, "missing"); err != nil {
		t.Fatalf("Delete missing: %v", err)
	}
	if err := s.Put(ctx, "f.b0", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "f.b0"); err != nil || string(got) != "hello" {
		t.Fatalf("Get = %q, %v", got, err)
	}
	s.Sync = true
	if err := s.Put(ctx, "f.b0", []byte("again")); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(ctx, "f.b0"); string(got) != "again" {
		t.Fatalf("overwrite: %q", got)
	}
	if err := s.Put(ctx, "f.idx", nil); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "f.idx"); err != nil || len(got) != 0 {
		t.Fatalf("empty object: %q, %v", got, err)
	}
	keys, err := s.List(ctx, "f.")
	if err != nil || fmt.Sprint(keys) != "[f.b0 f.idx]" {
		t.Fatalf("List = %v, %v", keys, err)
	}
	if err := s.Delete(ctx, "f.b0"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "f.b0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get deleted: %v", err)
	}
	for _, k := range []string{"", "../escape", "a/b", ".tmp-x", "x/../../y"} {
		if err := s.Put(ctx, k, []byte("x")); !errors.Is(err, ErrBadName) {
			t.Errorf("Put(%q) = %v, want ErrBadName", k, err)
		}
		if _, err := s.Get(ctx, k); !errors.Is(err, ErrBadName) {
			t.Errorf("Get(%q) = %v, want ErrBadName", k, err)
		}
		if err := s.Delete(ctx, k); !errors.Is(err, ErrBadName) {
			t.Errorf("Delete(%q) = %v, want ErrBadName", k, err)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape")); err == nil {
		t.Fatal("path traversal wrote outside the store")
	}
	// No temporary files are left behind.
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		if de.Name()[0] == '.' {
			t.Errorf("leftover %s", de.Name())
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Put(cctx, "c", nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Put with cancelled ctx: %v", err)
	}
	if _, err := NewDirStore(""); !errors.Is(err, ErrBadInput) {
		t.Errorf("NewDirStore(\"\") = %v", err)
	}
}

// Readers racing with writers of the same key see a whole object, never a
// torn one.
func TestDirStoreConcurrent(t *testing.T) {
	ctx := context.Background()
	s, err := NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, b := bytes.Repeat([]byte("a"), 100000), bytes.Repeat([]byte("b"), 100000)
	if err := s.Put(ctx, "k", a); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				data := a
				if (i+w)%2 == 0 {
					data = b
				}
				if err := s.Put(ctx, "k", data); err != nil {
					t.Error(err)
					return
				}
				got, err := s.Get(ctx, "k")
				if err != nil || !(bytes.Equal(got, a) || bytes.Equal(got, b)) {
					t.Errorf("torn read: %d bytes, %v", len(got), err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func testMeta(name string, gen uint64, tag string) *messages.TableMeta {
	return &messages.TableMeta{
		Name:        name,
		Generation:  gen,
		SplitPoints: [][]byte{[]byte(tag)},
		Tablets: []*messages.TabletMeta{
			{Ref: &messages.TabletRef{Table: name, Generation: gen, Index: 0, EndRow: []byte(tag)}},
			{Ref: &messages.TabletRef{Table: name, Generation: gen, Index: 1, PrevEndRow: []byte(tag)}},
		},
		Rows: 42,
	}
}

func TestDirMetaStore(t *testing.T) {
	ctx := context.Background()
	ms, err := NewDirMetaStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if g, err := ms.Current(ctx, "users"); err != nil || g != 0 {
		t.Fatalf("Current of missing table = %d, %v", g, err)
	}
	if _, err := ms.Get(ctx, "users", 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get missing: %v", err)
	}
	if ts, err := ms.Tables(ctx); err != nil || len(ts) != 0 {
		t.Fatalf("Tables = %v, %v", ts, err)
	}
	m1 := testMeta("users", 1, "a")
	if err := ms.Publish(ctx, m1, 0); err != nil {
		t.Fatal(err)
	}
	if err := ms.Publish(ctx, m1, 0); err != nil {
		t.Fatalf("repeated publish: %v", err)
	}
	if g, err := ms.Current(ctx, "users"); err != nil || g != 1 {
		t.Fatalf("Current = %d, %v", g, err)
	}
	if got, err := ms.Get(ctx, "users", 1); err != nil || !proto.Equal(got, m1) {
		t.Fatalf("Get = %v, %v", got, err)
	}
	if err := ms.Publish(ctx, testMeta("apps", 1, "b"), 0); err != nil {
		t.Fatal(err)
	}
	if ts, _ := ms.Tables(ctx); fmt.Sprint(ts) != "[apps users]" {
		t.Fatalf("Tables = %v", ts)
	}
	m2 := testMeta("users", 2, "c")
	if err := ms.Publish(ctx, m2, 1); err != nil {
		t.Fatal(err)
	}
	if err := ms.Publish(ctx, testMeta("users", 3, "d"), 1); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale prev: %v", err)
	}
	if _, err := ms.Get(ctx, "users", 3); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a conflicting publish left its generation: %v", err)
	}
	if err := ms.Publish(ctx, testMeta("users", 4, "e"), 0); !errors.Is(err, ErrConflict) {
		t.Fatalf("prev 0 over an existing table: %v", err)
	}
	if err := ms.Publish(ctx, testMeta("users", 2, "x"), 1); !errors.Is(err, ErrConflict) {
		t.Fatalf("different bytes as an existing generation: %v", err)
	}
	if err := ms.Publish(ctx, testMeta("users", 2, "x"), 2); !errors.Is(err, ErrBadInput) {
		t.Fatalf("generation <= prev: %v", err)
	}
	if err := ms.Publish(ctx, testMeta("bad/name", 1, "x"), 0); !errors.Is(err, ErrBadName) {
		t.Fatalf("bad name: %v", err)
	}
	if err := ms.DeleteGeneration(ctx, "users", 2); !errors.Is(err, ErrConflict) {
		t.Fatalf("delete current: %v", err)
	}
	for _, g := range []uint64{1, 1, 9, 0} {
		if err := ms.DeleteGeneration(ctx, "users", g); err != nil {
			t.Fatalf("DeleteGeneration %d: %v", g, err)
		}
	}
	if err := ms.DeleteGeneration(ctx, "nosuch", 1); err != nil {
		t.Fatalf("DeleteGeneration of a missing table: %v", err)
	}
	if _, err := ms.Get(ctx, "users", 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get deleted: %v", err)
	}
	if got, err := ms.Get(ctx, "users", 2); err != nil || !proto.Equal(got, m2) {
		t.Fatalf("Get current = %v, %v", got, err)
	}
	// A second store over the same directory sees the same state.
	ms2, _ := NewDirMetaStore(ms.Dir)
	if g, _ := ms2.Current(ctx, "users"); g != 2 {
		t.Fatalf("second store: Current = %d", g)
	}
	// Corruption is reported, not misread.
	if err := os.WriteFile(filepath.Join(ms.Dir, "users", genFile(2)), []byte{0xff, 0xff}, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ms.Get(ctx, "users", 2); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt generation: %v", err)
	}
	if err := os.WriteFile(filepath.Join(ms.Dir, "users", currentFile), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ms.Current(ctx, "users"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt CURRENT: %v", err)
	}
	if _, err := ms.Current(ctx, "../x"); !errors.Is(err, ErrBadName) {
		t.Fatalf("bad name: %v", err)
	}
}

// Publishers racing from the same prev, each through its own store over
// one directory (so the file lock, not the mutex, decides): exactly one
// wins and the current generation is the winner's.
func TestDirMetaStoreConcurrentPublish(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, sameGen := range []bool{true, false} {
		t.Run(fmt.Sprintf("sameGen=%v", sameGen), func(t *testing.T) {
			table := fmt.Sprintf("race%v", sameGen)
			base, _ := NewDirMetaStore(dir)
			if err := base.Publish(ctx, testMeta(table, 1, "base"), 0); err != nil {
				t.Fatal(err)
			}
			const n = 8
			errs := make([]error, n)
			metas := make([]*messages.TableMeta, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				gen := uint64(2)
				if !sameGen {
					gen = uint64(2 + i)
				}
				metas[i] = testMeta(table, gen, fmt.Sprintf("w%d", i))
				st, _ := NewDirMetaStore(dir)
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					errs[i] = st.Publish(ctx, metas[i], 1)
				}()
			}
			close(start)
			wg.Wait()
			winner := soleWinner(t, "publisher", errs)
			cur, _ := base.Current(ctx, table)
			got, err := base.Get(ctx, table, cur)
			if err != nil || !proto.Equal(got, metas[winner]) {
				t.Fatalf("current = %d %v, %v; want publisher %d's", cur, got, err, winner)
			}
		})
	}
}

// soleWinner checks the errors of racing writers (called who in messages):
// exactly one succeeded and every other lost with ErrConflict. It returns
// the winner's index.
func soleWinner(t *testing.T, who string, errs []error) int {
	t.Helper()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("%ss %d and %d both won", who, winner, i)
			}
			winner = i
		case !errors.Is(err, ErrConflict):
			t.Fatalf("%s %d: %v", who, i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no %s won", who)
	}
	return winner
}
