package sim

import (
	"testing"

	"github.com/scanplane/scanplane/tablets"
	"github.com/scanplane/scanplane/tablets/storetest"
)

// The harness's metadata store keeps the tablets.MetaStore contract,
// as the real backends do; stores opened from one Fresh share one
// memStore.
func TestMetaStoreConformance(t *testing.T) {
	storetest.TestMetaStore(t, storetest.Backend{
		Fresh: func(*testing.T) func() tablets.MetaStore {
			m := newMemStore()
			return func() tablets.MetaStore { return metaSource{m} }
		},
		NotFound: tablets.ErrNotFound,
		Conflict: tablets.ErrConflict,
		BadInput: tablets.ErrBadInput,
	})
}
