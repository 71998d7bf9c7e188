package scanserver

// sendBufs recycles the packed-rows buffers of one scan's batches
// (RowBatch.packed_rows), so that a scan in its steady state allocates
// no buffer per batch. A batch's buffer belongs to its message until the
// remote's endpoint writer has serialized it; the client's BatchAck for
// that batch or a later one says the batch arrived, so it was serialized
// and its buffer is free. Only for a client in another actor system
// (remote): a client in this one gets the message itself and hands its
// rows, which alias the buffer, to its caller; then nothing is recycled.
// A client that acknowledges a batch before it arrives garbles, at
// worst, the bytes of its own scan's next batches, which its checks
// refuse. Used by the scan's worker goroutine only.
type sendBufs struct {
	remote   bool
	inflight []sentBuf // batches sent and not known acknowledged, oldest first
	spare    [][]byte
}

type sentBuf struct {
	seq uint64
	b   []byte
}

// maxSpareBufs bounds the free buffers a scan keeps.
const maxSpareBufs = 2

// get returns an empty buffer with room for n bytes: a free one (of a
// batch acknowledged up to acked) when one is large enough, else a new
// one.
func (s *sendBufs) get(n int, acked uint64) []byte {
	if s.remote {
		k := 0
		for k < len(s.inflight) && s.inflight[k].seq <= acked {
			s.free(s.inflight[k].b)
			s.inflight[k] = sentBuf{}
			k++
		}
		s.inflight = s.inflight[:copy(s.inflight, s.inflight[k:])]
		for i := len(s.spare) - 1; i >= 0; i-- {
			if b := s.spare[i]; cap(b) >= n {
				last := len(s.spare) - 1
				s.spare[i], s.spare[last] = s.spare[last], nil
				s.spare = s.spare[:last]
				return b[:0]
			}
		}
	}
	return make([]byte, 0, n)
}

// free keeps b as a spare, in place of a smaller one when there are
// maxSpareBufs already.
func (s *sendBufs) free(b []byte) {
	if len(s.spare) < maxSpareBufs {
		s.spare = append(s.spare, b)
		return
	}
	small := 0
	for i, f := range s.spare {
		if cap(f) < cap(s.spare[small]) {
			small = i
		}
	}
	if cap(s.spare[small]) < cap(b) {
		s.spare[small] = b
	}
}

// sent records that batch seq went out in b's array.
func (s *sendBufs) sent(seq uint64, b []byte) {
	if s.remote && cap(b) > 0 {
		s.inflight = append(s.inflight, sentBuf{seq: seq, b: b[:0]})
	}
}
