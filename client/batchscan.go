package client

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/scanplane/scanplane/tablets"
)

// BatchScan scans the union of ranges of table for a caller that does not
// need the rows in key order, as Accumulo's BatchScanner: ranges that
// overlap or touch are merged first, so every row of the union comes
// exactly once. The merged ranges are split over the tablets into pieces
// and ScanOptions.Parallel pieces are read at once; the rows of each
// piece come in key order, the pieces interleaved, batch by batch. The
// first error ends the scan as soon as the caller asks for the next
// batch (rows already returned are rows of the union, each once). With
// Parallel 1 the pieces are read one after another, in key order.
// Limit, MaxBufferBytes and the other options are as for Scan. It does
// no IO until Next.
func (c *Client) BatchScan(ctx context.Context, table string, ranges []Range, opts ScanOptions) *Rows {
	r := &Rows{c: c, ctx: ctx, table: table, opts: opts, unordered: true}
	if err := tablets.ValidateTableName(table); err != nil {
		r.err = err
		return r
	}
	for i, rng := range ranges {
		if err := rng.Validate(); err != nil {
			r.err = fmt.Errorf("client: BatchScan range %d: %w", i, err)
			return r
		}
	}
	if err := opts.Validate(); err != nil {
		r.err = err
		return r
	}
	r.ranges = MergeRanges(ranges)
	if n := len(r.ranges); n > 0 {
		r.rng = Range{Start: r.ranges[0].Start, End: r.ranges[n-1].End}
	} else {
		r.done = true
	}
	return r
}

// MergeRanges returns the union of ranges as sorted, disjoint ranges that
// do not touch (empty ranges dropped): the ranges BatchScan reads.
func MergeRanges(ranges []Range) []Range {
	var rs []Range
	for _, r := range ranges {
		if !r.Empty() {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(a, b Range) int { return bytes.Compare(a.Start, b.Start) })
	var out []Range
	for _, r := range rs {
		if n := len(out); n > 0 {
			last := &out[n-1]
			// An empty End is +inf; an empty Start sorts first.
			if len(last.End) == 0 || bytes.Compare(r.Start, last.End) <= 0 {
				if len(last.End) > 0 && (len(r.End) == 0 || bytes.Compare(r.End, last.End) > 0) {
					last.End = r.End
				}
				continue
			}
		}
		out = append(out, r)
	}
	return out
}
