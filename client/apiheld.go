package client

import (
	"cmp"
	"crypto/sha256"
	"slices"
	"sync"
)

// apiHeldBytes bounds the manifests an API client keeps (apiHeld).
const apiHeldBytes = 64 << 20

// apiMaxHeld is the most manifests a request lists as held
// (ScanRequest.held_manifests; the coordinator refuses more).
const apiMaxHeld = 4096

// apiHeld keeps the manifests an API client received
// (ScanResponse.manifests, each checked against the SHA-256 its record
// names), by table and SHA-256, up to apiHeldBytes, dropping the least
// recently used. A scan request lists those of its table in
// ScanRequest.held_manifests, and the coordinator neither fetches nor
// sends them again; the request keeps its own references to them
// (snapshot), so a manifest dropped meanwhile stays usable by it. Safe
// for concurrent use.
type apiHeld struct {
	mu   sync.Mutex
	size int
	tick uint64
	m    map[apiHeldKey]*apiHeldManifest
}

type apiHeldKey struct {
	table  string
	digest [sha256.Size]byte
}

type apiHeldManifest struct {
	data []byte
	used uint64
}

// put keeps manifest data of table, whose SHA-256 is digest.
func (h *apiHeld) put(table string, digest [sha256.Size]byte, data []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := apiHeldKey{table, digest}
	h.tick++
	if e := h.m[k]; e != nil {
		e.used = h.tick
		return
	}
	if len(data) > apiHeldBytes {
		return
	}
	for h.size+len(data) > apiHeldBytes {
		var oldest apiHeldKey
		least := ^uint64(0)
		for k, e := range h.m {
			if e.used < least {
				oldest, least = k, e.used
			}
		}
		h.size -= len(h.m[oldest].data)
		delete(h.m, oldest)
	}
	if h.m == nil {
		h.m = map[apiHeldKey]*apiHeldManifest{}
	}
	h.m[k] = &apiHeldManifest{data: data, used: h.tick}
	h.size += len(data)
}

// snapshot returns the manifests kept of table, by SHA-256, at most
// apiMaxHeld of them (the most recently used).
func (h *apiHeld) snapshot(table string) map[[sha256.Size]byte][]byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	type kept struct {
		digest [sha256.Size]byte
		m      *apiHeldManifest
	}
	var all []kept
	for k, e := range h.m {
		if k.table == table {
			all = append(all, kept{k.digest, e})
		}
	}
	if len(all) > apiMaxHeld {
		slices.SortFunc(all, func(a, b kept) int { return cmp.Compare(b.m.used, a.m.used) })
		all = all[:apiMaxHeld]
	}
	out := make(map[[sha256.Size]byte][]byte, len(all))
	for _, e := range all {
		out[e.digest] = e.m.data
	}
	return out
}
