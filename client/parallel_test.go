package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/bus"
	"github.com/scanplane/scanplane/internal/clientsys"
	"github.com/scanplane/scanplane/internal/testutil"
	"github.com/scanplane/scanplane/messages"
)

// fakeTable publishes table "t" of the fake coordinator's rows (fakeRows
// keys k0000..) over 4 tablets split at k0025, k0050, k0075, without
// block roots (the fake sends no proofs), starts one serving fake
// coordinator and returns a client of it.
func fakeTable(t *testing.T) *Client {
	t.Helper()
	natsURL := startNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bc := bus.DefaultConfig()
	bc.URL = natsURL
	admin, err := bus.Connect(ctx, bc)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	meta, err := admin.MetaStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tm := &messages.TableMeta{Name: "t", Generation: 1, Rows: 100, Bytes: 1600, CreatedUnixMs: 1_700_000_000_000}
	splits := [][]byte{fakeRowKey(25), fakeRowKey(50), fakeRowKey(75)}
	tm.SplitPoints = splits
	for i := range 4 {
		ref := &messages.TabletRef{Table: "t", Generation: 1, Index: uint32(i)}
		if i > 0 {
			ref.PrevEndRow = splits[i-1]
		}
		if i < 3 {
			ref.EndRow = splits[i]
		}
		tm.Tablets = append(tm.Tablets, &messages.TabletMeta{Ref: ref, Files: []*messages.FileRef{{Id: fmt.Sprintf("f%d", i), Blocks: 1}}})
	}
	if err := meta.Publish(ctx, tm, 0); err != nil {
		t.Fatal(err)
	}
	startFakeCoord(t, "serve", natsURL, "serving", "")
	cfg := DefaultConfig()
	cfg.NATSURL = natsURL
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(clientsys.WithSystem(ctx, sharedSystem(t))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestParallelScanBoundsBuffer: the fake sends every batch of a tablet at
// once, without waiting for acknowledgements. A caller that takes one row
// and stops reading leaves the scan's goroutines waiting for room, with
// the buffered bytes within MaxBufferBytes plus the one batch the tablet
// it reads may always add (and one batch that comes when nothing is
// buffered); reading on yields every row, in order.
func TestParallelScanBoundsBuffer(t *testing.T) {
	c := fakeTable(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const maxBytes = 50 // less than a batch: 10 rows of about 8 bytes
	rows := c.Scan(ctx, "t", Range{}, ScanOptions{AllowUnverified: true, Parallel: 4, MaxBufferBytes: maxBytes})
	defer rows.Close()
	if !rows.Next() {
		t.Fatalf("no first row: %v", rows.Err())
	}
	p := rows.par
	if p == nil {
		t.Fatal("the scan of 4 tablets runs without prefetch")
	}
	// Every goroutine has ended its tablet or waits for room.
	testutil.Eventually(t, 30*time.Second, "every tablet to end or wait for room", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		done := 0
		for _, s := range p.slots {
			if s.done {
				done++
			}
		}
		return p.next == 4 && p.waiting+done == 4
	})
	p.mu.Lock()
	buffered, waiting := p.bytes, p.waiting
	p.mu.Unlock()
	batch := 10 * (len(fakeRowKey(0)) + len("v00"))
	if buffered > maxBytes+2*batch || waiting == 0 {
		t.Fatalf("%d bytes buffered with MaxBufferBytes %d and batches of about %d bytes; %d goroutines wait for room", buffered, maxBytes, batch, waiting)
	}
	readFakeRows(t, rows, 1)
	if st := rows.Stats(); st.Tablets != 4 || st.Rows != fakeRows {
		t.Fatalf("stats %+v, want 4 tablets and %d rows", st, fakeRows)
	}
	t.Logf("%d bytes buffered, %d goroutines waiting, after one row", buffered, waiting)
}

// readFakeRows reads the rest of a scan of the fake's whole table, whose
// rows before the n-th the caller took, and fails unless they are the
// fake's, in order, to the last.
func readFakeRows(t *testing.T, rows *Rows, n int) {
	t.Helper()
	for rows.Next() {
		if r := rows.Row(); !bytes.Equal(r.Key, fakeRowKey(n)) || string(r.Value) != fmt.Sprintf("v%d", n) {
			t.Fatalf("row %d is %s=%s", n, r.Key, r.Value)
		}
		n++
	}
	if rows.Err() != nil || n != fakeRows {
		t.Fatalf("%d rows, err %v", n, rows.Err())
	}
}

// TestParallelScanLimit: limits inside the first tablet, at and around
// tablet boundaries and past the table's end give exactly that many rows,
// in order, though the fake sends every row of a tablet whatever the
// request's limit.
func TestParallelScanLimit(t *testing.T) {
	c := fakeTable(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, limit := range []uint64{1, 24, 25, 26, 60, fakeRows, fakeRows + 5} {
		rows := c.Scan(ctx, "t", Range{}, ScanOptions{AllowUnverified: true, Parallel: 4, Limit: limit})
		var n uint64
		for rows.Next() {
			if !bytes.Equal(rows.Row().Key, fakeRowKey(int(n))) {
				t.Fatalf("limit %d: row %d is %s", limit, n, rows.Row().Key)
			}
			n++
		}
		rows.Close()
		if want := min(limit, fakeRows); rows.Err() != nil || n != want {
			t.Fatalf("limit %d: %d rows, err %v; want %d", limit, n, rows.Err(), want)
		}
	}
}

// TestParallelScanCloseEndsGoroutines: Close of a scan whose goroutines
// wait for room (the caller took one row) returns once every one of
// them has ended.
func TestParallelScanCloseEndsGoroutines(t *testing.T) {
	c := fakeTable(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows := c.Scan(ctx, "t", Range{}, ScanOptions{AllowUnverified: true, Parallel: 4, MaxBufferBytes: 1})
	if !rows.Next() {
		t.Fatalf("no first row: %v", rows.Err())
	}
	p := rows.par
	testutil.Eventually(t, 30*time.Second, "a goroutine to wait for room", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.waiting > 0
	})
	rows.Close()
	p.mu.Lock()
	live, waiting := p.live, p.waiting
	p.mu.Unlock()
	if live != 0 || waiting != 0 {
		t.Fatalf("after Close: %d goroutines live, %d waiting for room", live, waiting)
	}
	if rows.Next() || rows.Err() != nil {
		t.Fatalf("Next after Close: a row or error %v", rows.Err())
	}
}

// TestScanUnverifiedTable: a table ingested without row digests is not
// scanned unless the caller allows it: the error wraps ErrUnverified and
// names the table and its generation.
func TestScanUnverifiedTable(t *testing.T) {
	c := fakeTable(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows := c.Scan(ctx, "t", Range{}, ScanOptions{Parallel: 1})
	defer rows.Close()
	if rows.Next() {
		t.Fatal("a row of a table without digests")
	}
	if err := rows.Err(); !errors.Is(err, ErrUnverified) || !strings.Contains(err.Error(), "table t generation") {
		t.Fatalf("scan of a table without digests: %v, want ErrUnverified naming it", err)
	}
}

// TestTableInfo: Table describes the table's current generation as its
// metadata holds it; an unknown table is ErrNoTable.
func TestTableInfo(t *testing.T) {
	c := fakeTable(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := c.Table(ctx, "t")
	want := TableInfo{Name: "t", Generation: 1, Rows: 100, Bytes: 1600, Tablets: 4, Created: time.UnixMilli(1_700_000_000_000)}
	if err != nil || got != want {
		t.Fatalf("Table: %+v, %v; want %+v", got, err, want)
	}
	if _, err := c.Table(ctx, "nope"); !errors.Is(err, ErrNoTable) {
		t.Fatalf("Table of an unknown table: %v, want ErrNoTable", err)
	}
}
