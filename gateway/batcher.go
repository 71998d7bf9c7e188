package gateway

import (
	"context"
	"sync"

	scanplanev1 "github.com/scanplane/scanplane/api/scanplane/v1"
	"github.com/scanplane/scanplane/tablets"
)

// slabRows: rows are allocated this many at a time.
const slabRows = 256

// batcher hands rows from a scan's goroutine to the goroutine that sends
// them: the sender takes whatever is pending when a batch is full, when
// the scan ended, or when its flush timer fires; the scan waits while a
// full batch is pending, so at most two batches (one pending, one being
// sent) are held per scan.
type batcher struct {
	max   int
	pack  bool          // rows go in ScanResponse.packed_rows
	ready chan struct{} // a full batch or the end is pending
	space chan struct{} // the sender took the pending rows

	mu     sync.Mutex
	rows   []*scanplanev1.Row
	packed []byte // the rows pending, packed (pack)
	proofs []*scanplanev1.RowProof
	table  *scanplanev1.ScanResponse // generation and table_record, until taken
	mans   [][]byte                  // manifests to send before the rows and proofs pending
	bytes  int
	slab   []scanplanev1.Row
	fin    bool
	err    error
}

// newBatcher returns a batcher of messages of about maxBytes of rows,
// packed (ScanResponse.packed_rows) or not (rows).
func newBatcher(maxBytes int, packed bool) *batcher {
	return &batcher{max: maxBytes, pack: packed, ready: make(chan struct{}, 1), space: make(chan struct{}, 1)}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// add appends a row (its slices are kept, not copied, or packed into
// the batch's buffer); once the pending rows reach max bytes it waits
// until the sender took them. It returns false when ctx ended first.
func (b *batcher) add(ctx context.Context, key, value []byte) bool {
	b.mu.Lock()
	if b.pack {
		if b.packed == nil {
			b.packed = make([]byte, 0, b.max+b.max/8)
		}
		b.packed = tablets.AppendPackedRow(b.packed, key, value)
		b.bytes += tablets.PackedRowSize(len(key), len(value))
	} else {
		if len(b.slab) == 0 {
			b.slab = make([]scanplanev1.Row, slabRows)
		}
		r := &b.slab[0]
		b.slab = b.slab[1:]
		r.Key, r.Value = key, value
		b.rows = append(b.rows, r)
		b.bytes += len(key) + len(value)
	}
	full := b.bytes >= b.max
	b.mu.Unlock()
	if !full {
		return true
	}
	signal(b.ready)
	for {
		b.mu.Lock()
		full = b.bytes >= b.max
		b.mu.Unlock()
		if !full {
			return true
		}
		select {
		case <-b.space:
		case <-ctx.Done():
			return false
		}
	}
}

// proof appends the proofs of rows already added (ScanRequest.proofs);
// they count towards the batch's bytes but never wait.
func (b *batcher) proof(ps []*scanplanev1.RowProof) {
	if len(ps) == 0 {
		return
	}
	n := 0
	for _, p := range ps {
		for _, bp := range p.GetBlocks() {
			n += len(bp.GetHead()) + len(bp.GetTail()) + 32*len(bp.GetSiblings())
		}
	}
	b.mu.Lock()
	b.proofs = append(b.proofs, ps...)
	b.bytes += n
	b.mu.Unlock()
}

// manifests queues manifests, which are sent in messages of their own
// (at most MaxMessageBytes each, or one manifest) before the rows and
// proofs pending; like add it waits while the pending bytes reach max,
// and returns false when ctx ended first.
func (b *batcher) manifests(ctx context.Context, ms [][]byte) bool {
	for _, m := range ms {
		b.mu.Lock()
		b.mans = append(b.mans, m)
		b.bytes += len(m)
		b.mu.Unlock()
		signal(b.ready)
		for {
			b.mu.Lock()
			full := b.bytes >= b.max
			b.mu.Unlock()
			if !full {
				break
			}
			select {
			case <-b.space:
			case <-ctx.Done():
				return false
			}
		}
	}
	return true
}

// setTable records the generation scanned and its record, which the
// next message carries.
func (b *batcher) setTable(gen uint64, record []byte) {
	b.mu.Lock()
	b.table = &scanplanev1.ScanResponse{Generation: gen, TableRecord: record}
	b.bytes += len(record)
	b.mu.Unlock()
}

// finish records the end of the scan (err nil: every row was added).
func (b *batcher) finish(err error) {
	b.mu.Lock()
	b.fin, b.err = true, err
	b.mu.Unlock()
	signal(b.ready)
}

// take returns the pending rows and proofs as a message (nil if there
// is nothing to send) and, once finish was called, fin true and the
// scan's error: the message returned with fin is the last one.
func (b *batcher) take() (msg *scanplanev1.ScanResponse, fin bool, err error) {
	b.mu.Lock()
	if len(b.mans) > 0 {
		msg = b.table
		if msg == nil {
			msg = &scanplanev1.ScanResponse{}
		}
		size, n := len(msg.GetTableRecord()), 0
		for n < len(b.mans) && (n == 0 || size+len(b.mans[n]) <= MaxMessageBytes) {
			size += len(b.mans[n])
			n++
		}
		msg.Manifests = b.mans[:n:n]
		b.mans, b.table = b.mans[n:], nil
		b.bytes -= size
		b.mu.Unlock()
		signal(b.space)
		signal(b.ready) // what is still pending goes next
		return msg, false, nil
	}
	if len(b.rows) > 0 || len(b.packed) > 0 || len(b.proofs) > 0 || b.table != nil {
		msg = b.table
		if msg == nil {
			msg = &scanplanev1.ScanResponse{}
		}
		msg.Rows, msg.PackedRows, msg.Proofs = b.rows, b.packed, b.proofs
	}
	b.rows, b.packed, b.proofs, b.table, b.bytes = nil, nil, nil, nil, 0
	fin, err = b.fin, b.err
	b.mu.Unlock()
	signal(b.space)
	return msg, fin, err
}
