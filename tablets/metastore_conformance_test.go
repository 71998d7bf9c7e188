package tablets_test

import (
	"testing"

	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/tablets/storetest"
)

// DirMetaStore passes the MetaStore conformance suite; every store that
// open returns is its own DirMetaStore over one directory, so concurrent
// publishers are decided by the file lock, not the in-process mutex.
func TestDirMetaStoreConformance(t *testing.T) {
	storetest.TestMetaStore(t, storetest.Backend{
		Fresh: func(t *testing.T) func() tablets.MetaStore {
			dir := t.TempDir()
			return func() tablets.MetaStore {
				ms, err := tablets.NewDirMetaStore(dir)
				if err != nil {
					t.Fatal(err)
				}
				return ms
			}
		},
		NotFound: tablets.ErrNotFound,
		Conflict: tablets.ErrConflict,
		BadInput: tablets.ErrBadInput,
		BadName:  tablets.ErrBadName,
	})
}
