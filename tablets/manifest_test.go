package tablets

import (
	"bytes"
	"compress/flate"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/messages"
)

// keptManifests is a ManifestStore of manifests only, kept
// flate-compressed in memory (the synthetic table below has 525 MiB of
// them, whose roots compress well); it records which manifests were
// fetched.
type keptManifests struct {
	MetaStore
	sizeOnly bool // keep nothing, count the bytes
	mu       sync.Mutex
	data     map[ManifestID][]byte
	bytes    int64
	puts     int
	fetched  []ManifestID
}

func (s *keptManifests) PutManifest(_ context.Context, _ string, gen uint64, digest [sha256.Size]byte, data []byte) error {
	if sha256.Sum256(data) != digest {
		return errors.New("digest does not match the data")
	}
	if s.sizeOnly {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.bytes += int64(len(data))
		s.puts++
		return nil
	}
	var b bytes.Buffer
	w, err := flate.NewWriter(&b, flate.BestSpeed)
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil {
		s.data = map[ManifestID][]byte{}
	}
	s.data[ManifestID{Gen: gen, Digest: digest}] = b.Bytes()
	s.bytes += int64(len(data))
	s.puts++
	return nil
}

func (s *keptManifests) GetManifest(_ context.Context, _ string, gen uint64, digest [sha256.Size]byte) ([]byte, error) {
	id := ManifestID{Gen: gen, Digest: digest}
	s.mu.Lock()
	z, ok := s.data[id]
	s.fetched = append(s.fetched, id)
	s.mu.Unlock()
	if !ok {
		return nil, ErrNotFound
	}
	return io.ReadAll(flate.NewReader(bytes.NewReader(z)))
}

func (s *keptManifests) DeleteManifest(context.Context, string, uint64, [sha256.Size]byte) error {
	return nil
}

func (s *keptManifests) Manifests(context.Context, string) ([]ManifestID, error) { return nil, nil }

func (s *keptManifests) Record(context.Context, string, uint64) (*messages.TableMeta, error) {
	return nil, ErrNotFound
}

// takeFetched returns the manifests fetched since the last call.
func (s *keptManifests) takeFetched() []ManifestID {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.fetched
	s.fetched = nil
	return out
}

// heapHeld is the live heap after a collection.
func heapHeld() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// The record of a 1 TB table (16 M blocks of 64 KiB in 4 MiB files over
// 4 tablets) built by the ingest's manifest writer, without writing
// blocks, stays under 1 MiB; the file lists it leaves out are what the
// record would otherwise hold. A reader that loads one tablet's files
// (TabletFiles.Tablet, what a scan of that tablet needs) fetches that
// tablet's manifests and no other; the test logs the heap each way of
// reading holds (the whole table's lists too, without -short); under
// -race it checks the record only.
func TestRecordOfSixteenMillionBlocks(t *testing.T) {
	const (
		tabletsN      = 4
		blocksPerFile = 64
		files         = 16 << 20 / blocksPerFile
	)
	ctx := context.Background()
	// Under the race detector compressing and loading 525 MiB of
	// manifests takes minutes: it checks the record's size only.
	ms := &keptManifests{sizeOnly: raceEnabled}
	mw := &manifestWriter{ctx: ctx, ms: ms, table: "huge", gen: 3, inline: DefaultInlineFileBytes}
	tm := &messages.TableMeta{Name: "huge", Generation: 3, BlockSize: DefaultBlockSize}
	roots := make([]byte, blocksPerFile*DigestSize)
	var blocks uint64
	for tab := range tabletsN {
		tabm := &messages.TabletMeta{Ref: &messages.TabletRef{Table: "huge", Generation: 3, Index: uint32(tab)}}
		for k := range files / tabletsN {
			for b := range blocksPerFile {
				binary.LittleEndian.PutUint64(roots[b*DigestSize:], blocks)
				blocks++
			}
			ref := &messages.FileRef{Id: FileID("huge", 3, tab, "0123456789abcdef", k), Blocks: blocksPerFile,
				Entries: 50000, Bytes: 4 << 20, BlockRoots: roots}
			tabm.Rows += ref.Entries
			if err := mw.add(proto.Clone(ref).(*messages.FileRef)); err != nil {
				t.Fatal(err)
			}
		}
		spilled, err := mw.finish(tabm)
		if err != nil {
			t.Fatal(err)
		}
		if spilled {
			tm.MetaFormat = MetaFormatManifests
		}
		tm.Tablets = append(tm.Tablets, tabm)
	}
	var inManifests uint64
	for _, tab := range tm.Tablets {
		for _, m := range tab.Manifests {
			inManifests += m.Blocks
		}
	}
	if inManifests != 16<<20 || blocks != 16<<20 {
		t.Fatalf("manifests name %d blocks of %d, want %d", inManifests, blocks, 16<<20)
	}
	size := proto.Size(tm)
	t.Logf("16 M blocks: record %d bytes, %d manifests of %d bytes in all", size, ms.puts, ms.bytes)
	if size > 1<<20 {
		t.Fatalf("record of a 16 M-block table is %d bytes, more than 1 MiB", size)
	}
	if ms.bytes < 512<<20 {
		t.Fatalf("manifests hold %d bytes, less than the table's block roots", ms.bytes)
	}
	if ms.sizeOnly {
		return
	}

	// One tablet, as a scan of it loads it.
	data, err := proto.Marshal(tm)
	if err != nil {
		t.Fatal(err)
	}
	base := heapHeld()
	rec := new(messages.TableMeta)
	if err := proto.Unmarshal(data, rec); err != nil {
		t.Fatal(err)
	}
	withRecord := heapHeld()
	tf := &TabletFiles{Get: func(ctx context.Context, table string, id ManifestID) ([]byte, error) {
		return ms.GetManifest(ctx, table, id.Gen, id.Digest)
	}}
	ms.takeFetched()
	one, err := tf.Tablet(ctx, rec, 2)
	if err != nil {
		t.Fatal(err)
	}
	withTablet := heapHeld()
	want := map[ManifestID]bool{}
	for _, id := range RecordManifests(&messages.TableMeta{Generation: 3, Tablets: rec.Tablets[2:3]}) {
		want[id] = true
	}
	fetched := ms.takeFetched()
	for _, id := range fetched {
		if !want[id] {
			t.Fatalf("loading tablet 2 fetched manifest %s, not one of tablet 2's", ManifestName(id))
		}
	}
	if len(fetched) != len(want) || len(one.GetFiles()) != files/tabletsN || len(rec.Tablets[2].GetFiles()) != 0 {
		t.Fatalf("tablet 2: %d manifests fetched of its %d, %d files of %d; the record got %d files",
			len(fetched), len(want), len(one.GetFiles()), files/tabletsN, len(rec.Tablets[2].GetFiles()))
	}
	t.Logf("heap held: the record %d bytes; with tablet 2's files (%d manifests) %d bytes more; the cache keeps %d bytes",
		withRecord-base, len(fetched), withTablet-withRecord, tf.Held())
	runtime.KeepAlive(one)
	one = nil
	if testing.Short() {
		return
	}
	// The whole table, as a metadata store's Get loads it.
	whole := proto.Clone(rec).(*messages.TableMeta)
	if err := LoadManifests(ctx, whole, func(ctx context.Context, id ManifestID) ([]byte, error) {
		return ms.GetManifest(ctx, "huge", id.Gen, id.Digest)
	}); err != nil {
		t.Fatal(err)
	}
	withAll := heapHeld()
	t.Logf("heap held: the record with every tablet's files %d bytes", withAll-base)
	runtime.KeepAlive(whole)
	runtime.KeepAlive(rec)
}

// ingestWithManifests ingests rows with every file list in manifests.
func ingestWithManifests(t *testing.T, store BlockStore, ms MetaStore, table string, rows []Entry) *messages.TableMeta {
	t.Helper()
	cfg := testIngestConfig(9)
	cfg.BlockSize = 256
	cfg.Tablets = 3
	cfg.InlineFileBytes = -1
	tm, err := Ingest(context.Background(), store, ms, table, rows, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// A table ingested with its file lists in manifests: the record names
// manifests only, Get fills the files in, and the table reads back
// exactly; a small table with the default budget keeps them inline.
func TestIngestManifestsRoundTrip(t *testing.T) {
	ctx := context.Background()
	store, ms := newDirStores(t)
	rows := GenerateRows(20000)
	rec := ingestWithManifests(t, store, ms, "man", rows)
	if rec.GetMetaFormat() != MetaFormatManifests {
		t.Fatalf("meta_format %d", rec.GetMetaFormat())
	}
	for i, tab := range rec.GetTablets() {
		if len(tab.GetFiles()) != 0 || len(tab.GetManifests()) == 0 {
			t.Fatalf("tablet %d: %d files and %d manifests in the record", i, len(tab.GetFiles()), len(tab.GetManifests()))
		}
	}
	got, err := ms.Get(ctx, "man", rec.GetGeneration())
	if err != nil {
		t.Fatal(err)
	}
	if !sameRecord(got, rec) {
		t.Fatal("Get does not return the published record")
	}
	if inline, stored := proto.Size(got), proto.Size(rec); stored*10 > inline {
		t.Fatalf("record %d bytes; with the files inline %d", stored, inline)
	}
	sameEntries(t, readTable(t, store, got), rows)

	small := GenerateRows(500)
	cfg := testIngestConfig(10)
	tm, err := Ingest(ctx, store, ms, "small", small, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if tm.GetMetaFormat() != 0 || len(tm.GetTablets()[0].GetManifests()) != 0 {
		t.Fatalf("a small table's record: format %d, %d manifests", tm.GetMetaFormat(), len(tm.GetTablets()[0].GetManifests()))
	}
	sameEntries(t, readTable(t, store, tm), small)
}

// Changing, swapping or removing a manifest in the metadata store makes
// Get fail naming it; it never returns other files.
func TestManifestTamperDetected(t *testing.T) {
	ctx := context.Background()
	store, ms := newDirStores(t)
	rec := ingestWithManifests(t, store, ms, "tamper", GenerateRows(20000))
	ids := RecordManifests(rec)
	if len(ids) < 2 {
		t.Fatalf("%d manifests", len(ids))
	}
	path := func(id ManifestID) string { return filepath.Join(ms.Dir, "tamper", manifestFile(id)) }
	for _, tc := range []struct {
		name   string
		change func(orig []byte) error
		want   error
	}{
		{"flipped byte", func(orig []byte) error {
			b := append([]byte(nil), orig...)
			b[len(b)/2] ^= 1
			return os.WriteFile(path(ids[0]), b, 0o644)
		}, ErrCorrupt},
		{"another manifest", func([]byte) error {
			other, err := os.ReadFile(path(ids[1]))
			if err != nil {
				return err
			}
			return os.WriteFile(path(ids[0]), other, 0o644)
		}, ErrCorrupt},
		{"removed", func([]byte) error { return os.Remove(path(ids[0])) }, ErrNotFound},
	} {
		orig, err := os.ReadFile(path(ids[0]))
		if err != nil {
			t.Fatal(err)
		}
		if err := tc.change(orig); err != nil {
			t.Fatal(err)
		}
		_, err = ms.Get(ctx, "tamper", rec.GetGeneration())
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), ManifestName(ids[0])) {
			t.Errorf("%s: Get = %v, want %v naming %s", tc.name, err, tc.want, ManifestName(ids[0]))
		}
		if err := os.WriteFile(path(ids[0]), orig, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ms.Get(ctx, "tamper", rec.GetGeneration()); err != nil {
			t.Fatalf("%s: restored: %v", tc.name, err)
		}
	}
}

// A record names manifests by digest and counts: counts that disagree
// with the manifest, or a format newer than this build's, are refused.
func TestLoadManifestsChecks(t *testing.T) {
	ctx := context.Background()
	store, ms := newDirStores(t)
	rec := ingestWithManifests(t, store, ms, "chk", GenerateRows(5000))
	get := func(ctx context.Context, id ManifestID) ([]byte, error) {
		return ms.GetManifest(ctx, "chk", id.Gen, id.Digest)
	}
	for _, tc := range []struct {
		name   string
		change func(tm *messages.TableMeta)
		want   error
	}{
		{"blocks", func(tm *messages.TableMeta) { tm.Tablets[0].Manifests[0].Blocks++ }, ErrCorrupt},
		{"rows", func(tm *messages.TableMeta) { tm.Tablets[1].Rows-- }, ErrCorrupt},
		{"digest length", func(tm *messages.TableMeta) { tm.Tablets[0].Manifests[0].Digest = []byte{1} }, ErrCorrupt},
		{"files and manifests", func(tm *messages.TableMeta) {
			tm.Tablets[0].Files = []*messages.FileRef{{Id: "x", Blocks: 1}}
		}, ErrCorrupt},
		{"format", func(tm *messages.TableMeta) { tm.MetaFormat = MetaFormatManifests + 1 }, ErrFormat},
	} {
		tm := proto.Clone(rec).(*messages.TableMeta)
		tc.change(tm)
		if err := LoadManifests(ctx, tm, get); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	tm := proto.Clone(rec).(*messages.TableMeta)
	if err := LoadManifests(ctx, tm, get); err != nil {
		t.Fatal(err)
	}
}

func TestParseManifestName(t *testing.T) {
	id := ManifestID{Gen: 12, Digest: sha256.Sum256([]byte("x"))}
	if got, ok := ParseManifestName(ManifestName(id)); !ok || got != id {
		t.Fatalf("round trip of %s: %v %v", ManifestName(id), got, ok)
	}
	for _, bad := range []string{"g12", "g0.m" + strings.Repeat("a", 64), "g012.m" + strings.Repeat("a", 64),
		"g12.m" + strings.Repeat("a", 63), "g12.m" + strings.Repeat("A", 64), "x12.m" + strings.Repeat("a", 64)} {
		if _, ok := ParseManifestName(bad); ok {
			t.Errorf("ParseManifestName(%q) accepted", bad)
		}
	}
}

// TabletFiles loads a tablet's manifests once, checked, keeps the lists
// within MaxBytes, and refuses a manifest that does not match its ref.
func TestTabletFilesCache(t *testing.T) {
	ctx := context.Background()
	store, ms := newDirStores(t)
	rec := ingestWithManifests(t, store, ms, "tf", GenerateRows(20000))
	loaded, err := ms.Get(ctx, "tf", rec.GetGeneration())
	if err != nil {
		t.Fatal(err)
	}
	gets := 0
	tampered := false
	c := &TabletFiles{Get: func(ctx context.Context, table string, id ManifestID) ([]byte, error) {
		gets++
		b, err := ms.GetManifest(ctx, table, id.Gen, id.Digest)
		if tampered && err == nil {
			b = append([]byte(nil), b...)
			b[len(b)-1] ^= 1
		}
		return b, err
	}}
	files := func(i int) []*messages.FileRef {
		t.Helper()
		tab := rec.GetTablets()[i]
		fs, err := c.Files(ctx, tab.GetRef(), tab.GetManifests())
		if err != nil {
			t.Fatal(err)
		}
		if len(fs) != len(loaded.GetTablets()[i].GetFiles()) {
			t.Fatalf("tablet %d: %d files, want %d", i, len(fs), len(loaded.GetTablets()[i].GetFiles()))
		}
		for j, f := range fs {
			if !proto.Equal(f, loaded.GetTablets()[i].GetFiles()[j]) {
				t.Fatalf("tablet %d file %d differs from Get's", i, j)
			}
		}
		return fs
	}
	files(0)
	first := gets
	files(0)
	if gets != first {
		t.Fatalf("a second scan of tablet 0 fetched %d manifests again", gets-first)
	}
	c.MaxBytes = 1 // nothing is kept
	files(1)
	n := gets
	files(1)
	if gets == n {
		t.Fatal("a list over MaxBytes was kept")
	}
	tampered = true
	tab := rec.GetTablets()[2]
	if _, err := c.Files(ctx, tab.GetRef(), tab.GetManifests()); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("tampered manifest: %v, want %v", err, ErrCorrupt)
	}
}
