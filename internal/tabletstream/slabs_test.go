package tabletstream

import (
	"bytes"
	"fmt"
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

// BenchmarkStreamSlabs: a stream of 50 packed batches of 2 000 rows
// (100 000 rows of about 100 bytes), unverified, through OnMessage, each
// yield's rows read and dropped: "new" decodes every batch into a new
// slab, "recycled" into the slab of the batch before it
// (StreamConfig.Slabs, as client.Rows does). Reported per row: ns and
// bytes allocated.
func BenchmarkStreamSlabs(b *testing.B) {
	const batches, per = 50, 2000
	a := newAttempt("r1", 1, "s1")
	var msgs []*messages.RowBatch
	for i := range batches {
		rows := make([]*messages.Row, per)
		for j := range rows {
			k := i*per + j
			rows[j] = &messages.Row{Key: fmt.Appendf(nil, "key%09d", k), Value: bytes.Repeat([]byte{byte(k)}, 90)}
		}
		m := a.batch(rows)
		pack(m)
		msgs = append(msgs, m)
	}
	msgs[batches-1].Finished = a.finished()
	for _, recycled := range []bool{false, true} {
		name := "new"
		if recycled {
			name = "recycled"
		}
		b.Run(name, func(b *testing.B) {
			var free []tablets.Entry
			cfg := streamConfig()
			cfg.RequestID = func() string { return "r1" }
			if recycled {
				cfg.Slabs = func(n int) []tablets.Entry {
					if cap(free) >= n {
						s := free[:0]
						free = nil
						return s
					}
					return make([]tablets.Entry, 0, n)
				}
			}
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				s := NewTabletStream(cfg, testRef, tablets.Range{})
				s.Start(t0)
				for _, m := range msgs {
					for _, act := range s.OnMessage(t0, m) {
						if act.Kind == ActYield {
							for _, e := range act.Rows {
								n += len(e.Key)
							}
							free = act.Rows
						}
					}
				}
				if !s.Done() || s.Stats().Rows != batches*per {
					b.Fatalf("stream not done: %+v", s.Stats())
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batches*per), "ns/row")
			_ = n
		})
	}
}
