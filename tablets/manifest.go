package tablets

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/messages"
)

// Manifests keep a tablet's file list out of the table record.
//
// A table record (TableMeta) is one value in the metadata store, and every
// FileRef in it carries DigestSize bytes of block roots per block. A
// record that held every FileRef would grow with the table (a 1 TB table
// of 64 KiB blocks has 16 M blocks, 512 MiB of roots). Ingest therefore
// keeps a table's file lists in the record only while they stay under
// IngestConfig.InlineFileBytes; past that, each tablet's files go into
// manifests: runs of consecutive FileRefs of at most MaxManifestBytes,
// each encoded as a TabletMeta holding only files (deterministic
// protobuf) and stored by the metadata store (ManifestStore) under its
// generation and the SHA-256 of its bytes. The record names each manifest
// by that digest and its file, block and entry counts (ManifestRef), so
// it holds about 50 bytes per MaxManifestBytes of file lists, and sets
// meta_format to MetaFormatManifests.
//
// A ManifestStore's Get returns records with every tablet's files filled
// in from its manifests (LoadManifests), after checking each manifest's
// bytes against the digest in the record, its counts against the
// ManifestRef and the tablet's rows against the sum: what a reader trusts
// stays anchored in the record, which only the admin role writes. Its
// Record returns the record alone, and TabletFiles (or LoadTablet) loads
// one tablet's files with the same checks, so that a reader holds the
// file lists of the tablets it reads rather than the whole table's.
// Manifests live in the metadata store, not the block store, because
// every role that reads records (clients included) may read it.

// Metadata format constants.
const (
	// MetaFormatManifests is TableMeta.meta_format of a record whose
	// tablets may keep their files in manifests; 0 is a record with every
	// file inline. LoadManifests refuses a newer format.
	MetaFormatManifests = 2
	// MaxManifestBytes is the target size of a manifest: ingest closes a
	// manifest before a FileRef would take it past this size (a manifest
	// holds at least one FileRef, and a FileRef's roots are bounded by
	// MaxIndexBytes's block count).
	MaxManifestBytes = 512 << 10
	// DefaultInlineFileBytes is the default IngestConfig.InlineFileBytes.
	DefaultInlineFileBytes = 256 << 10
)

// ManifestStore is a MetaStore that also stores manifests (bus.MetaStore,
// DirMetaStore). Its Get fills tablets' files in from their manifests
// (LoadManifests) and its DeleteGeneration deletes the manifests the
// deleted record names, after the record. Safe for concurrent use.
type ManifestStore interface {
	MetaStore
	// PutManifest stores data as the manifest of table's generation gen
	// whose SHA-256 is digest. Storing the same manifest again succeeds.
	PutManifest(ctx context.Context, table string, gen uint64, digest [sha256.Size]byte, data []byte) error
	// GetManifest returns a manifest's bytes as stored (unchecked); a
	// missing one is an error wrapping the backend's not-found sentinel.
	GetManifest(ctx context.Context, table string, gen uint64, digest [sha256.Size]byte) ([]byte, error)
	// DeleteManifest removes a manifest; a missing one is not an error.
	DeleteManifest(ctx context.Context, table string, gen uint64, digest [sha256.Size]byte) error
	// Manifests lists the stored manifests of table, of every generation.
	Manifests(ctx context.Context, table string) ([]ManifestID, error)
	// Record returns one generation's record as stored: tablets that keep
	// their files in manifests have none filled in (TabletFiles loads
	// them one tablet at a time). A missing generation is an error
	// wrapping the backend's not-found sentinel; a newer format is
	// refused (CheckFormat).
	Record(ctx context.Context, table string, gen uint64) (*messages.TableMeta, error)
}

// ManifestID names a stored manifest.
type ManifestID struct {
	Gen    uint64
	Digest [sha256.Size]byte
}

// ManifestName is the name a store gives manifest id within its table:
// "g<gen>.m<hex digest>".
func ManifestName(id ManifestID) string {
	return "g" + strconv.FormatUint(id.Gen, 10) + ".m" + hex.EncodeToString(id.Digest[:])
}

// ParseManifestName is the inverse of ManifestName; ok is false for a
// name of another shape.
func ParseManifestName(name string) (id ManifestID, ok bool) {
	g, h, found := strings.Cut(name, ".m")
	g, isGen := strings.CutPrefix(g, "g")
	if !found || !isGen || len(h) != 2*sha256.Size {
		return ManifestID{}, false
	}
	gen, err := strconv.ParseUint(g, 10, 64)
	if err != nil || gen == 0 || strconv.FormatUint(gen, 10) != g {
		return ManifestID{}, false
	}
	if n, err := hex.Decode(id.Digest[:], []byte(h)); err != nil || n != sha256.Size || hex.EncodeToString(id.Digest[:]) != h {
		return ManifestID{}, false
	}
	id.Gen = gen
	return id, true
}

// ManifestOf is the id of the manifest ref names in generation gen.
func ManifestOf(gen uint64, ref *messages.ManifestRef) ManifestID {
	id := ManifestID{Gen: gen}
	copy(id.Digest[:], ref.GetDigest())
	return id
}

// RecordManifests returns the manifests a record names.
func RecordManifests(tm *messages.TableMeta) []ManifestID {
	var out []ManifestID
	for _, t := range tm.GetTablets() {
		for _, m := range t.GetManifests() {
			out = append(out, ManifestOf(tm.GetGeneration(), m))
		}
	}
	return out
}

// LoadManifests fills in the files of every tablet of tm that keeps them
// in manifests, fetching each with get and checking it: its SHA-256
// against the record's digest, that it decodes to a TabletMeta holding
// only files, their count, blocks and entries against the ManifestRef,
// and the tablet's rows against the sum. tm keeps its manifests. A record
// of a newer meta_format than MetaFormatManifests is an error wrapping
// ErrFormat; a failed check wraps ErrCorrupt; a failed get is returned
// wrapped, naming the manifest.
func LoadManifests(ctx context.Context, tm *messages.TableMeta, get func(ctx context.Context, id ManifestID) ([]byte, error)) error {
	if err := CheckFormat(tm); err != nil {
		return err
	}
	for i, t := range tm.GetTablets() {
		if len(t.GetManifests()) == 0 {
			continue
		}
		what := tabletWhat(tm, i)
		if len(t.GetFiles()) > 0 {
			return fmt.Errorf("%w: %s has both files and manifests", ErrCorrupt, what)
		}
		files, err := loadFiles(ctx, what, tm.GetGeneration(), t.GetManifests(), get)
		if err != nil {
			return err
		}
		if err := checkRows(what, t, files); err != nil {
			return err
		}
		t.Files = files
	}
	return nil
}

// CheckFormat refuses a record of a newer meta_format than
// MetaFormatManifests with an error wrapping ErrFormat.
func CheckFormat(tm *messages.TableMeta) error {
	if f := tm.GetMetaFormat(); f > MetaFormatManifests {
		return fmt.Errorf("%w: table %s generation %d has metadata format %d; this build reads formats up to %d (upgrade it)",
			ErrFormat, tm.GetName(), tm.GetGeneration(), f, MetaFormatManifests)
	}
	return nil
}

// tabletWhat names tablet i of tm in errors.
func tabletWhat(tm *messages.TableMeta, i int) string {
	return fmt.Sprintf("table %s generation %d tablet %d", tm.GetName(), tm.GetGeneration(), i)
}

// checkRows checks tablet t's row count against the files its manifests
// hold.
func checkRows(what string, t *messages.TabletMeta, files []*messages.FileRef) error {
	var entries uint64
	for _, f := range files {
		entries += f.GetEntries()
	}
	if entries != t.GetRows() {
		return fmt.Errorf("%w: %s: manifests hold %d rows, the record says %d", ErrCorrupt, what, entries, t.GetRows())
	}
	return nil
}

// loadFiles fetches and checks the manifests refs of generation gen
// (what names their tablet in errors) and returns their files in order.
func loadFiles(ctx context.Context, what string, gen uint64, refs []*messages.ManifestRef, get func(ctx context.Context, id ManifestID) ([]byte, error)) ([]*messages.FileRef, error) {
	var files []*messages.FileRef
	for _, m := range refs {
		if len(m.GetDigest()) != sha256.Size {
			return nil, fmt.Errorf("%w: %s: manifest digest of %d bytes", ErrCorrupt, what, len(m.GetDigest()))
		}
		id := ManifestOf(gen, m)
		data, err := get(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("%s manifest %s: %w", what, ManifestName(id), err)
		}
		fs, err := decodeManifest(data, id.Digest, m)
		if err != nil {
			return nil, fmt.Errorf("%s manifest %s: %w", what, ManifestName(id), err)
		}
		files = append(files, fs...)
	}
	return files, nil
}

// DispatchFiles is what a scan request carries for tablet t: its files,
// or none when it keeps them in manifests (the request carries
// t.Manifests and the scan server loads them, TabletFiles). The files
// are copies without their block roots when every one has them
// (rootsLeftOut): a scan server needs to know only that they exist, and
// a tablet's roots are 32 bytes a block.
func DispatchFiles(t *messages.TabletMeta) (files []*messages.FileRef, rootsLeftOut bool) {
	if len(t.GetManifests()) > 0 {
		return nil, false
	}
	files = t.GetFiles()
	for _, f := range files {
		if !HasBlockRoots(f) {
			return files, false
		}
	}
	out := make([]*messages.FileRef, len(files))
	for i, f := range files {
		out[i] = &messages.FileRef{Id: f.GetId(), Blocks: f.GetBlocks(), Entries: f.GetEntries(), Bytes: f.GetBytes()}
	}
	return out, len(out) > 0
}

// TabletFiles loads the files of a tablet that keeps them in manifests,
// one tablet at a time: a scan server when a scan request names the
// tablet's manifests, a client when it scans the tablet (Tablet). It
// fetches them (from Get), checks them against the record's references
// and keeps the checked file lists of the tablets it loaded, up to
// MaxBytes of encoded FileRefs, dropping the least recently used; a
// list larger than MaxBytes is loaded for each use and not kept. Safe
// for concurrent use; two scans of a tablet not yet loaded may both
// load it.
type TabletFiles struct {
	// MaxBytes bounds the file lists kept; 0 means 64 MiB.
	MaxBytes int64
	// Get fetches a manifest of a table (ManifestStore.GetManifest).
	Get func(ctx context.Context, table string, id ManifestID) ([]byte, error)

	mu    sync.Mutex
	size  int64
	tick  uint64
	lists map[tabletFilesKey]*tabletFilesEntry
}

type tabletFilesKey struct {
	table     string
	gen       uint64
	index     uint32
	firstRoot string // the first manifest's digest: a record names one list per tablet
	manifests int
}

type tabletFilesEntry struct {
	files []*messages.FileRef
	bytes int64
	used  uint64
}

// Files returns the files of tablet ref whose manifests are refs.
func (c *TabletFiles) Files(ctx context.Context, ref *messages.TabletRef, refs []*messages.ManifestRef) ([]*messages.FileRef, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	key := tabletFilesKey{table: ref.GetTable(), gen: ref.GetGeneration(), index: ref.GetIndex(),
		firstRoot: string(refs[0].GetDigest()), manifests: len(refs)}
	c.mu.Lock()
	c.tick++
	if e := c.lists[key]; e != nil {
		e.used = c.tick
		c.mu.Unlock()
		return e.files, nil
	}
	c.mu.Unlock()
	what := fmt.Sprintf("table %s generation %d tablet %d", ref.GetTable(), ref.GetGeneration(), ref.GetIndex())
	files, err := loadFiles(ctx, what, ref.GetGeneration(), refs, func(ctx context.Context, id ManifestID) ([]byte, error) {
		return c.Get(ctx, ref.GetTable(), id)
	})
	if err != nil {
		return nil, err
	}
	var n int64
	for _, f := range files {
		n += int64(fileRefSize(f))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lists == nil {
		c.lists = map[tabletFilesKey]*tabletFilesEntry{}
	}
	limit := c.MaxBytes
	if limit <= 0 {
		limit = 64 << 20
	}
	for c.size+n > limit && len(c.lists) > 0 {
		var oldest tabletFilesKey
		var min uint64 = ^uint64(0)
		for k, e := range c.lists {
			if e.used < min {
				oldest, min = k, e.used
			}
		}
		c.size -= c.lists[oldest].bytes
		delete(c.lists, oldest)
	}
	if _, ok := c.lists[key]; !ok && n <= limit {
		c.lists[key] = &tabletFilesEntry{files: files, bytes: n, used: c.tick}
		c.size += n
	}
	return files, nil
}

// Tablet returns tablet idx of record tm (as a ManifestStore's Record
// returns it) with its files: tm's own when it keeps them inline, else a
// copy of the tablet with the files its manifests hold (Files), whose
// row count is checked against the tablet's. tm is not changed.
func (c *TabletFiles) Tablet(ctx context.Context, tm *messages.TableMeta, idx int) (*messages.TabletMeta, error) {
	return loadTablet(tm, idx, func(ref *messages.TabletRef, refs []*messages.ManifestRef) ([]*messages.FileRef, error) {
		return c.Files(ctx, ref, refs)
	})
}

// LoadTablet is TabletFiles.Tablet without a cache: tablet idx of
// record tm with the files of its manifests, each fetched with get and
// checked.
func LoadTablet(ctx context.Context, tm *messages.TableMeta, idx int, get func(ctx context.Context, id ManifestID) ([]byte, error)) (*messages.TabletMeta, error) {
	return loadTablet(tm, idx, func(ref *messages.TabletRef, refs []*messages.ManifestRef) ([]*messages.FileRef, error) {
		return loadFiles(ctx, tabletWhat(tm, idx), tm.GetGeneration(), refs, get)
	})
}

// loadTablet returns tablet idx of tm with the files load returns for
// its manifests, their rows checked against the tablet's.
func loadTablet(tm *messages.TableMeta, idx int, load func(*messages.TabletRef, []*messages.ManifestRef) ([]*messages.FileRef, error)) (*messages.TabletMeta, error) {
	if idx < 0 || idx >= len(tm.GetTablets()) {
		return nil, fmt.Errorf("%w: table %s generation %d has %d tablets, no tablet %d", ErrCorrupt, tm.GetName(), tm.GetGeneration(), len(tm.GetTablets()), idx)
	}
	t := tm.GetTablets()[idx]
	if len(t.GetManifests()) == 0 {
		return t, nil
	}
	what := tabletWhat(tm, idx)
	if len(t.GetFiles()) > 0 {
		return nil, fmt.Errorf("%w: %s has both files and manifests", ErrCorrupt, what)
	}
	files, err := load(&messages.TabletRef{Table: tm.GetName(), Generation: tm.GetGeneration(), Index: uint32(idx)}, t.GetManifests())
	if err != nil {
		return nil, err
	}
	if err := checkRows(what, t, files); err != nil {
		return nil, err
	}
	out := proto.Clone(t).(*messages.TabletMeta)
	out.Files = files
	return out, nil
}

// Held returns the bytes of encoded FileRefs the cache keeps.
func (c *TabletFiles) Held() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}

// decodeManifest checks a manifest's bytes against its digest and ref
// and returns its files.
func decodeManifest(data []byte, digest [sha256.Size]byte, ref *messages.ManifestRef) ([]*messages.FileRef, error) {
	if got := sha256.Sum256(data); got != digest {
		return nil, fmt.Errorf("%w: content hash %x does not match the record's", ErrCorrupt, got)
	}
	var m messages.TabletMeta
	if err := proto.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: decode: %v", ErrCorrupt, err)
	}
	if m.GetRef() != nil || m.GetRows() != 0 || len(m.GetManifests()) > 0 {
		return nil, fmt.Errorf("%w: holds more than files", ErrCorrupt)
	}
	var blocks, entries uint64
	for _, f := range m.GetFiles() {
		blocks += uint64(f.GetBlocks())
		entries += f.GetEntries()
	}
	if uint64(len(m.GetFiles())) != uint64(ref.GetFiles()) || blocks != ref.GetBlocks() || entries != ref.GetEntries() {
		return nil, fmt.Errorf("%w: holds %d files, %d blocks, %d entries; the record says %d, %d, %d",
			ErrCorrupt, len(m.GetFiles()), blocks, entries, ref.GetFiles(), ref.GetBlocks(), ref.GetEntries())
	}
	return m.GetFiles(), nil
}

// sameRecord reports whether loaded (a record as a ManifestStore's Get
// returns it, files filled in) is the record tm.
func sameRecord(loaded, tm *messages.TableMeta) bool {
	c := proto.Clone(loaded).(*messages.TableMeta)
	for _, t := range c.GetTablets() {
		if len(t.GetManifests()) > 0 {
			t.Files = nil
		}
	}
	return proto.Equal(c, tm)
}

// manifestWriter builds the file lists of a table's tablets while ingest
// writes them: inline in the record while the table's lists fit the
// inline budget (or always, without a ManifestStore), else in manifests
// put to ms as they fill. It belongs to one goroutine.
type manifestWriter struct {
	ctx    context.Context
	ms     ManifestStore // nil: every list inline
	table  string
	gen    uint64
	inline int // bytes of file lists the record may still take

	files   []*messages.FileRef // the tablet's pending files
	size    int                 // their encoded size as a TabletMeta's files
	spilled bool                // the tablet's files go to manifests
	refs    []*messages.ManifestRef
	written []ManifestID // every manifest put, for a cleanup
}

// add appends the tablet's next file.
func (w *manifestWriter) add(f *messages.FileRef) error {
	n := fileRefSize(f)
	if w.ms != nil && !w.spilled && w.size+n > w.inline {
		w.spilled = true
	}
	if w.spilled && len(w.files) > 0 && w.size+n > MaxManifestBytes {
		if err := w.flush(); err != nil {
			return err
		}
	}
	w.files = append(w.files, f)
	w.size += n
	return nil
}

// flush puts the pending files as one manifest.
func (w *manifestWriter) flush() error {
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(&messages.TabletMeta{Files: w.files})
	if err != nil {
		return fmt.Errorf("tablets: encode manifest: %w", err)
	}
	id := ManifestID{Gen: w.gen, Digest: sha256.Sum256(data)}
	w.written = append(w.written, id)
	if err := w.ms.PutManifest(w.ctx, w.table, w.gen, id.Digest, data); err != nil {
		return fmt.Errorf("tablets: put manifest %s of %s: %w", ManifestName(id), w.table, err)
	}
	ref := &messages.ManifestRef{Digest: id.Digest[:], Files: uint32(len(w.files))}
	for _, f := range w.files {
		ref.Blocks += uint64(f.GetBlocks())
		ref.Entries += f.GetEntries()
	}
	w.refs = append(w.refs, ref)
	w.files, w.size = nil, 0
	return nil
}

// finish ends the tablet: its files go into tab (inline) or its last
// manifest is put and tab names its manifests. It reports whether the
// tablet uses manifests.
func (w *manifestWriter) finish(tab *messages.TabletMeta) (bool, error) {
	spilled := w.spilled
	if !spilled {
		tab.Files = w.files
		w.inline -= w.size
	} else {
		if len(w.files) > 0 {
			if err := w.flush(); err != nil {
				return false, err
			}
		}
		tab.Manifests = w.refs
	}
	w.files, w.size, w.spilled, w.refs = nil, 0, false, nil
	return spilled, nil
}

// removeManifests deletes the manifests a failed ingest put, stopping at
// the first failed delete.
func removeManifests(ctx context.Context, ms ManifestStore, table string, ids []ManifestID) error {
	for i, id := range ids {
		if err := ms.DeleteManifest(ctx, table, id.Gen, id.Digest); err != nil {
			return fmt.Errorf("removing its manifests failed: %d of %d left in the metadata store: %w", len(ids)-i, len(ids), err)
		}
	}
	return nil
}

// fileRefSize is f's encoded size as a repeated message field.
func fileRefSize(f *messages.FileRef) int {
	n := proto.Size(f)
	return 1 + uvarintLen(uint64(n)) + n
}
