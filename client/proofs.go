package client

import (
	"google.golang.org/protobuf/proto"

	scanplanev1 "github.com/scanplane/scanplane/api/scanplane/v1"
	"github.com/scanplane/scanplane/internal/tabletstream"
	"github.com/scanplane/scanplane/messages"
)

// proofSeg is what a tablet stream's yield proved (ScanOptions.Proofs):
// its rows' block proofs, whether a new request of the stream began with
// them, and, alone, the end of the piece.
type proofSeg struct {
	tablet   int
	restart  bool
	rows     int
	proofs   []*messages.BlockProof
	finished bool
	end      uint64 // the scan's rows up to and including this segment's
}

// proofQueue holds the segments of a scan, in stream order, until the
// caller has taken their rows.
type proofQueue struct {
	segs []*proofSeg
	rows uint64 // rows of the segments put so far
}

func (q *proofQueue) put(pf *proofSeg) {
	if pf == nil {
		return
	}
	q.rows += uint64(pf.rows)
	pf.end = q.rows
	q.segs = append(q.segs, pf)
}

func (r *Rows) keepProofs() bool { return r.opts.Proofs && !r.count && !r.unordered }

// TakeProofs returns, with ScanOptions.Proofs, what proves the rows Next
// has returned since the last call, in stream order (the public API's
// ScanResponse.proofs: each covers the next rows after those of the ones
// before), including the end of every piece already complete. It returns
// nil without ScanOptions.Proofs.
func (r *Rows) TakeProofs() []*scanplanev1.RowProof {
	var out []*scanplanev1.RowProof
	n := 0
	for _, s := range r.proofs.segs {
		if s.end > r.stats.Rows {
			break
		}
		n++
		rp := &scanplanev1.RowProof{Tablet: uint32(s.tablet), Restart: s.restart, Rows: uint32(s.rows), Finished: s.finished}
		for _, p := range s.proofs {
			rp.Blocks = append(rp.Blocks, &scanplanev1.BlockProof{Block: p.GetBlock(), Leaves: p.GetLeaves(), First: p.GetFirst(),
				Rows: p.GetRows(), Siblings: tabletstream.Siblings(p), Head: p.GetHead(), Tail: p.GetTail()})
		}
		out = append(out, rp)
	}
	clear(r.proofs.segs[:n])
	r.proofs.segs = r.proofs.segs[n:]
	return out
}

// ProofTable returns the table generation the scan reads and its
// metadata record as the metadata store holds it (the public API's
// ScanResponse.generation and table_record), once Next has been called
// and found the table; 0 and nil before.
func (r *Rows) ProofTable() (generation uint64, record []byte) {
	if r.meta == nil {
		return 0, nil
	}
	b, err := proto.Marshal(r.meta)
	if err != nil {
		return 0, nil
	}
	return r.meta.GetGeneration(), b
}
