package tablets

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/scanplane/scanplane/messages"
)

// Ingest limits.
const (
	// MaxBlockSize is the largest IngestConfig.BlockSize: with a maximal
	// entry a block stays under NATS's default 1 MiB payload.
	MaxBlockSize = 512 << 10
	// MaxTablets is the largest IngestConfig.Tablets.
	MaxTablets = 1 << 16
	// MaxIndexBytes: ingest starts a new file for the tablet once a file's
	// index reaches this size, so no index object grows past about
	// MaxIndexBytes + 2*MaxKeyLen.
	MaxIndexBytes = 256 << 10
	// NonceBytes is the number of random bytes in a file id's nonce.
	NonceBytes = 8
	// MaxWriters is the largest IngestConfig.Writers.
	MaxWriters = 1024
	// DefaultWriters is the default IngestConfig.Writers.
	DefaultWriters = 64
	// DefaultInFlightBytes is the default IngestConfig.InFlightBytes.
	DefaultInFlightBytes = 32 << 20
	// DefaultSortBuffer is the default IngestConfig.SortBuffer.
	DefaultSortBuffer = 64 << 20
	// RowOverhead is what IngestRows counts per buffered row on top of
	// its key and value: the row's bookkeeping in the sort buffer.
	RowOverhead = 32
)

// IngestConfig configures Ingest. Start from DefaultIngestConfig; zero
// numeric fields take their defaults, but Now and Rand are required.
type IngestConfig struct {
	// BlockSize is the target size of a data block in bytes; 0 means
	// DefaultBlockSize (64 KiB). At most MaxBlockSize.
	BlockSize int
	// Tablets splits the table into this many tablets of about equal row
	// count; 0 means 1. Ignored when SplitKeys is set. With fewer rows
	// than Tablets, the table gets one tablet per row (at least one).
	Tablets int
	// SplitKeys are explicit split points (strictly increasing, non-empty;
	// see ValidateSplits): len(SplitKeys)+1 tablets. Default none.
	SplitKeys [][]byte
	// KeepGenerations is how many generations stay readable: the new
	// one and the KeepGenerations-1 newest up to the one it replaces; 0
	// means 2 (the new and the one it replaced). Publishing deletes every
	// other generation older than the new one, metadata first and then
	// its blocks: with a GenerationLister meta store that includes
	// generations rolled back from (see Rollback); with another, it
	// deletes generation N-KeepGenerations and those below it. At least 1.
	KeepGenerations int
	// Writers is how many block-store Puts an ingest has in flight (sent
	// and not yet answered) at a time, and how many files it writes at
	// once; 0 means DefaultWriters (64).
	Writers int
	// InFlightBytes bounds the encoded files an ingest holds between
	// encoding and stored; 0 means DefaultInFlightBytes (32 MiB). A file
	// larger than the bound is written alone.
	InFlightBytes int64
	// SortBuffer bounds the rows IngestRows holds in memory to sort them,
	// counting each row's key and value plus RowOverhead bytes; a full
	// buffer is sorted and spilled to a run file in TempDir, and the runs
	// are merged. 0 means DefaultSortBuffer (64 MiB).
	SortBuffer int64
	// InlineFileBytes bounds the encoded file lists (FileRefs with their
	// block roots) the table record holds. With a metadata store that is
	// a ManifestStore, a tablet whose list would pass what is left of the
	// bound keeps it in manifests instead (see manifest.go), so the
	// record stays small whatever the table's size; other stores always
	// hold the lists in the record. 0 means DefaultInlineFileBytes
	// (256 KiB); negative means no file list in the record.
	InlineFileBytes int64
	// TempDir is where IngestRows spills sorted runs, in a directory of
	// its own that it removes before returning; "" means os.TempDir().
	TempDir string
	// Progress, if set, is called with stage "read" (IngestRows: rows
	// read; total -1), "sort" (Ingest: rows), "write" (rows written, per
	// block) and "publish" (0 of 1, then 1 of 1). Calls come from one
	// goroutine at a time, not always the same one.
	Progress func(stage string, done, total int64)
	// Now is the clock for TableMeta.created_unix_ms. Required; default
	// time.Now.
	Now func() time.Time
	// Rand supplies the random nonce that makes the file ids of each
	// ingest unique. Required; default crypto/rand.Reader.
	Rand io.Reader
}

// DefaultIngestConfig returns the defaults: 64 KiB blocks, 1 tablet, 2
// generations kept, 64 Puts in flight, 32 MiB of files in flight, a
// 64 MiB sort buffer, 256 KiB of file lists in the record, the system
// clock and crypto/rand.
func DefaultIngestConfig() IngestConfig {
	return IngestConfig{
		BlockSize:       DefaultBlockSize,
		Tablets:         1,
		KeepGenerations: 2,
		Writers:         DefaultWriters,
		InFlightBytes:   DefaultInFlightBytes,
		SortBuffer:      DefaultSortBuffer,
		InlineFileBytes: DefaultInlineFileBytes,
		Now:             time.Now,
		Rand:            rand.Reader,
	}
}

// Validate checks the configuration; errors wrap ErrBadInput (or
// ErrBadSplits) and name the field.
func (c IngestConfig) Validate() error {
	switch {
	case c.BlockSize < 0 || c.BlockSize > MaxBlockSize:
		return fmt.Errorf("%w: IngestConfig.BlockSize %d out of [0, %d]", ErrBadInput, c.BlockSize, MaxBlockSize)
	case c.Tablets < 0 || c.Tablets > MaxTablets:
		return fmt.Errorf("%w: IngestConfig.Tablets %d out of [0, %d]", ErrBadInput, c.Tablets, MaxTablets)
	case len(c.SplitKeys) >= MaxTablets:
		return fmt.Errorf("%w: IngestConfig.SplitKeys has %d keys, at most %d allowed", ErrBadInput, len(c.SplitKeys), MaxTablets-1)
	case c.Writers < 0 || c.Writers > MaxWriters:
		return fmt.Errorf("%w: IngestConfig.Writers %d out of [0, %d]", ErrBadInput, c.Writers, MaxWriters)
	case c.InFlightBytes < 0:
		return fmt.Errorf("%w: IngestConfig.InFlightBytes %d is negative", ErrBadInput, c.InFlightBytes)
	case c.SortBuffer < 0:
		return fmt.Errorf("%w: IngestConfig.SortBuffer %d is negative", ErrBadInput, c.SortBuffer)
	case c.KeepGenerations < 0:
		return fmt.Errorf("%w: IngestConfig.KeepGenerations %d is negative", ErrBadInput, c.KeepGenerations)
	case c.Now == nil:
		return fmt.Errorf("%w: IngestConfig.Now is nil (start from DefaultIngestConfig)", ErrBadInput)
	case c.Rand == nil:
		return fmt.Errorf("%w: IngestConfig.Rand is nil (start from DefaultIngestConfig)", ErrBadInput)
	}
	if err := ValidateSplits(c.SplitKeys); err != nil {
		return fmt.Errorf("IngestConfig.SplitKeys: %w", err)
	}
	return nil
}

func (c IngestConfig) withDefaults() IngestConfig {
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.Tablets == 0 {
		c.Tablets = 1
	}
	if c.KeepGenerations == 0 {
		c.KeepGenerations = 2
	}
	if c.Writers == 0 {
		c.Writers = DefaultWriters
	}
	if c.InFlightBytes == 0 {
		c.InFlightBytes = DefaultInFlightBytes
	}
	if c.SortBuffer == 0 {
		c.SortBuffer = DefaultSortBuffer
	}
	if c.InlineFileBytes == 0 {
		c.InlineFileBytes = DefaultInlineFileBytes
	}
	if c.Progress == nil {
		c.Progress = func(string, int64, int64) {}
	}
	return c
}

// FileID is the id of file k (0, 1, ...) of tablet index of generation gen
// of table: "<table>.g<gen>.t<index>.<nonce>", with ".f<k>" appended for
// k > 0. It is a valid object key for every valid table name and a nonce of
// [0-9a-f].
func FileID(table string, gen uint64, index int, nonce string, k int) string {
	id := table + ".g" + strconv.FormatUint(gen, 10) + ".t" + strconv.Itoa(index) + "." + nonce
	if k > 0 {
		id += ".f" + strconv.Itoa(k)
	}
	return id
}

// Ingest writes entries as a new generation of table and publishes it:
//
//  1. validate the name, the configuration and every entry; sort a copy
//     of entries (the caller's slice is not reordered); a duplicate key is
//     an ErrBadInput naming the key;
//  2. choose split points: SplitKeys, or equal row counts over Tablets;
//  3. generation = current + 1, or one more than the newest stored
//     generation when meta is a GenerationLister (after a rollback the
//     current one is not the newest); write every tablet's file(s) (ids from
//     FileID with a fresh nonce; tablets without rows get no file) to
//     store, each file's blocks before its index, and the file lists
//     past cfg.InlineFileBytes as manifests to meta (a ManifestStore);
//  4. publish the TableMeta with meta.Publish(meta, current). If another
//     writer published first, return an error wrapping ErrConflict after
//     deleting the objects written in step 3;
//  5. delete the generations KeepGenerations does not keep: metadata
//     first, then blocks. A failure here returns the published meta
//     together with an error wrapping ErrCleanup;
//  6. when store is a TableKeyLister and meta a GenerationLister, delete
//     the table's objects no stored generation names (SweepOrphans: the
//     leftovers of failed ingests); a failure is an ErrCleanup too.
//
// The TableMeta returned is the record as published: a tablet that keeps
// its files in manifests has Manifests and no Files (MetaStore.Get fills
// them in).
//
// Readers therefore see the old or the new generation, never a mix. When
// step 3 fails (or ctx ends) the objects written so far are deleted. When
// Publish fails, Ingest reads the current generation back: if its meta is
// current after all (a lost reply) Ingest succeeds; if another writer's
// generation is current or in the way, it is ErrConflict; if nothing was
// published it returns the error; in both cases it deletes its objects and
// its generation's metadata if that was stored without becoming current.
// If even the read-back fails, the outcome is unknown and the objects are
// left in place rather than risk deleting a published generation. A
// cleanup that fails (it stops at the first failed delete) is reported in
// the returned error with the number of files left behind.
func Ingest(ctx context.Context, store BlockStore, meta MetaStore, table string, entries []Entry, cfg IngestConfig) (*messages.TableMeta, error) {
	if err := ValidateTableName(table); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	total := int64(len(entries))

	// 1. Validate and sort.
	cfg.Progress("sort", 0, total)
	rows := make([]Entry, len(entries))
	for i, e := range entries {
		switch {
		case len(e.Key) == 0:
			return nil, fmt.Errorf("%w: entry %d has an empty key", ErrBadInput, i)
		case len(e.Key) > MaxKeyLen:
			return nil, fmt.Errorf("%w: entry %d: key is %d bytes, at most %d allowed", ErrBadInput, i, len(e.Key), MaxKeyLen)
		case len(e.Value) > MaxValueLen:
			return nil, fmt.Errorf("%w: entry %d (key %s): value is %d bytes, at most %d allowed", ErrBadInput, i, FormatKey(e.Key), len(e.Value), MaxValueLen)
		}
		rows[i] = e
	}
	if !slices.IsSortedFunc(rows, compareEntries) {
		slices.SortFunc(rows, compareEntries)
	}
	for i := 1; i < len(rows); i++ {
		if bytes.Equal(rows[i-1].Key, rows[i].Key) {
			return nil, fmt.Errorf("%w: duplicate key %s", ErrBadInput, FormatKey(rows[i].Key))
		}
	}
	cfg.Progress("sort", total, total)

	return ingestSorted(ctx, store, meta, table, &sliceRows{rows: rows}, cfg)
}

// ingestSorted is steps 2 to 6 of Ingest over validated rows in strictly
// increasing key order.
func ingestSorted(ctx context.Context, store BlockStore, meta MetaStore, table string, rows sortedRows, cfg IngestConfig) (*messages.TableMeta, error) {
	total := rows.Len()
	cur, err := meta.Current(ctx, table)
	if err != nil {
		return nil, fmt.Errorf("tablets: ingest %s: %w", table, err)
	}
	gen := cur + 1
	var stored []uint64
	gl, listed := meta.(GenerationLister)
	if listed {
		if stored, err = gl.Generations(ctx, table); err != nil {
			return nil, fmt.Errorf("tablets: ingest %s: %w", table, err)
		}
		if n := len(stored); n > 0 && stored[n-1] >= gen {
			gen = stored[n-1] + 1
		}
	}
	var nb [NonceBytes]byte
	if _, err := io.ReadFull(cfg.Rand, nb[:]); err != nil {
		return nil, fmt.Errorf("tablets: ingest %s: reading the nonce: %w", table, err)
	}
	nonce := hex.EncodeToString(nb[:])
	tm := &messages.TableMeta{
		Name:          table,
		Generation:    gen,
		CreatedUnixMs: cfg.Now().UnixMilli(),
		BlockSize:     uint32(cfg.BlockSize),
		Rows:          uint64(total),
	}

	// 2 and 3. Split points, and the files written concurrently.
	bw := newBlockWriter(ctx, store, cfg, total)
	ms, _ := meta.(ManifestStore)
	bw.mw = &manifestWriter{ctx: bw.ctx, ms: ms, table: table, gen: gen, inline: int(max(cfg.InlineFileBytes, 0))}
	if err := writeTablets(bw, bw.mw, rows, table, gen, nonce, cfg, tm); err != nil {
		_ = bw.wait() // its error, if any, is err or came after it
		return nil, bw.failed(table, err)
	}
	if err := bw.wait(); err != nil {
		return nil, bw.failed(table, err)
	}
	cleanupWritten := bw.removeAll

	// 4. Publish.
	cfg.Progress("publish", 0, 1)
	if err := meta.Publish(ctx, tm, cur); err != nil {
		if err := publishFailed(ctx, meta, tm, cur, err, cleanupWritten); err != nil {
			return nil, err
		}
	}
	cfg.Progress("publish", 1, 1)

	// 5. Delete old generations.
	if listed {
		for _, g := range unkept(stored, gen, cur, cfg.KeepGenerations) {
			if err := deleteGeneration(ctx, store, meta, table, g); err != nil {
				return tm, fmt.Errorf("%w: %w", ErrCleanup, err)
			}
		}
	} else if gen > uint64(cfg.KeepGenerations) {
		if err := deleteGenerations(ctx, store, meta, table, gen-uint64(cfg.KeepGenerations)); err != nil {
			return tm, err
		}
	}

	// 6. Delete the objects no stored generation names (SweepOrphans).
	if kl, ok := store.(TableKeyLister); ok && listed {
		if _, err := SweepOrphans(ctx, kl, meta, gl, table, gen, tm); err != nil {
			return tm, fmt.Errorf("%w: %w", ErrCleanup, err)
		}
	}
	return tm, nil
}

// unkept returns the generations of stored (ascending) that publishing
// gen over prev deletes: those older than gen except the keep-1 newest
// up to prev. Generations newer than gen are another writer's, under way.
func unkept(stored []uint64, gen, prev uint64, keep int) []uint64 {
	kept := keep - 1
	var out []uint64
	for i := len(stored) - 1; i >= 0; i-- {
		switch g := stored[i]; {
		case g >= gen:
		case g <= prev && kept > 0:
			kept--
		default:
			out = append(out, g)
		}
	}
	return out
}

func compareEntries(a, b Entry) int { return bytes.Compare(a.Key, b.Key) }

// removeWritten deletes the objects of the files a failed ingest wrote
// (the last one possibly in part). It stops at the first delete that
// fails, so a store that does not answer costs one failed call, not one
// per object, and returns an error saying how many files were left.
func removeWritten(ctx context.Context, store BlockStore, written []*messages.FileRef) error {
	for i, ref := range written {
		id := ref.GetId()
		keys := []string{IndexKey(id)}
		for b := 0; b < int(ref.GetBlocks()); b++ {
			keys = append(keys, BlockKey(id, b))
		}
		for _, key := range keys {
			if err := store.Delete(ctx, key); err != nil {
				return fmt.Errorf("removing what it wrote failed: %d of %d files left in the store (from %s): %w", len(written)-i, len(written), id, err)
			}
		}
	}
	return nil
}

// publishFailed sorts out a failed Publish and returns the error Ingest
// reports, or nil when tm turns out to be current after all (a lost
// reply). Unless the outcome is unknown, our objects are deleted, and so
// is our generation's metadata if it was stored but never made current.
func publishFailed(ctx context.Context, meta MetaStore, tm *messages.TableMeta, prev uint64, perr error, cleanup func() error) error {
	name, gen := tm.GetName(), tm.GetGeneration()
	rctx := context.WithoutCancel(ctx)
	cur, err := meta.Current(rctx, name)
	if err != nil {
		return fmt.Errorf("tablets: ingest %s: publish generation %d: %w (outcome unknown: %v; its objects were left in the store)", name, gen, perr, err)
	}
	got, gerr := meta.Get(rctx, name, gen)
	ours := gerr == nil && sameRecord(got, tm)
	if cur == gen && ours {
		return nil
	}
	var out error
	if cur == prev && !errors.Is(perr, ErrConflict) && (gerr != nil || ours) {
		// Nothing was published and no competitor is in sight.
		out = fmt.Errorf("tablets: ingest %s: publish generation %d: %w", name, gen, perr)
	} else {
		// Another writer published (or is publishing) first.
		out = fmt.Errorf("%w: ingest %s: generation %d lost to a concurrent publish (table at generation %d): %w",
			ErrConflict, name, gen, cur, perr)
	}
	if ours && cur != gen {
		if err := meta.DeleteGeneration(rctx, name, gen); err != nil {
			out = fmt.Errorf("%w; removing its unpublished generation %d metadata failed: %w", out, gen, err)
		}
	}
	if err := cleanup(); err != nil {
		out = fmt.Errorf("%w; %w", out, err)
	}
	return out
}

// deleteGeneration deletes one non-current generation: its metadata,
// then its files' objects (all of them, returning the first error).
func deleteGeneration(ctx context.Context, store BlockStore, meta MetaStore, table string, g uint64) error {
	old, err := meta.Get(ctx, table, g)
	if err != nil {
		return fmt.Errorf("table %s generation %d: %w", table, g, err)
	}
	if err := meta.DeleteGeneration(ctx, table, g); err != nil {
		return fmt.Errorf("table %s generation %d: %w", table, g, err)
	}
	var first error
	for _, t := range old.GetTablets() {
		for _, f := range t.GetFiles() {
			if err := DeleteFile(ctx, store, f); err != nil && first == nil {
				first = fmt.Errorf("table %s generation %d file %s: %w", table, g, f.GetId(), err)
			}
		}
	}
	return first
}

// GenerationLister is a MetaStore that lists a table's stored
// generations (bus.MetaStore). Ingest numbers and keeps generations by
// that list when its MetaStore is one.
type GenerationLister interface {
	// Generations returns the generations whose metadata is stored,
	// ascending.
	Generations(ctx context.Context, table string) ([]uint64, error)
}

// GenerationStore is a MetaStore that can list a table's generations,
// make a stored one current again and remove the table's current
// pointer (bus.MetaStore): what Rollback, DropGeneration and DropTable
// need.
type GenerationStore interface {
	MetaStore
	GenerationLister
	// SetCurrent makes stored generation gen current if the current one
	// is still prev; otherwise it returns a conflict error.
	SetCurrent(ctx context.Context, table string, gen, prev uint64) error
	// DeleteTable removes the table's current pointer if it is still at
	// prev; otherwise it returns a conflict error.
	DeleteTable(ctx context.Context, table string, prev uint64) error
}

// Generations returns the stored generations of table (ascending) with
// their metadata, and the current generation (0: the table has none).
func Generations(ctx context.Context, meta GenerationStore, table string) (metas []*messages.TableMeta, cur uint64, err error) {
	if cur, err = meta.Current(ctx, table); err != nil {
		return nil, 0, err
	}
	gens, err := meta.Generations(ctx, table)
	if err != nil {
		return nil, 0, err
	}
	for _, g := range gens {
		tm, err := meta.Get(ctx, table, g)
		if err != nil {
			return nil, 0, err
		}
		metas = append(metas, tm)
	}
	return metas, cur, nil
}

// Rollback makes generation gen of table current again, provided its
// metadata and every file's index are still in store (a file's index is
// written after its blocks and deleted before them, so an index that
// exists names blocks that exist). It returns the generation that was
// current. A table or generation that is not stored is an error wrapping
// ErrNotFound; a missing index is an error wrapping the store's error;
// a concurrent change of the current generation is the meta store's
// conflict error. Making the current generation current changes nothing.
func Rollback(ctx context.Context, store BlockStore, meta GenerationStore, table string, gen uint64) (prev uint64, err error) {
	prev, gens, err := generationsOf(ctx, meta, table)
	if err != nil {
		return 0, err
	}
	if gen == prev {
		return prev, nil
	}
	if !slices.Contains(gens, gen) {
		return 0, fmt.Errorf("%w: table %q has no generation %d (it has %s)", ErrNotFound, table, gen, formatGens(gens))
	}
	tm, err := meta.Get(ctx, table, gen)
	if err != nil {
		return 0, err
	}
	for _, t := range tm.GetTablets() {
		for _, f := range t.GetFiles() {
			if _, err := store.Get(ctx, IndexKey(f.GetId())); err != nil {
				return 0, fmt.Errorf("table %q generation %d: file %s: %w", table, gen, f.GetId(), err)
			}
		}
	}
	if err := meta.SetCurrent(ctx, table, gen, prev); err != nil {
		return 0, err
	}
	return prev, nil
}

// DropGeneration deletes generation gen of table, which must not be the
// current one (ErrConflict): its metadata, then its files' objects.
func DropGeneration(ctx context.Context, store BlockStore, meta GenerationStore, table string, gen uint64) error {
	cur, gens, err := generationsOf(ctx, meta, table)
	if err != nil {
		return err
	}
	switch {
	case gen == cur:
		return fmt.Errorf("%w: generation %d is table %q's current generation (roll back to another first, or drop the table)", ErrConflict, gen, table)
	case !slices.Contains(gens, gen):
		return fmt.Errorf("%w: table %q has no generation %d (it has %s)", ErrNotFound, table, gen, formatGens(gens))
	}
	return deleteGeneration(ctx, store, meta, table, gen)
}

// DropTable deletes table: its current pointer first (readers stop
// finding it), then every generation's metadata and files. It returns
// the generations it deleted. A failure part way leaves the remaining
// generations stored without a current one; DropTable again removes
// them.
func DropTable(ctx context.Context, store BlockStore, meta GenerationStore, table string) ([]uint64, error) {
	cur, gens, err := generationsOf(ctx, meta, table)
	if err != nil {
		return nil, err
	}
	if err := meta.DeleteTable(ctx, table, cur); err != nil {
		return nil, err
	}
	for i, g := range gens {
		if err := deleteGeneration(ctx, store, meta, table, g); err != nil {
			return gens[:i], err
		}
	}
	return gens, nil
}

// generationsOf returns table's current generation and its stored ones;
// a table with neither is ErrNotFound.
func generationsOf(ctx context.Context, meta GenerationStore, table string) (cur uint64, gens []uint64, err error) {
	if cur, err = meta.Current(ctx, table); err != nil {
		return 0, nil, err
	}
	if gens, err = meta.Generations(ctx, table); err != nil {
		return 0, nil, err
	}
	if cur == 0 && len(gens) == 0 {
		return 0, nil, fmt.Errorf("%w: no table %q", ErrNotFound, table)
	}
	return cur, gens, nil
}

// formatGens is "1, 2 and 3" ("none" for none).
func formatGens(gens []uint64) string {
	s := make([]string, len(gens))
	for i, g := range gens {
		s[i] = strconv.FormatUint(g, 10)
	}
	switch len(s) {
	case 0:
		return "none"
	case 1:
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// deleteGenerations deletes generation from and every older one still
// present (walking down until one is missing): metadata first, then the
// files' objects. Any Get error ends the walk (a backend's not-found error
// is not recognisable here); a delete error is returned wrapping
// ErrCleanup.
func deleteGenerations(ctx context.Context, store BlockStore, meta MetaStore, table string, from uint64) error {
	var first error
	for g := from; g >= 1; g-- {
		old, err := meta.Get(ctx, table, g)
		if err != nil {
			break
		}
		if err := meta.DeleteGeneration(ctx, table, g); err != nil {
			first = fmt.Errorf("%w: table %s generation %d: %w", ErrCleanup, table, g, err)
			break
		}
		for _, t := range old.GetTablets() {
			for _, f := range t.GetFiles() {
				if err := DeleteFile(ctx, store, f); err != nil && first == nil {
					first = fmt.Errorf("%w: table %s generation %d file %s: %w", ErrCleanup, table, g, f.GetId(), err)
				}
			}
		}
	}
	return first
}
