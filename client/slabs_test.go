package client

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/scanplane/scanplane/tablets"
)

// TestSlabPool: a slab comes back only once it was put, only when large
// enough, and never to two getters.
func TestSlabPool(t *testing.T) {
	var p slabPool
	a := p.get(10)
	if len(a) != 0 || cap(a) < 10 || p.made != 1 {
		t.Fatalf("new slab: len %d cap %d, %d made", len(a), cap(a), p.made)
	}
	b := p.get(10)
	if &a[:1][0] == &b[:1][0] {
		t.Fatal("two slabs out share an array")
	}
	p.put(append(a, tablets.Entry{Key: []byte("k")}))
	if c := p.get(20); &c[:1][0] == &a[:1][0] || p.made != 3 {
		t.Fatalf("a slab of 10 came back for 20 rows (%d made)", p.made)
	}
	c := p.get(5)
	if &c[:1][0] != &a[:1][0] || len(c) != 0 || p.made != 3 {
		t.Fatalf("the slab put back did not come back emptied (len %d, %d made)", len(c), p.made)
	}
	if d := p.get(5); &d[:1][0] == &a[:1][0] {
		t.Fatal("a slab came back twice")
	}
	for range maxSlabs + 2 {
		p.put(make([]tablets.Entry, 0, 8))
	}
	p.put(make([]tablets.Entry, 0, 100))
	if len(p.free) != maxSlabs || cap(p.get(100)) != 100 {
		t.Fatalf("%d slabs kept (max %d), or the largest dropped", len(p.free), maxSlabs)
	}
}

// TestScanRecyclesSlabs: a scan's batches decode into the slabs of the
// batches its caller is done with, serial or parallel; every row the
// caller took, all kept to the end, is still its row.
func TestScanRecyclesSlabs(t *testing.T) {
	c := fakeTable(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, par := range []int{1, 4} {
		// A small buffer: the tablets ahead wait for the caller's slabs.
		rows := c.Scan(ctx, "t", Range{}, ScanOptions{AllowUnverified: true, Parallel: par, MaxBufferBytes: 50})
		var kept []Row
		for rows.Next() {
			kept = append(kept, rows.Row())
		}
		rows.Close()
		if rows.Err() != nil || len(kept) != fakeRows {
			t.Fatalf("parallel %d: %d rows, err %v", par, len(kept), rows.Err())
		}
		for i, r := range kept {
			if !bytes.Equal(r.Key, fakeRowKey(i)) || string(r.Value) != fmt.Sprintf("v%d", i) {
				t.Fatalf("parallel %d: row %d is %s=%s after the scan", par, i, r.Key, r.Value)
			}
		}
		st := rows.Stats()
		rows.slabs.mu.Lock()
		made := rows.slabs.made
		rows.slabs.mu.Unlock()
		if made > 2*par+2 || made >= st.Batches {
			t.Fatalf("parallel %d: %d slabs made for %d batches", par, made, st.Batches)
		}
		t.Logf("parallel %d: %d slabs for %d batches", par, made, st.Batches)
	}
}

// TestRowsNextAfterClose: Next, whose common case skips the checks of a
// scan's state, returns no row after Close, even inside a batch.
func TestRowsNextAfterClose(t *testing.T) {
	c := fakeTable(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, par := range []int{1, 4} {
		rows := c.Scan(ctx, "t", Range{}, ScanOptions{AllowUnverified: true, Parallel: par})
		for i := range 3 {
			if !rows.Next() || !bytes.Equal(rows.Row().Key, fakeRowKey(i)) {
				t.Fatalf("parallel %d: row %d: %s, err %v", par, i, rows.Row().Key, rows.Err())
			}
		}
		if rows.bi >= len(rows.batch) {
			t.Fatalf("parallel %d: the test needs a batch of more than 3 rows", par)
		}
		rows.Close()
		if rows.Next() {
			t.Fatalf("parallel %d: a row after Close: %s", par, rows.Row().Key)
		}
	}
}
