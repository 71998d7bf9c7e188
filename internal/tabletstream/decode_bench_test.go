package tabletstream

import (
	"testing"

	"github.com/scanplane/scanplane/messages"
	"github.com/scanplane/scanplane/tablets"
	"google.golang.org/protobuf/proto"
)

// benchDecodeVerify decodes a short scan's one batch (its rows packed,
// its proof) as a client receives it, unpacks its rows and checks them,
// with leaves (nil: none kept).
func benchDecodeVerify(b *testing.B, leaves *ProvenLeaves) {
	roots, rng, packed, rows, proofs := shortScan(b, 103, 141)
	msg, err := proto.Marshal(&messages.RowBatch{Seq: 1, PackedRows: packed, RowCount: uint64(len(rows)), Proofs: proofs})
	if err != nil {
		b.Fatal(err)
	}
	var buf []tablets.Entry
	b.ReportAllocs()
	for b.Loop() {
		var rb messages.RowBatch
		if err := proto.Unmarshal(msg, &rb); err != nil {
			b.Fatal(err)
		}
		got, err := tablets.AppendBatchRows(buf[:0], &rb)
		if err != nil {
			b.Fatal(err)
		}
		v := newVerifier(roots, rng, nil, 0)
		v.leaves = leaves
		if _, err := v.batch(rb.PackedRows, got, rb.Proofs); err != nil {
			b.Fatal(err)
		}
		if err := v.finish(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeVerifyShortScan: a client's work past the transport for
// a short scan of 38 rows inside one block: decode, unpack, check.
func BenchmarkDecodeVerifyShortScan(b *testing.B) { benchDecodeVerify(b, nil) }

// BenchmarkDecodeVerifyShortScanProvenLeaves: the same with the scan's
// leaves proven before (ProvenLeaves).
func BenchmarkDecodeVerifyShortScanProvenLeaves(b *testing.B) {
	benchDecodeVerify(b, NewProvenLeaves(1<<12))
}
