// Package storetest is the conformance suite of tablets.MetaStore: one
// set of cases that every backend (tablets.DirMetaStore, bus.MetaStore)
// runs from its own tests, so the backends keep the same contract. It is
// test support: only _test.go files import it.
//
// Concurrency contract: TestMetaStore runs its cases one after another,
// except where a case races publishers on purpose; a Backend's functions
// must be safe to call from the test's goroutine.
package storetest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// Backend describes the MetaStore implementation under test.
type Backend struct {
	// Fresh sets up empty backing storage for one test (cleaned up with
	// t) and returns open, which opens another store over that storage:
	// its own store value and, for a backend that has one, its own
	// connection. Stores opened from one Fresh see the same tables.
	Fresh func(t *testing.T) (open func() tablets.MetaStore)
	// NotFound is wrapped by Get of a missing generation.
	NotFound error
	// Conflict is wrapped by a Publish that lost its compare-and-set and
	// by DeleteGeneration of the current generation.
	Conflict error
	// BadInput is wrapped by a Publish whose generation is not above
	// prev; nil = any error will do.
	BadInput error
	// BadName is wrapped by every call with a table name the backend
	// refuses ("bad/name"); nil = the backend takes any non-empty name,
	// and "odd.name/x y" must round-trip.
	BadName error
}

// TableMeta returns a TableMeta of table name, generation gen, with two
// tablets split at tag and one file whose id starts with tag; metas with
// different tags differ in their bytes.
func TableMeta(name string, gen uint64, tag string) *messages.TableMeta {
	return &messages.TableMeta{
		Name:        name,
		Generation:  gen,
		SplitPoints: [][]byte{[]byte(tag)},
		Tablets: []*messages.TabletMeta{
			{Ref: &messages.TabletRef{Table: name, Generation: gen, Index: 0, EndRow: []byte(tag)},
				Files: []*messages.FileRef{{Id: tag + "-f0", Blocks: 3}}},
			{Ref: &messages.TabletRef{Table: name, Generation: gen, Index: 1, PrevEndRow: []byte(tag)}},
		},
		Rows: 42,
	}
}

// TestMetaStore runs the conformance suite against b.
func TestMetaStore(t *testing.T, b Backend) {
	t.Run("Contract", func(t *testing.T) { testContract(t, b) })
	t.Run("ConcurrentPublish", func(t *testing.T) { testConcurrentPublish(t, b) })
	t.Run("Manifests", func(t *testing.T) { testManifests(t, b) })
}

// testManifests: a ManifestStore stores manifests by generation and
// digest, fills a record's files in from them on Get, deletes those a
// deleted record names, and lists the others.
func testManifests(t *testing.T, b Backend) {
	ctx := t.Context()
	ms, ok := b.Fresh(t)().(tablets.ManifestStore)
	if !ok {
		t.Skip("not a ManifestStore")
	}
	const table = "mf"
	put := func(gen uint64, files ...*messages.FileRef) *messages.ManifestRef {
		t.Helper()
		data, err := proto.MarshalOptions{Deterministic: true}.Marshal(&messages.TabletMeta{Files: files})
		if err != nil {
			t.Fatal(err)
		}
		d := sha256.Sum256(data)
		for range 2 { // storing it again succeeds
			if err := ms.PutManifest(ctx, table, gen, d, data); err != nil {
				t.Fatal(err)
			}
		}
		ref := &messages.ManifestRef{Digest: d[:], Files: uint32(len(files))}
		for _, f := range files {
			ref.Blocks += uint64(f.GetBlocks())
			ref.Entries += f.GetEntries()
		}
		return ref
	}
	f0 := &messages.FileRef{Id: "mf.g1.t0.x", Blocks: 2, Entries: 5, BlockRoots: make([]byte, 64)}
	f1 := &messages.FileRef{Id: "mf.g1.t0.x.f1", Blocks: 1, Entries: 2, BlockRoots: make([]byte, 32)}
	m1 := put(1, f0, f1)
	m2 := put(2, f1) // no record names it
	rec := TableMeta(table, 1, "k")
	rec.MetaFormat = tablets.MetaFormatManifests
	rec.Tablets[0].Files, rec.Tablets[0].Manifests, rec.Tablets[0].Rows = nil, []*messages.ManifestRef{m1}, 7
	if err := ms.Publish(ctx, rec, 0); err != nil {
		t.Fatal(err)
	}
	got, err := ms.Get(ctx, table, 1)
	if err != nil {
		t.Fatal(err)
	}
	if fs := got.GetTablets()[0].GetFiles(); len(fs) != 2 || !proto.Equal(fs[0], f0) || !proto.Equal(fs[1], f1) {
		t.Fatalf("Get filled in %v, want the manifest's two files", fs)
	}
	if len(got.GetTablets()[0].GetManifests()) != 1 {
		t.Fatal("Get dropped the record's manifests")
	}
	if r, err := ms.Record(ctx, table, 1); err != nil || !proto.Equal(r, rec) {
		t.Fatalf("Record returned %v, %v; want the record as published", r, err)
	}
	if _, err := ms.Record(ctx, table, 9); !errors.Is(err, b.NotFound) {
		t.Fatalf("Record of a missing generation: %v, want %v", err, b.NotFound)
	}
	list := func() map[tablets.ManifestID]bool {
		t.Helper()
		ids, err := ms.Manifests(ctx, table)
		if err != nil {
			t.Fatal(err)
		}
		out := map[tablets.ManifestID]bool{}
		for _, id := range ids {
			out[id] = true
		}
		return out
	}
	id1, id2 := tablets.ManifestID{Gen: 1, Digest: [32]byte(m1.Digest)}, tablets.ManifestID{Gen: 2, Digest: [32]byte(m2.Digest)}
	if l := list(); len(l) != 2 || !l[id1] || !l[id2] {
		t.Fatalf("Manifests = %v, want both", l)
	}
	if _, err := ms.GetManifest(ctx, table, 3, id1.Digest); !is(err, b.NotFound) {
		t.Fatalf("GetManifest of a missing manifest: %v, want %v", err, b.NotFound)
	}
	if err := ms.Publish(ctx, TableMeta(table, 2, "k"), 1); err != nil {
		t.Fatal(err)
	}
	if err := ms.DeleteGeneration(ctx, table, 1); err != nil {
		t.Fatal(err)
	}
	if l := list(); len(l) != 1 || !l[id2] {
		t.Fatalf("after deleting generation 1, Manifests = %v, want only the unnamed one", l)
	}
	for range 2 { // deleting a missing manifest is no error
		if err := ms.DeleteManifest(ctx, table, 2, id2.Digest); err != nil {
			t.Fatal(err)
		}
	}
	if l := list(); len(l) != 0 {
		t.Fatalf("Manifests = %v after deleting them all", l)
	}
}

// is reports whether err wraps want; a nil want accepts any error.
func is(err, want error) bool {
	if want == nil {
		return err != nil
	}
	return errors.Is(err, want)
}

func testContract(t *testing.T, b Backend) {
	ctx := t.Context()
	open := b.Fresh(t)
	ms := open()

	if g, err := ms.Current(ctx, "users"); err != nil || g != 0 {
		t.Fatalf("Current of missing table = %d, %v; want 0, nil", g, err)
	}
	if _, err := ms.Get(ctx, "users", 1); !errors.Is(err, b.NotFound) {
		t.Fatalf("Get missing: %v; want %v", err, b.NotFound)
	}
	if ts, err := ms.Tables(ctx); err != nil || len(ts) != 0 {
		t.Fatalf("Tables of empty store = %v, %v", ts, err)
	}

	m1 := TableMeta("users", 1, "a")
	if err := ms.Publish(ctx, m1, 0); err != nil {
		t.Fatal(err)
	}
	// Retrying a publish that succeeded succeeds.
	if err := ms.Publish(ctx, m1, 0); err != nil {
		t.Fatalf("repeated publish: %v", err)
	}
	if g, err := ms.Current(ctx, "users"); err != nil || g != 1 {
		t.Fatalf("Current = %d, %v; want 1", g, err)
	}
	if got, err := ms.Get(ctx, "users", 1); err != nil || !proto.Equal(got, m1) {
		t.Fatalf("Get = %v, %v; want %v", got, err, m1)
	}
	// What Get returns is the caller's: changing it, down to the bytes
	// of a split point, changes nothing stored.
	got, err := ms.Get(ctx, "users", 1)
	if err != nil {
		t.Fatal(err)
	}
	got.Rows++
	got.SplitPoints[0][0] ^= 0xff
	got.Tablets[0].Files[0].Id = "changed"
	got.Tablets = got.Tablets[:1]
	want1 := TableMeta("users", 1, "a") // m1 as published, whatever a store did with m1
	if again, err := ms.Get(ctx, "users", 1); err != nil || !proto.Equal(again, want1) {
		t.Fatalf("Get after its caller changed what an earlier Get returned = %v, %v; want %v", again, err, want1)
	}

	want := []string{"apps", "users"}
	if b.BadName == nil {
		// A table name with characters a KV key cannot hold.
		if err := ms.Publish(ctx, TableMeta("odd.name/x y", 5, "o"), 0); err != nil {
			t.Fatal(err)
		}
		want = []string{"apps", "odd.name/x y", "users"}
	} else {
		if err := ms.Publish(ctx, TableMeta("bad/name", 1, "x"), 0); !errors.Is(err, b.BadName) {
			t.Fatalf("Publish with a bad name: %v; want %v", err, b.BadName)
		}
		if _, err := ms.Current(ctx, "../x"); !errors.Is(err, b.BadName) {
			t.Fatalf("Current with a bad name: %v; want %v", err, b.BadName)
		}
	}
	if err := ms.Publish(ctx, TableMeta("apps", 1, "b"), 0); err != nil {
		t.Fatal(err)
	}
	if ts, err := ms.Tables(ctx); err != nil || !slices.Equal(ts, want) {
		t.Fatalf("Tables = %q, %v; want %q", ts, err, want)
	}

	// Next generation with the right prev; a stale prev conflicts.
	m2 := TableMeta("users", 2, "c")
	if err := ms.Publish(ctx, m2, 1); err != nil {
		t.Fatal(err)
	}
	if err := ms.Publish(ctx, TableMeta("users", 3, "d"), 1); !errors.Is(err, b.Conflict) {
		t.Fatalf("publish with stale prev: %v; want %v", err, b.Conflict)
	}
	if _, err := ms.Get(ctx, "users", 3); !errors.Is(err, b.NotFound) {
		t.Fatalf("a conflicting publish left its generation behind: %v", err)
	}
	if err := ms.Publish(ctx, TableMeta("users", 4, "e"), 0); !errors.Is(err, b.Conflict) {
		t.Fatalf("publish prev 0 over an existing table: %v; want %v", err, b.Conflict)
	}
	if err := ms.Publish(ctx, TableMeta("users", 2, "x"), 1); !errors.Is(err, b.Conflict) {
		t.Fatalf("publish different bytes as an existing generation: %v; want %v", err, b.Conflict)
	}
	if err := ms.Publish(ctx, TableMeta("users", 2, "x"), 2); !is(err, b.BadInput) {
		t.Fatalf("publish with generation <= prev: %v; want %v", err, b.BadInput)
	}
	if g, err := ms.Current(ctx, "users"); err != nil || g != 2 {
		t.Fatalf("Current = %d, %v; want 2", g, err)
	}

	// DeleteGeneration: old yes, current no, missing (or 0) fine.
	if err := ms.DeleteGeneration(ctx, "users", 2); !errors.Is(err, b.Conflict) {
		t.Fatalf("DeleteGeneration of current: %v; want %v", err, b.Conflict)
	}
	for _, g := range []uint64{1, 1, 9, 0} {
		if err := ms.DeleteGeneration(ctx, "users", g); err != nil {
			t.Fatalf("DeleteGeneration %d: %v", g, err)
		}
	}
	if err := ms.DeleteGeneration(ctx, "nosuch", 1); err != nil {
		t.Fatalf("DeleteGeneration of a missing table: %v", err)
	}
	if _, err := ms.Get(ctx, "users", 1); !errors.Is(err, b.NotFound) {
		t.Fatalf("Get deleted generation: %v; want %v", err, b.NotFound)
	}
	if got, err := ms.Get(ctx, "users", 2); err != nil || !proto.Equal(got, m2) {
		t.Fatalf("Get current after delete = %v, %v", got, err)
	}

	// Another store over the same storage sees the same state.
	other := open()
	if g, err := other.Current(ctx, "users"); err != nil || g != 2 {
		t.Fatalf("another store: Current = %d, %v; want 2", g, err)
	}
	if got, err := other.Get(ctx, "users", 2); err != nil || !proto.Equal(got, m2) {
		t.Fatalf("another store: Get = %v, %v", got, err)
	}
}

// Publishers racing from the same prev, each through its own store:
// exactly one wins, the rest get Conflict, and what is current is the
// winner's.
func testConcurrentPublish(t *testing.T, b Backend) {
	for _, sameGen := range []bool{true, false} {
		t.Run(fmt.Sprintf("sameGen=%v", sameGen), func(t *testing.T) {
			ctx := t.Context()
			open := b.Fresh(t)
			const table = "race"
			base := open()
			if err := base.Publish(ctx, TableMeta(table, 1, "base"), 0); err != nil {
				t.Fatal(err)
			}
			const n = 8
			stores := make([]tablets.MetaStore, n)
			metas := make([]*messages.TableMeta, n)
			for i := range n {
				gen := uint64(2)
				if !sameGen {
					gen = uint64(2 + i)
				}
				stores[i] = open()
				metas[i] = TableMeta(table, gen, fmt.Sprint("w", i))
			}
			errs := make([]error, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				wg.Go(func() {
					<-start
					errs[i] = stores[i].Publish(ctx, metas[i], 1)
				})
			}
			close(start)
			wg.Wait()
			winner := -1
			for i, err := range errs {
				switch {
				case err == nil:
					if winner >= 0 {
						t.Fatalf("publishers %d and %d both won", winner, i)
					}
					winner = i
				case !errors.Is(err, b.Conflict):
					t.Fatalf("publisher %d: %v; want nil or %v", i, err, b.Conflict)
				}
			}
			if winner < 0 {
				t.Fatalf("nobody won: %v", errs)
			}
			cur, err := base.Current(ctx, table)
			if err != nil || cur != metas[winner].Generation {
				t.Fatalf("Current = %d, %v; want the winner's %d", cur, err, metas[winner].Generation)
			}
			if got, err := base.Get(ctx, table, cur); err != nil || !proto.Equal(got, metas[winner]) {
				t.Fatalf("current generation holds %v, %v; want the winner's %v", got, err, metas[winner])
			}
		})
	}
}
