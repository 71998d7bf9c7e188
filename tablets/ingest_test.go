package tablets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/messages"
)

func TestReadTSV(t *testing.T) {
	in := "b\tvalue two\r\na\t\nc\tx\ty\tz\nrow\\x00\traw backslash\nlast\tno newline"
	got, err := ReadTSV(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{[]byte("b"), []byte("value two")},
		{[]byte("a"), []byte("")},
		{[]byte("c"), []byte("x\ty\tz")},
		{[]byte(`row\x00`), []byte("raw backslash")},
		{[]byte("last"), []byte("no newline")},
	}
	sameEntries(t, got, want)
	if got, err := ReadTSV(strings.NewReader("")); err != nil || len(got) != 0 {
		t.Fatalf("empty input: %v, %v", got, err)
	}
	bad := []struct {
		in, want string
	}{
		{"a\t1\nnotab\n", "line 2 has no tab"},
		{"a\t1\nb\t2\n\nc\t3\n", "line 3 is empty"},
		{"a\t1\nb\t2\nc\t3\nb\t4\n", "line 4 repeats key b of line 2"},
		{"\tv\n", "line 1 has an empty key"},
		{"a\t1\r\n\r\n", "line 2 is empty"},
		{"a\t" + strings.Repeat("v", MaxValueLen+1) + "\n", "line 1: value is"},
		{strings.Repeat("k", MaxKeyLen+1) + "\tv\n", "line 1: key is"},
		{"a\t1\n" + strings.Repeat("x", MaxKeyLen+MaxValueLen+10) + "\n", "line 2 is longer"},
	}
	for _, tt := range bad {
		_, err := ReadTSV(strings.NewReader(tt.in))
		if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ReadTSV(%.30q) = %v, want ErrBadInput with %q", tt.in, err, tt.want)
		}
	}
}

func TestGenerateRows(t *testing.T) {
	rows := GenerateRows(1000)
	if len(rows) != 1000 || len(GenerateRows(0)) != 0 || len(GenerateRows(-1)) != 0 {
		t.Fatal("wrong length")
	}
	for i, r := range rows {
		if string(r.Key) != fmt.Sprintf("row%09d", i) || !bytes.Equal(r.Key, RowKey(i)) {
			t.Fatalf("key %d = %q", i, r.Key)
		}
		if len(r.Value) != RowValueLen || !bytes.Equal(r.Value, RowValue(i)) {
			t.Fatalf("value %d = %q", i, r.Value)
		}
		for _, c := range r.Value {
			if !strings.ContainsRune(rowAlphabet, rune(c)) {
				t.Fatalf("value %d has byte %q", i, c)
			}
		}
		if i > 0 && bytes.Compare(rows[i-1].Key, r.Key) >= 0 {
			t.Fatalf("keys out of order at %d", i)
		}
	}
	// The format is pinned: other packages' tests regenerate ground truth.
	if got := string(RowValue(0)); got != "zTd95sgo6n9lsi6wRHJEYfKGyFO0s8PAf2sTsN5bwmC2MjRVnyHfEeGs8vWP6TIL" {
		t.Errorf("RowValue(0) = %q", got)
	}
	if got := string(RowValue(12345)); got != "kRXtaGRizAT9riw0d0sECZeeQEBeCOWtx6NcisIFu8zfcrJYES3M4iofc3gq0R2w" {
		t.Errorf("RowValue(12345) = %q", got)
	}
}

var testClock = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func testIngestConfig(seed uint64) IngestConfig {
	var seedBytes [32]byte
	seedBytes[0] = byte(seed)
	seedBytes[1] = byte(seed >> 8)
	cfg := DefaultIngestConfig()
	cfg.Now = func() time.Time { return testClock }
	cfg.Rand = rand.NewChaCha8(seedBytes)
	return cfg
}

func newMetaForTest(t *testing.T) *DirMetaStore {
	t.Helper()
	ms, err := NewDirMetaStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func newDirStores(t *testing.T) (*DirStore, *DirMetaStore) {
	t.Helper()
	store, err := NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return store, newMetaForTest(t)
}

// readTable reads every tablet of a generation in order with TabletReader,
// checking that each tablet's rows lie in its range.
func readTable(t *testing.T, store BlockStore, tm *messages.TableMeta) []Entry {
	t.Helper()
	var all []Entry
	for i, tab := range tm.GetTablets() {
		if len(tab.GetManifests()) > 0 && len(tab.GetFiles()) == 0 {
			t.Fatalf("tablet %d keeps its files in manifests: read the record with MetaStore.Get", i)
		}
		ref := tab.GetRef()
		rng := Range{Start: ref.GetPrevEndRow(), End: ref.GetEndRow()}
		it := NewTabletReader(tab.GetFiles(), StoreFetcher{Store: store}).Scan(context.Background(), Range{}, nil)
		rows := collect(t, it)
		for _, e := range rows {
			if !rng.Contains(e.Key) {
				t.Fatalf("tablet %d %v holds key %s", i, rng, FormatKey(e.Key))
			}
		}
		if uint64(len(rows)) != tab.GetRows() {
			t.Fatalf("tablet %d: read %d rows, meta says %d", i, len(rows), tab.GetRows())
		}
		all = append(all, rows...)
	}
	return all
}

func checkMeta(t *testing.T, tm *messages.TableMeta, table string, gen uint64, rows int) {
	t.Helper()
	if tm.GetName() != table || tm.GetGeneration() != gen || tm.GetRows() != uint64(rows) {
		t.Fatalf("meta = %s g%d %d rows, want %s g%d %d", tm.GetName(), tm.GetGeneration(), tm.GetRows(), table, gen, rows)
	}
	if tm.GetCreatedUnixMs() != testClock.UnixMilli() {
		t.Errorf("created_unix_ms = %d", tm.GetCreatedUnixMs())
	}
	splits := tm.GetSplitPoints()
	if err := ValidateSplits(splits); err != nil {
		t.Fatal(err)
	}
	if len(tm.GetTablets()) != TabletCount(splits) {
		t.Fatalf("%d tablets for %d split points", len(tm.GetTablets()), len(splits))
	}
	var sum, bytesSum uint64
	for i, tab := range tm.GetTablets() {
		ref := tab.GetRef()
		r := TabletRange(splits, i)
		if ref.GetTable() != table || ref.GetGeneration() != gen || ref.GetIndex() != uint32(i) ||
			!bytes.Equal(ref.GetPrevEndRow(), r.Start) || !bytes.Equal(ref.GetEndRow(), r.End) {
			t.Fatalf("tablet %d ref = %v, want range %v", i, ref, r)
		}
		sum += tab.GetRows()
		if tab.GetRows() == 0 && len(tab.GetFiles()) != 0 {
			t.Fatalf("tablet %d has no rows but files", i)
		}
		for _, f := range tab.GetFiles() {
			if err := ValidateObjectKey(f.GetId()); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(f.GetId(), fmt.Sprintf("%s.g%d.t%d.", table, gen, i)) {
				t.Fatalf("file id %q", f.GetId())
			}
			bytesSum += f.GetBytes()
		}
	}
	if sum != tm.GetRows() || bytesSum != tm.GetBytes() {
		t.Fatalf("tablets hold %d rows / %d bytes, meta says %d / %d", sum, bytesSum, tm.GetRows(), tm.GetBytes())
	}
}

func TestIngestReadBack(t *testing.T) {
	ctx := context.Background()
	store, ms := newDirStores(t)
	truth := GenerateRows(10000)
	input := append([]Entry(nil), truth...)
	rand.New(rand.NewPCG(9, 9)).Shuffle(len(input), func(i, j int) { input[i], input[j] = input[j], input[i] })
	firstKey := input[0].Key
	cfg := testIngestConfig(1)
	cfg.Tablets = 8
	cfg.BlockSize = 4096
	stages := map[string][2]int64{}
	cfg.Progress = func(stage string, done, total int64) {
		if prev := stages[stage]; done < prev[0] {
			t.Errorf("progress %s went back from %d to %d", stage, prev[0], done)
		}
		stages[stage] = [2]int64{done, total}
	}
	tm, err := Ingest(ctx, store, ms, "users", input, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(input[0].Key, firstKey) {
		t.Error("Ingest reordered the caller's slice")
	}
	checkMeta(t, tm, "users", 1, len(truth))
	if len(tm.GetTablets()) != 8 || tm.GetBlockSize() != 4096 {
		t.Fatalf("%d tablets, block size %d", len(tm.GetTablets()), tm.GetBlockSize())
	}
	for i, tab := range tm.GetTablets() {
		if tab.GetRows() != 1250 {
			t.Errorf("tablet %d has %d rows, want 1250", i, tab.GetRows())
		}
	}
	for _, st := range []string{"sort", "write", "publish"} {
		if p := stages[st]; p[0] != p[1] || p[1] == 0 {
			t.Errorf("progress %s ended at %v", st, p)
		}
	}
	if stages["write"][1] != int64(len(truth)) {
		t.Errorf("write progress total = %d", stages["write"][1])
	}
	sameEntries(t, readTable(t, store, tm), truth)
	got, err := ms.Get(ctx, "users", 1)
	if err != nil || got.String() != tm.String() {
		t.Fatalf("published meta differs: %v", err)
	}
	if ts, _ := ms.Tables(ctx); fmt.Sprint(ts) != "[users]" {
		t.Fatalf("Tables = %v", ts)
	}
}

func objectsOf(t *testing.T, store *DirStore, prefix string) []string {
	t.Helper()
	keys, err := store.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// expectObjects checks that the store holds exactly the objects of the
// given generations.
func expectObjects(t *testing.T, store *DirStore, metas ...*messages.TableMeta) {
	t.Helper()
	want := map[string]bool{}
	for _, tm := range metas {
		for _, tab := range tm.GetTablets() {
			for _, f := range tab.GetFiles() {
				want[IndexKey(f.GetId())] = true
				for b := range int(f.GetBlocks()) {
					want[BlockKey(f.GetId(), b)] = true
				}
			}
		}
	}
	have := objectsOf(t, store, "")
	if len(have) != len(want) {
		t.Fatalf("store holds %d objects, want %d", len(have), len(want))
	}
	for _, k := range have {
		if !want[k] {
			t.Fatalf("unexpected object %s", k)
		}
	}
}

func TestIngestReplace(t *testing.T) {
	ctx := context.Background()
	store, ms := newDirStores(t)
	cfg := testIngestConfig(2)
	cfg.Tablets = 3
	var metas []*messages.TableMeta
	var truths [][]Entry
	for g := 1; g <= 4; g++ {
		rows := GenerateRows(500 * g)
		for i := range rows {
			rows[i].Value = []byte(fmt.Sprintf("gen%d-%d", g, i))
		}
		tm, err := Ingest(ctx, store, ms, "t", rows, cfg)
		if err != nil {
			t.Fatalf("ingest %d: %v", g, err)
		}
		checkMeta(t, tm, "t", uint64(g), len(rows))
		metas, truths = append(metas, tm), append(truths, rows)
		if cur, _ := ms.Current(ctx, "t"); cur != uint64(g) {
			t.Fatalf("current = %d after ingest %d", cur, g)
		}
		// The new and the previous generation are readable.
		sameEntries(t, readTable(t, store, tm), rows)
		if g > 1 {
			prev, err := ms.Get(ctx, "t", uint64(g-1))
			if err != nil {
				t.Fatalf("previous generation: %v", err)
			}
			sameEntries(t, readTable(t, store, prev), truths[g-2])
			expectObjects(t, store, metas[g-2], tm)
		}
		// Generation g-2 is gone: metadata and objects.
		if g > 2 {
			if _, err := ms.Get(ctx, "t", uint64(g-2)); !errors.Is(err, ErrNotFound) {
				t.Fatalf("generation %d still there: %v", g-2, err)
			}
			if keys := objectsOf(t, store, fmt.Sprintf("t.g%d.", g-2)); len(keys) != 0 {
				t.Fatalf("generation %d objects left: %v", g-2, keys)
			}
			it := NewTabletReader(metas[g-3].GetTablets()[0].GetFiles(), StoreFetcher{Store: store}).Scan(ctx, Range{}, nil)
			if it.Next() || !errors.Is(it.Err(), ErrNotFound) {
				t.Fatalf("reading a deleted generation: %v", it.Err())
			}
		}
	}
	// KeepGenerations 1: publishing deletes the previous generation too.
	cfg.KeepGenerations = 1
	tm, err := Ingest(ctx, store, ms, "t", GenerateRows(10), cfg)
	if err != nil {
		t.Fatal(err)
	}
	expectObjects(t, store, tm)
	for _, g := range []uint64{3, 4} {
		if _, err := ms.Get(ctx, "t", g); !errors.Is(err, ErrNotFound) {
			t.Fatalf("generation %d still there: %v", g, err)
		}
	}
}

func TestIngestSplitKeys(t *testing.T) {
	ctx := context.Background()
	store, ms := newDirStores(t)
	rows := GenerateRows(1000)
	cfg := testIngestConfig(3)
	cfg.Tablets = 99 // ignored
	cfg.SplitKeys = [][]byte{{0x00}, RowKey(100), RowKey(101), RowKey(500), []byte("s")}
	tm, err := Ingest(ctx, store, ms, "split", rows, cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkMeta(t, tm, "split", 1, len(rows))
	wantRows := []uint64{0, 100, 1, 399, 500, 0}
	for i, tab := range tm.GetTablets() {
		if tab.GetRows() != wantRows[i] {
			t.Errorf("tablet %d: %d rows, want %d", i, tab.GetRows(), wantRows[i])
		}
	}
	// A key equal to a split point is in the tablet that starts at it.
	if got := readTable(t, store, &messages.TableMeta{Tablets: tm.GetTablets()[2:3]}); len(got) != 1 || !bytes.Equal(got[0].Key, RowKey(100)) {
		t.Fatalf("tablet 2 = %v", got)
	}
	sameEntries(t, readTable(t, store, tm), rows)

	cfg.SplitKeys = [][]byte{[]byte("b"), []byte("a")}
	if _, err := Ingest(ctx, store, ms, "split", rows, cfg); !errors.Is(err, ErrBadSplits) {
		t.Fatalf("bad split keys: %v", err)
	}
}

func TestIngestEdgeCases(t *testing.T) {
	ctx := context.Background()
	store, ms := newDirStores(t)
	cfg := testIngestConfig(4)
	cfg.Tablets = 8
	// Fewer rows than tablets: one tablet per row.
	tm, err := Ingest(ctx, store, ms, "few", GenerateRows(3), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkMeta(t, tm, "few", 1, 3)
	if len(tm.GetTablets()) != 3 {
		t.Fatalf("%d tablets for 3 rows", len(tm.GetTablets()))
	}
	// No rows: one empty tablet without files.
	tm, err = Ingest(ctx, store, ms, "empty", nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkMeta(t, tm, "empty", 1, 0)
	if len(tm.GetTablets()) != 1 || len(tm.GetTablets()[0].GetFiles()) != 0 {
		t.Fatalf("empty table = %v", tm)
	}
	if got := readTable(t, store, tm); len(got) != 0 {
		t.Fatalf("empty table has %d rows", len(got))
	}

	errCases := []struct {
		name    string
		table   string
		rows    []Entry
		mod     func(*IngestConfig)
		want    error
		message string
	}{
		{"duplicate", "t", []Entry{{[]byte("b"), nil}, {[]byte("a"), nil}, {[]byte("b"), []byte("x")}}, nil, ErrBadInput, "duplicate key b"},
		{"empty key", "t", []Entry{{[]byte("a"), nil}, {nil, nil}}, nil, ErrBadInput, "entry 1"},
		{"long key", "t", []Entry{{make([]byte, MaxKeyLen+1), nil}}, nil, ErrBadInput, "key is"},
		{"long value", "t", []Entry{{[]byte("a"), make([]byte, MaxValueLen+1)}}, nil, ErrBadInput, "value is"},
		{"bad name", "a.b", nil, nil, ErrBadName, ""},
		{"no clock", "t", nil, func(c *IngestConfig) { c.Now = nil }, ErrBadInput, "Now"},
		{"no rand", "t", nil, func(c *IngestConfig) { c.Rand = nil }, ErrBadInput, "Rand"},
		{"block size", "t", nil, func(c *IngestConfig) { c.BlockSize = MaxBlockSize + 1 }, ErrBadInput, "BlockSize"},
		{"tablets", "t", nil, func(c *IngestConfig) { c.Tablets = -1 }, ErrBadInput, "Tablets"},
		{"keep", "t", nil, func(c *IngestConfig) { c.KeepGenerations = -1 }, ErrBadInput, "KeepGenerations"},
	}
	for _, tt := range errCases {
		c := testIngestConfig(5)
		if tt.mod != nil {
			tt.mod(&c)
		}
		_, err := Ingest(ctx, store, ms, tt.table, tt.rows, c)
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.message) {
			t.Errorf("%s: %v, want %v with %q", tt.name, err, tt.want, tt.message)
		}
	}
	if ts, _ := ms.Tables(ctx); fmt.Sprint(ts) != "[empty few]" {
		t.Fatalf("failed ingests published something: %v", ts)
	}
	if err := DefaultIngestConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
}

// A tablet whose index would pass MaxIndexBytes is written as several
// files; the reader merges them.
func TestIngestRollsFiles(t *testing.T) {
	ctx := context.Background()
	store, ms := newMemStore(), newMetaForTest(t)
	rows := GenerateRows(20000)
	cfg := testIngestConfig(6)
	cfg.BlockSize = 64 // one row per block
	tm, err := Ingest(ctx, store, ms, "roll", rows, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if tm, err = ms.Get(ctx, "roll", tm.GetGeneration()); err != nil {
		t.Fatal(err)
	}
	files := tm.GetTablets()[0].GetFiles()
	if len(files) < 2 {
		t.Fatalf("%d files", len(files))
	}
	for _, f := range files {
		idx, err := store.Get(ctx, IndexKey(f.GetId()))
		if err != nil {
			t.Fatal(err)
		}
		if len(idx) > MaxIndexBytes+2*MaxKeyLen+64 {
			t.Fatalf("index of %d bytes", len(idx))
		}
	}
	sameEntries(t, readTable(t, store, tm), rows)
}

// failStore fails every Put after the first n.
type failStore struct {
	*DirStore
	mu sync.Mutex
	n  int
}

func (f *failStore) Put(ctx context.Context, key string, data []byte) error {
	f.mu.Lock()
	f.n--
	fail := f.n < 0
	f.mu.Unlock()
	if fail {
		return errors.New("disk full")
	}
	return f.DirStore.Put(ctx, key, data)
}

func TestIngestWriteFailureCleansUp(t *testing.T) {
	ctx := context.Background()
	store, ms := newDirStores(t)
	cfg := testIngestConfig(7)
	cfg.Tablets = 4
	cfg.BlockSize = 1024
	_, err := Ingest(ctx, &failStore{DirStore: store, n: 50}, ms, "fail", GenerateRows(2000), cfg)
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("err = %v", err)
	}
	if keys := objectsOf(t, store, ""); len(keys) != 0 {
		t.Fatalf("objects left: %v", keys)
	}
	if cur, _ := ms.Current(ctx, "fail"); cur != 0 {
		t.Fatalf("current = %d", cur)
	}
	// A cancelled context also cleans up.
	cctx, cancel := context.WithCancel(ctx)
	cfg.Progress = func(stage string, done, total int64) {
		if stage == "write" && done > 500 {
			cancel()
		}
	}
	if _, err := Ingest(cctx, store, ms, "fail", GenerateRows(2000), cfg); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if keys := objectsOf(t, store, ""); len(keys) != 0 {
		t.Fatalf("objects left after cancel: %v", keys)
	}
}

// deadAfterStore accepts n Puts and then fails every Put and Delete, like
// a store that went away mid-ingest; it counts the Deletes tried.
type deadAfterStore struct {
	*DirStore
	mu      sync.Mutex
	n       int
	deletes int
}

func (d *deadAfterStore) Put(ctx context.Context, key string, data []byte) error {
	d.mu.Lock()
	d.n--
	dead := d.n < 0
	d.mu.Unlock()
	if dead {
		return errors.New("store unavailable")
	}
	return d.DirStore.Put(ctx, key, data)
}

func (d *deadAfterStore) Delete(context.Context, string) error {
	d.mu.Lock()
	d.deletes++
	d.mu.Unlock()
	return errors.New("store unavailable")
}

// TestIngestCleanupFailureReported: when removing what a failed ingest
// wrote fails too, the error says so (how many files were left) instead
// of leaving them silently, and the cleanup gives up at the first failed
// delete rather than waiting out one failure per object.
func TestIngestCleanupFailureReported(t *testing.T) {
	store, ms := newDirStores(t)
	cfg := testIngestConfig(9)
	cfg.Tablets = 4
	cfg.BlockSize = 1024
	dead := &deadAfterStore{DirStore: store, n: 60}
	_, err := Ingest(context.Background(), dead, ms, "gone", GenerateRows(2000), cfg)
	if err == nil || !strings.Contains(err.Error(), "store unavailable") || !strings.Contains(err.Error(), "files left in the store") {
		t.Fatalf("err = %v, want the write error and the files left", err)
	}
	if dead.deletes != 1 {
		t.Fatalf("cleanup tried %d deletes on a dead store, want 1", dead.deletes)
	}
	t.Logf("error: %v", err)
}

// partialMeta stores the generation and then fails before making it
// current, as bus.MetaStore.Publish does when the store refuses the
// pointer switch (full, unavailable).
type partialMeta struct{ *DirMetaStore }

func (p partialMeta) Publish(ctx context.Context, meta *messages.TableMeta, prev uint64) error {
	data, err := proto.Marshal(meta)
	if err != nil {
		return err
	}
	dir := filepath.Join(p.Dir, meta.GetName())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, genFile(meta.GetGeneration())), data, 0o644); err != nil {
		return err
	}
	return errors.New("store full")
}

// TestIngestFailedPublishRemovesMetadata: a publish that stored the new
// generation's metadata but never made it current leaves neither that
// metadata nor any block behind, and the next ingest succeeds.
func TestIngestFailedPublishRemovesMetadata(t *testing.T) {
	ctx := context.Background()
	store, ms := newDirStores(t)
	first, err := Ingest(ctx, store, ms, "tbl", GenerateRows(300), testIngestConfig(11))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Ingest(ctx, store, partialMeta{ms}, "tbl", GenerateRows(500), testIngestConfig(12))
	if err == nil || !strings.Contains(err.Error(), "store full") {
		t.Fatalf("err = %v, want the publish error", err)
	}
	if _, err := ms.Get(ctx, "tbl", 2); !errors.Is(err, ErrNotFound) {
		t.Fatalf("generation 2 metadata after the failed publish: %v, want ErrNotFound", err)
	}
	expectObjects(t, store, first)
	second, err := Ingest(ctx, store, ms, "tbl", GenerateRows(500), testIngestConfig(13))
	if err != nil {
		t.Fatalf("ingest after the failed publish: %v", err)
	}
	expectObjects(t, store, first, second)
}

// barrierMeta makes every ingest read the same current generation before
// any of them publishes, so they all race for the same generation.
type barrierMeta struct {
	MetaStore
	wg   *sync.WaitGroup
	once sync.Once
}

func (b *barrierMeta) Current(ctx context.Context, table string) (uint64, error) {
	g, err := b.MetaStore.Current(ctx, table)
	b.once.Do(func() {
		b.wg.Done()
		b.wg.Wait()
	})
	return g, err
}

func TestIngestConcurrentConflict(t *testing.T) {
	ctx := context.Background()
	store, ms := newDirStores(t)
	first, err := Ingest(ctx, store, ms, "race", GenerateRows(100), testIngestConfig(10))
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	var barrier sync.WaitGroup
	barrier.Add(n)
	metas := make([]*messages.TableMeta, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := testIngestConfig(uint64(20 + i))
			cfg.Tablets = 2
			rows := GenerateRows(300)
			for j := range rows {
				rows[j].Value = []byte(fmt.Sprintf("writer%d", i))
			}
			metas[i], errs[i] = Ingest(ctx, store, &barrierMeta{MetaStore: ms, wg: &barrier}, "race", rows, cfg)
		}()
	}
	wg.Wait()
	winner := soleWinner(t, "ingest", errs)
	cur, _ := ms.Current(ctx, "race")
	if cur != 2 {
		t.Fatalf("current = %d", cur)
	}
	// The losers deleted their objects; the winner's data is intact.
	expectObjects(t, store, first, metas[winner])
	for _, e := range readTable(t, store, metas[winner]) {
		if string(e.Value) != fmt.Sprintf("writer%d", winner) {
			t.Fatalf("row %s = %q, want writer%d's", e.Key, e.Value, winner)
		}
	}
}

// TestGeneratedRows: GeneratedRows yields GenerateRows's rows, also past
// row 10^9 (keys grow a digit), reusing its buffers.
func TestGeneratedRows(t *testing.T) {
	g := &GeneratedRows{N: 1200}
	for i := 0; ; i++ {
		r, err := g.Next()
		if errors.Is(err, io.EOF) {
			if i != 1200 {
				t.Fatalf("EOF after %d rows, want 1200", i)
			}
			break
		}
		if err != nil || string(r.Key) != fmt.Sprintf("row%09d", i) || !bytes.Equal(r.Value, RowValue(i)) || r.Line != int64(i+1) {
			t.Fatalf("row %d: %q %q line %d, %v", i, r.Key, r.Value, r.Line, err)
		}
	}
	for _, i := range []int{999999999, 1000000000, 1234567890123} {
		g := &GeneratedRows{N: i + 1, i: i}
		r, err := g.Next()
		if err != nil || string(r.Key) != fmt.Sprintf("row%09d", i) || !bytes.Equal(r.Value, RowValue(i)) {
			t.Fatalf("row %d: %q, %v", i, r.Key, err)
		}
	}
	if got := string(RowKey(-3)); got != "row-00000003" {
		t.Fatalf("RowKey(-3) = %q", got)
	}
}
