package tablets

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/scanplane/scanplane/messages"
)

// BlockStore holds the objects of tablet files (blocks and indexes) under
// string keys. Implementations must be safe for concurrent use. Objects are
// immutable: a key is written once (Put of an existing key replaces it, but
// ingest never does that with different content).
type BlockStore interface {
	// Put stores data under key. The store may keep data; the caller must
	// not modify it afterwards.
	Put(ctx context.Context, key string, data []byte) error
	// Get returns the object. A missing key is an error wrapping
	// ErrNotFound (backends of other packages use their own not-found
	// error). The caller must not modify the returned slice if the backend
	// documents that it is shared; DirStore returns a fresh slice.
	Get(ctx context.Context, key string) ([]byte, error)
	// Delete removes the object; a missing key is not an error.
	Delete(ctx context.Context, key string) error
}

// AsyncPutter is a BlockStore that sends a Put without waiting for its
// answer (bus.BlockStore over JetStream): ingest keeps many Puts in
// flight from one goroutine. wait returns once the Put is settled: nil
// when the object is stored, otherwise the store's error (refused, or
// no answer within the store's own time bound). wait does not return
// early when ctx ends, so a Put waited for is no longer in flight. A
// Put that cannot be sent at all is err, with a nil wait. data must not
// be modified until wait returned.
type AsyncPutter interface {
	PutAsync(ctx context.Context, key string, data []byte) (wait func() error, err error)
}

// MaxObjectKeyLen is the longest object key ValidateObjectKey accepts.
const MaxObjectKeyLen = 200

// ValidateObjectKey checks a BlockStore object key (and so a file id): 1 to
// MaxObjectKeyLen bytes of [-_.=A-Za-z0-9], not starting or ending with '.'
// and without "..". Such a key is a safe file name (no path traversal, no
// hidden files) and a valid NATS KV / object-store key. Errors wrap
// ErrBadName.
func ValidateObjectKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty object key", ErrBadName)
	}
	if len(key) > MaxObjectKeyLen {
		return fmt.Errorf("%w: object key %.40q... is %d bytes, at most %d allowed", ErrBadName, key, len(key), MaxObjectKeyLen)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !isAlnum(c) && c != '-' && c != '_' && c != '.' && c != '=' {
			return fmt.Errorf("%w: object key %q: character %q at offset %d not allowed (only A-Z a-z 0-9 - _ . =)", ErrBadName, key, c, i)
		}
	}
	if key[0] == '.' || key[len(key)-1] == '.' || strings.Contains(key, "..") {
		return fmt.Errorf("%w: object key %q: must not start or end with '.' or contain \"..\"", ErrBadName, key)
	}
	return nil
}

// DirStore is the local-directory BlockStore: one file per key directly
// under Dir. Put writes a temporary file (its name starts with '.', so it
// is never a valid key) and renames it into place, so a reader sees the
// whole object or none. DirStore is safe for concurrent use, also by
// several processes sharing the directory.
type DirStore struct {
	// Dir is the directory holding the objects.
	Dir string
	// Sync makes Put fsync the file and the directory before returning
	// (durable across power loss). Default false: atomic, not durable.
	// Set it before first use.
	Sync bool
}

var _ BlockStore = (*DirStore)(nil)

// NewDirStore returns a DirStore over dir, creating the directory (and its
// parents) if needed.
func NewDirStore(dir string) (*DirStore, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: empty directory name", ErrBadInput)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tablets: block store directory: %w", err)
	}
	return &DirStore{Dir: dir}, nil
}

// Put implements BlockStore.
func (s *DirStore) Put(ctx context.Context, key string, data []byte) error {
	if err := ValidateObjectKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tablets: put %s: %w", key, err)
	}
	if err := writeFileAtomic(s.Dir, key, data, s.Sync); err != nil {
		return fmt.Errorf("tablets: put %s: %w", key, err)
	}
	return nil
}

// Get implements BlockStore. It returns a fresh slice the caller owns.
func (s *DirStore) Get(ctx context.Context, key string) ([]byte, error) {
	if err := ValidateObjectKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("tablets: get %s: %w", key, err)
	}
	data, err := os.ReadFile(filepath.Join(s.Dir, key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: object %s", ErrNotFound, key)
	}
	if err != nil {
		return nil, fmt.Errorf("tablets: get %s: %w", key, err)
	}
	return data, nil
}

// Delete implements BlockStore.
func (s *DirStore) Delete(ctx context.Context, key string) error {
	if err := ValidateObjectKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tablets: delete %s: %w", key, err)
	}
	if err := os.Remove(filepath.Join(s.Dir, key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("tablets: delete %s: %w", key, err)
	}
	return nil
}

// List returns the sorted keys that start with prefix ("" = all).
func (s *DirStore) List(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("tablets: list: %w", err)
	}
	des, err := os.ReadDir(s.Dir)
	if err != nil {
		return nil, fmt.Errorf("tablets: list: %w", err)
	}
	var out []string
	for _, de := range des {
		name := de.Name()
		if de.Type().IsRegular() && strings.HasPrefix(name, prefix) && ValidateObjectKey(name) == nil {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// writeFileAtomic writes dir/name via a temporary file and a rename.
func writeFileAtomic(dir, name string, data []byte, sync bool) (err error) {
	f, err := os.CreateTemp(dir, ".tmp-"+name+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if sync {
		if err = f.Sync(); err != nil {
			_ = f.Close()
			return err
		}
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	if sync {
		return syncDir(dir)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// StoreFile writes f to s: every block first, the index last, so that an
// index that exists always names blocks that exist.
func StoreFile(ctx context.Context, s BlockStore, f *EncodedFile) error {
	return storeFile(ctx, s, f, nil)
}

// storeFile is StoreFile calling stored (if not nil) with the entry count
// of each block once it is stored, read from the block's trailer.
func storeFile(ctx context.Context, s BlockStore, f *EncodedFile, stored func(entries int64)) error {
	for i, b := range f.Blocks {
		if err := s.Put(ctx, BlockKey(f.ID, i), b); err != nil {
			return err
		}
		if stored != nil {
			stored(int64(binary.LittleEndian.Uint32(b[len(b)-trailerLen:])))
		}
	}
	return s.Put(ctx, IndexKey(f.ID), f.Index)
}

// DeleteFile removes a file's objects: the index first (so a partly
// deleted file is never taken for a whole one), then every block. It
// keeps going after an error and returns the first one.
func DeleteFile(ctx context.Context, s BlockStore, ref *messages.FileRef) error {
	id := ref.GetId()
	first := s.Delete(ctx, IndexKey(id))
	for i := 0; i < int(ref.GetBlocks()); i++ {
		if err := s.Delete(ctx, BlockKey(id, i)); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// BlockFetcher fetches block-store objects for readers. The host cache (in
// another package) implements it; cached reports a cache hit. The returned
// data may be shared with other readers: never modify it.
type BlockFetcher interface {
	FetchBlock(ctx context.Context, key string) (data []byte, cached bool, err error)
}

// StoreFetcher is an uncached BlockFetcher over a BlockStore: every fetch
// is a store read and cached is always false.
type StoreFetcher struct{ Store BlockStore }

// FetchBlock implements BlockFetcher.
func (f StoreFetcher) FetchBlock(ctx context.Context, key string) ([]byte, bool, error) {
	data, err := f.Store.Get(ctx, key)
	return data, false, err
}
