package tabletstream

import (
	"testing"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
)

// TestStreamSlabs: with StreamConfig.Slabs, batches decode into the slabs
// it gives, and a caller that recycles each yield's Rows at once (here:
// overwrites them, then hands them back) still gets every row of the
// ingest, in order: no yield's Rows share an array with rows the stream
// still holds (a verified stream holds back the rows of a block no proof
// covers yet, across batches).
func TestStreamSlabs(t *testing.T) {
	files, f, truth := verifyTablet(t, 300, 120, 600)
	roots, err := Roots(&messages.TabletMeta{Files: files})
	if err != nil {
		t.Fatal(err)
	}
	var pool [][]tablets.Entry
	gets, reused := 0, 0
	cfg := streamConfig()
	cfg.Verify, cfg.Roots = true, roots
	cfg.Slabs = func(n int) []tablets.Entry {
		gets++
		if k := len(pool); k > 0 && cap(pool[k-1]) >= n {
			s := pool[k-1]
			pool = pool[:k-1]
			reused++
			return s[:0]
		}
		return make([]tablets.Entry, 0, n)
	}
	r := newRun(t, cfg)
	r.do(r.s.Start(t0))
	a := newAttempt("r1", 1, "s1")
	served := serve(t, files, f, tablets.Range{}, nil, 0, 7) // batches cut blocks anywhere
	recycle := func(acts []StreamAction) {
		for _, act := range acts {
			if act.Kind == ActYield {
				for i := range act.Rows {
					act.Rows[i] = tablets.Entry{Key: []byte("recycled"), Value: []byte("recycled")}
				}
				pool = append(pool, act.Rows[:0])
			}
		}
	}
	var fin []*messages.BlockProof
	for i, s := range served {
		if len(s.rows) == 0 {
			fin = s.proofs
			continue
		}
		rows := make([]*messages.Row, len(s.rows))
		for j, e := range s.rows {
			rows[j] = &messages.Row{Key: e.Key, Value: e.Value}
		}
		b := a.batch(rows)
		pack(b)
		b.Proofs = s.proofs
		recycle(r.do(r.s.OnMessage(t0, b)))
		if r.err != nil || r.s.Stats().Rejected > 0 {
			t.Fatalf("batch %d: %v (stats %+v)", i+1, r.err, r.s.Stats())
		}
	}
	fm := a.finished()
	fm.Proofs = fin
	recycle(r.do(r.s.OnMessage(t0, fm)))
	if !r.done || r.err != nil {
		t.Fatalf("not finished: %v; last actions %v", r.err, r.last)
	}
	if !equalEntries(r.yielded, truth) {
		t.Fatalf("%d rows yielded, not the %d of the ingest in order", len(r.yielded), len(truth))
	}
	if gets < len(served)-1 || reused == 0 {
		t.Fatalf("Slabs asked %d times (%d reused) for %d batches", gets, reused, len(served))
	}
}
