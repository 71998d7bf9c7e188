package tablets

import (
	"encoding/binary"

	"lukechampine.com/blake3/guts"
)

// wholeGroup is the input one compression call of wholeHasher takes:
// guts.MaxSIMD (16) BLAKE3 chunks of 1 KiB, hashed side by side with
// AVX-512 where the CPU has it (AVX2: two calls of 8).
const wholeGroup = guts.MaxSIMD * guts.ChunkSize

// wholeHasher is BLAKE3-256 (unkeyed, the hash of whole(blk)) on the
// calling goroutine, over the compression functions of
// lukechampine.com/blake3/guts: the input in 16-chunk groups, each one
// subtree of the BLAKE3 tree, merged on a stack as BLAKE3's incremental
// hashing does. (The package's own Hasher spreads a large write over
// goroutines.) The zero value is ready; Reset starts a new hash.
type wholeHasher struct {
	// stack[i] is the chaining value of a complete subtree of 2^i
	// chunks when bit i of chunks is set; chunks counts the chunks of
	// the groups pushed (a multiple of guts.MaxSIMD).
	stack  [64][8]uint32
	chunks uint64
	buf    [wholeGroup]byte // the last group, not hashed until Sum or more input
	buflen int
}

// Reset starts a new hash.
func (h *wholeHasher) Reset() { h.chunks, h.buflen = 0, 0 }

// Write adds p to the hash.
func (h *wholeHasher) Write(p []byte) {
	for len(p) > 0 {
		switch {
		case h.buflen == wholeGroup:
			// More input follows: the buffered group is not the last.
			h.push((*[wholeGroup]byte)(&h.buf))
			h.buflen = 0
		case h.buflen == 0 && len(p) > wholeGroup:
			h.push((*[wholeGroup]byte)(p[:wholeGroup]))
			p = p[wholeGroup:]
		default:
			n := copy(h.buf[h.buflen:], p)
			h.buflen += n
			p = p[n:]
		}
	}
}

// push hashes a full group that is not the input's last and merges it
// into the stack.
func (h *wholeHasher) push(g *[wholeGroup]byte) {
	cv := guts.ChainingValue(guts.CompressBuffer(g, wholeGroup, &guts.IV, h.chunks, 0))
	i := 4 // a group is a subtree of 2^4 chunks
	for ; h.chunks&(1<<i) != 0; i++ {
		cv = guts.ChainingValue(guts.ParentNode(h.stack[i], cv, &guts.IV, 0))
	}
	h.stack[i] = cv
	h.chunks += guts.MaxSIMD
}

// Sum returns the hash of what was written since Reset.
func (h *wholeHasher) Sum() Digest {
	var n guts.Node
	if h.buflen <= guts.ChunkSize {
		n = guts.CompressChunk(h.buf[:h.buflen], &guts.IV, h.chunks, 0)
	} else {
		n = guts.CompressBuffer(&h.buf, h.buflen, &guts.IV, h.chunks, 0)
	}
	for i := 4; i < 64; i++ {
		if h.chunks&(1<<i) != 0 {
			n = guts.ParentNode(h.stack[i], guts.ChainingValue(n), &guts.IV, 0)
		}
	}
	n.Flags |= guts.FlagRoot
	w := guts.CompressNode(n)
	var d Digest
	for i := range 8 {
		binary.LittleEndian.PutUint32(d[4*i:], w[i])
	}
	return d
}
