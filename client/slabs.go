package client

import (
	"sync"

	"github.com/scanplane/scanplane/tablets"
)

// slabPool recycles the Entry slabs that one scan's batches decode into
// (tabletstream.StreamConfig.Slabs): Rows.Next hands a batch's slab back
// once the caller has moved past its rows, and the next batch of any of
// the scan's tablets decodes into it, so a scan in its steady state
// allocates no slab per batch. A slab's entries only point into the
// batch's bytes; the Row a caller holds is a copy of an entry, so reusing
// the slab never changes a row handed out. A pooled slab is not cleared:
// its stale entries keep at most maxSlabs batches' bytes from the
// collector until they are overwritten. Safe for concurrent use (the
// goroutines of a parallel scan get, the caller puts).
type slabPool struct {
	mu   sync.Mutex
	free [][]tablets.Entry
	made int // slabs allocated
}

// maxSlabs bounds the slabs a scan keeps for reuse.
const maxSlabs = 4

// get returns an empty slab with room for n rows: a pooled one when one
// is large enough, else a new one.
func (p *slabPool) get(n int) []tablets.Entry {
	p.mu.Lock()
	for i := len(p.free) - 1; i >= 0; i-- {
		if s := p.free[i]; cap(s) >= n {
			last := len(p.free) - 1
			p.free[i] = p.free[last]
			p.free[last] = nil
			p.free = p.free[:last]
			p.mu.Unlock()
			return s[:0]
		}
	}
	p.made++
	p.mu.Unlock()
	return make([]tablets.Entry, 0, n)
}

// put takes back a slab nothing reads any more; a full pool drops its
// smallest slab for a larger one.
func (p *slabPool) put(s []tablets.Entry) {
	if cap(s) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) < maxSlabs {
		p.free = append(p.free, s[:0])
		return
	}
	small := 0
	for i, f := range p.free {
		if cap(f) < cap(p.free[small]) {
			small = i
		}
	}
	if cap(p.free[small]) < cap(s) {
		p.free[small] = s[:0]
	}
}
