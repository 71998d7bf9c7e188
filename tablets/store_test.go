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

// DirMetaStore-specific cases; the MetaStore contract itself is
// storetest's suite (TestDirMetaStoreConformance).

// Corruption of a generation file or of CURRENT is reported, not misread.
func TestDirMetaStoreCorrupt(t *testing.T) {
	ctx := context.Background()
	ms, err := NewDirMetaStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := ms.Publish(ctx, testMeta("users", 1, "a"), 0); err != nil {
		t.Fatal(err)
	}
	if err := ms.Publish(ctx, testMeta("users", 2, "c"), 1); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ms.Dir, "users", genFile(2)), []byte{0xff, 0xff}, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ms.Get(ctx, "users", 2); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt generation: %v", err)
	}
	if err := os.WriteFile(filepath.Join(ms.Dir, "users", genFile(1)), mustMarshal(t, testMeta("other", 1, "a")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ms.Get(ctx, "users", 1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("generation file of another table: %v", err)
	}
	if err := os.WriteFile(filepath.Join(ms.Dir, "users", currentFile), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ms.Current(ctx, "users"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt CURRENT: %v", err)
	}
	if _, err := NewDirMetaStore(""); !errors.Is(err, ErrBadInput) {
		t.Errorf("NewDirMetaStore(\"\") = %v", err)
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
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
