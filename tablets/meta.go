package tablets

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/scanplane/scanplane/messages"
)

// MetaStore keeps table metadata: for each table, its generations (one
// TableMeta each) and which one is current. Implementations must be safe
// for concurrent use. Backends: DirMetaStore here, a JetStream KV one in
// package bus; each runs the conformance suite of tablets/storetest.
type MetaStore interface {
	// Current returns the table's current generation; 0, nil when the
	// table does not exist.
	Current(ctx context.Context, table string) (uint64, error)
	// Get returns one generation; a missing one is an error wrapping a
	// not-found sentinel of the backend (ErrNotFound for DirMetaStore).
	Get(ctx context.Context, table string, gen uint64) (*messages.TableMeta, error)
	// Publish atomically stores meta as generation meta.Generation of
	// table meta.Name and makes it current, iff the current generation is
	// prev (0 = the table must not exist); otherwise it returns a conflict
	// error (ErrConflict for DirMetaStore) and changes nothing.
	Publish(ctx context.Context, meta *messages.TableMeta, prev uint64) error
	// DeleteGeneration removes one generation (not the current one).
	DeleteGeneration(ctx context.Context, table string, gen uint64) error
	// Tables returns the sorted names of tables with a current generation.
	Tables(ctx context.Context) ([]string, error)
}

// DirMetaStore is the local-directory MetaStore:
//
//	<Dir>/<table>/g<gen>.pb   TableMeta (protobuf) of one generation
//	<Dir>/<table>/g<gen>.m<sha256>.pb   a manifest (ManifestStore)
//	<Dir>/<table>/CURRENT     the current generation, in decimal
//	<Dir>/<table>/LOCK        flock'ed during Publish and DeleteGeneration
//
// Every file is written to a temporary file (name starting with '.') and
// renamed into place. Publish writes the generation first and then
// switches CURRENT by rename, so a reader never sees a pointer to a missing
// generation. The compare-and-swap holds an exclusive flock on LOCK (and a
// mutex in the process), so it is safe across goroutines and, on Unix,
// across processes sharing the directory; a crashed process releases its
// lock. Semantics follow bus.MetaStore: repeating a Publish that succeeded
// succeeds; publishing different bytes as an existing generation, a stale
// prev, or deleting the current generation is ErrConflict.
type DirMetaStore struct {
	// Dir is the root directory.
	Dir string
	// Sync fsyncs files and directories on Publish (durable). Default
	// false. Set it before first use.
	Sync bool

	mu sync.Mutex
}

var _ ManifestStore = (*DirMetaStore)(nil)

const currentFile = "CURRENT"

// NewDirMetaStore returns a DirMetaStore over dir, creating it if needed.
func NewDirMetaStore(dir string) (*DirMetaStore, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: empty directory name", ErrBadInput)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tablets: metadata directory: %w", err)
	}
	return &DirMetaStore{Dir: dir}, nil
}

func genFile(gen uint64) string { return "g" + strconv.FormatUint(gen, 10) + ".pb" }

// Current implements MetaStore.
func (s *DirMetaStore) Current(ctx context.Context, table string) (uint64, error) {
	if err := ValidateTableName(table); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("tablets: current generation of %s: %w", table, err)
	}
	return s.current(table)
}

func (s *DirMetaStore) current(table string) (uint64, error) {
	data, err := os.ReadFile(filepath.Join(s.Dir, table, currentFile))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("tablets: current generation of %s: %w", table, err)
	}
	gen, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil || gen == 0 {
		return 0, fmt.Errorf("%w: table %s: bad %s %q", ErrCorrupt, table, currentFile, data)
	}
	return gen, nil
}

// Get implements MetaStore. A missing generation wraps ErrNotFound. The
// files of tablets kept in manifests are filled in (LoadManifests).
func (s *DirMetaStore) Get(ctx context.Context, table string, gen uint64) (*messages.TableMeta, error) {
	meta, err := s.record(ctx, table, gen)
	if err != nil {
		return nil, err
	}
	err = LoadManifests(ctx, meta, func(ctx context.Context, id ManifestID) ([]byte, error) {
		return s.GetManifest(ctx, table, id.Gen, id.Digest)
	})
	if err != nil {
		return nil, err
	}
	return meta, nil
}

// Record implements ManifestStore: the record as stored, without the
// files of tablets kept in manifests.
func (s *DirMetaStore) Record(ctx context.Context, table string, gen uint64) (*messages.TableMeta, error) {
	meta, err := s.record(ctx, table, gen)
	if err != nil {
		return nil, err
	}
	if err := CheckFormat(meta); err != nil {
		return nil, err
	}
	return meta, nil
}

// record reads one generation's record as stored.
func (s *DirMetaStore) record(ctx context.Context, table string, gen uint64) (*messages.TableMeta, error) {
	if err := ValidateTableName(table); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("tablets: table %s generation %d: %w", table, gen, err)
	}
	data, err := os.ReadFile(filepath.Join(s.Dir, table, genFile(gen)))
	if errors.Is(err, fs.ErrNotExist) || gen == 0 {
		return nil, fmt.Errorf("%w: table %s generation %d", ErrNotFound, table, gen)
	}
	if err != nil {
		return nil, fmt.Errorf("tablets: table %s generation %d: %w", table, gen, err)
	}
	meta := new(messages.TableMeta)
	if err := proto.Unmarshal(data, meta); err != nil {
		return nil, fmt.Errorf("%w: table %s generation %d: %v", ErrCorrupt, table, gen, err)
	}
	if meta.GetName() != table || meta.GetGeneration() != gen {
		return nil, fmt.Errorf("%w: file of table %s generation %d holds %s generation %d",
			ErrCorrupt, table, gen, meta.GetName(), meta.GetGeneration())
	}
	return meta, nil
}

// lock takes the in-process mutex and the table's file lock.
func (s *DirMetaStore) lock(table string) (func(), error) {
	dir := filepath.Join(s.Dir, table)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tablets: table %s: %w", table, err)
	}
	s.mu.Lock()
	unlock, err := lockFile(filepath.Join(dir, "LOCK"))
	if err != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("tablets: lock table %s: %w", table, err)
	}
	return func() { unlock(); s.mu.Unlock() }, nil
}

// Publish implements MetaStore (see the type comment for the semantics).
// meta.Name must be a valid table name and meta.Generation > prev.
func (s *DirMetaStore) Publish(ctx context.Context, meta *messages.TableMeta, prev uint64) error {
	name, gen := meta.GetName(), meta.GetGeneration()
	if err := ValidateTableName(name); err != nil {
		return err
	}
	if gen == 0 || gen <= prev {
		return fmt.Errorf("%w: publish table %s: generation %d must be > previous %d", ErrBadInput, name, gen, prev)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tablets: publish table %s: %w", name, err)
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(meta)
	if err != nil {
		return fmt.Errorf("tablets: encode table %s generation %d: %w", name, gen, err)
	}
	unlock, err := s.lock(name)
	if err != nil {
		return err
	}
	defer unlock()
	dir := filepath.Join(s.Dir, name)
	cur, err := s.current(name)
	if err != nil {
		return err
	}
	if cur == gen {
		// A repeated Publish of ours succeeds; anything else conflicts.
		old, err := os.ReadFile(filepath.Join(dir, genFile(gen)))
		if err == nil && bytes.Equal(old, data) {
			return nil
		}
		return fmt.Errorf("%w: table %s generation %d is already published", ErrConflict, name, gen)
	}
	if cur != prev {
		return fmt.Errorf("%w: table %s is at generation %d, not %d", ErrConflict, name, cur, prev)
	}
	// A generation file above the current one is a leftover of a publisher
	// that died before switching CURRENT (we hold the lock): replace it.
	if err := writeFileAtomic(dir, genFile(gen), data, s.Sync); err != nil {
		return fmt.Errorf("tablets: publish table %s generation %d: %w", name, gen, err)
	}
	if err := writeFileAtomic(dir, currentFile, []byte(strconv.FormatUint(gen, 10)+"\n"), s.Sync); err != nil {
		_ = os.Remove(filepath.Join(dir, genFile(gen)))
		return fmt.Errorf("tablets: publish table %s generation %d: %w", name, gen, err)
	}
	return nil
}

// DeleteGeneration implements MetaStore. Deleting the current generation
// is refused with ErrConflict; deleting a missing one is not an error.
func (s *DirMetaStore) DeleteGeneration(ctx context.Context, table string, gen uint64) error {
	if err := ValidateTableName(table); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tablets: delete table %s generation %d: %w", table, gen, err)
	}
	if gen == 0 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(s.Dir, table)); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	unlock, err := s.lock(table)
	if err != nil {
		return err
	}
	defer unlock()
	cur, err := s.current(table)
	if err != nil {
		return err
	}
	if cur == gen {
		return fmt.Errorf("%w: generation %d of table %s is current", ErrConflict, gen, table)
	}
	old, err := s.record(ctx, table, gen)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil
	case errors.Is(err, ErrCorrupt):
		// Unreadable: remove it; SweepOrphans removes its manifests.
		old = nil
	case err != nil:
		return err
	}
	if err := os.Remove(filepath.Join(s.Dir, table, genFile(gen))); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("tablets: delete table %s generation %d: %w", table, gen, err)
	}
	for _, id := range RecordManifests(old) {
		if err := s.DeleteManifest(ctx, table, id.Gen, id.Digest); err != nil {
			return err
		}
	}
	return nil
}

func manifestFile(id ManifestID) string { return ManifestName(id) + ".pb" }

// PutManifest implements ManifestStore.
func (s *DirMetaStore) PutManifest(ctx context.Context, table string, gen uint64, digest [sha256.Size]byte, data []byte) error {
	if err := ValidateTableName(table); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tablets: put manifest of %s: %w", table, err)
	}
	dir := filepath.Join(s.Dir, table)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("tablets: table %s: %w", table, err)
	}
	if err := writeFileAtomic(dir, manifestFile(ManifestID{Gen: gen, Digest: digest}), data, s.Sync); err != nil {
		return fmt.Errorf("tablets: put manifest of %s: %w", table, err)
	}
	return nil
}

// GetManifest implements ManifestStore; a missing manifest wraps
// ErrNotFound.
func (s *DirMetaStore) GetManifest(ctx context.Context, table string, gen uint64, digest [sha256.Size]byte) ([]byte, error) {
	if err := ValidateTableName(table); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("tablets: get manifest of %s: %w", table, err)
	}
	name := manifestFile(ManifestID{Gen: gen, Digest: digest})
	data, err := os.ReadFile(filepath.Join(s.Dir, table, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: manifest %s of table %s", ErrNotFound, name, table)
	}
	if err != nil {
		return nil, fmt.Errorf("tablets: get manifest of %s: %w", table, err)
	}
	return data, nil
}

// DeleteManifest implements ManifestStore.
func (s *DirMetaStore) DeleteManifest(ctx context.Context, table string, gen uint64, digest [sha256.Size]byte) error {
	if err := ValidateTableName(table); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tablets: delete manifest of %s: %w", table, err)
	}
	name := manifestFile(ManifestID{Gen: gen, Digest: digest})
	if err := os.Remove(filepath.Join(s.Dir, table, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("tablets: delete manifest %s of %s: %w", name, table, err)
	}
	return nil
}

// Manifests implements ManifestStore.
func (s *DirMetaStore) Manifests(ctx context.Context, table string) ([]ManifestID, error) {
	if err := ValidateTableName(table); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("tablets: list manifests of %s: %w", table, err)
	}
	des, err := os.ReadDir(filepath.Join(s.Dir, table))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tablets: list manifests of %s: %w", table, err)
	}
	var out []ManifestID
	for _, de := range des {
		name, ok := strings.CutSuffix(de.Name(), ".pb")
		if !ok {
			continue
		}
		if id, ok := ParseManifestName(name); ok {
			out = append(out, id)
		}
	}
	return out, nil
}

// Tables implements MetaStore.
func (s *DirMetaStore) Tables(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("tablets: list tables: %w", err)
	}
	des, err := os.ReadDir(s.Dir)
	if err != nil {
		return nil, fmt.Errorf("tablets: list tables: %w", err)
	}
	var out []string
	for _, de := range des {
		if !de.IsDir() || ValidateTableName(de.Name()) != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(s.Dir, de.Name(), currentFile)); err == nil {
			out = append(out, de.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}
