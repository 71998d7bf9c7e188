package tablets

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"sync/atomic"
	"unsafe"
)

// RestartInterval is how many entries lie between two seek points of a
// Block: a seek binary-searches the seek points and then walks at most
// this many entries, as a LevelDB block's restart points do
// (leveldb table/block.cc, Block::Iter::Seek). The seek points are built
// in memory when a block is verified; the file format is unchanged.
const RestartInterval = 16

// Block is a verified data block, positioned by byte offsets into its
// body: VerifyBlock checked every byte once, so reading it again needs no
// checks and allocates nothing. A Block is immutable and safe for
// concurrent use; the host cache shares one Block between scans.
type Block struct {
	body     []byte   // entries, without the trailer
	restarts []uint32 // offset of entry i*RestartInterval
	entries  uint32
	crc      uint32 // CRC of body, as in the trailer and the handle
	first    []byte
	last     []byte
	// nodes: every node of the row digest tree (its chunk leaves and
	// the nodes above) and the whole block's hash, computed by the first
	// proof that needs one (merkle.go).
	nodes atomic.Pointer[blockDigests]
}

// blockOverhead approximates a Block's memory besides its data and seek
// points, for the cache's byte cost.
const blockOverhead = int64(unsafe.Sizeof(Block{}))

// Cost is the memory the Block holds in bytes (its data and its digest
// chunks included): the cost the host cache charges for it.
func (b *Block) Cost() int64 {
	return int64(len(b.body)+trailerLen) + (4+nodeCost)*int64(cap(b.restarts)) + blockOverhead
}

// Entries is the number of entries of the block.
func (b *Block) Entries() int { return int(b.entries) }

// Matches reports whether b is the block h describes: same length,
// checksum, entry count and first and last keys. A Block verified against
// one handle and found again in a cache is checked against the handle of
// the index at hand with it (O(key length), no pass over the data).
func (b *Block) Matches(h BlockHandle) bool {
	return uint64(len(b.body)+trailerLen) == uint64(h.Len) && b.crc == h.Checksum && b.entries == h.Entries &&
		(len(h.FirstKey) == 0 || bytes.Equal(h.FirstKey, b.first)) &&
		(len(h.LastKey) == 0 || bytes.Equal(h.LastKey, b.last))
}

// entry decodes the entry at byte offset off of the verified body and
// returns it and the offset of the next entry. Key and value alias the
// block, with their capacity capped at their length.
func (b *Block) entry(off int) (Entry, int) {
	kl, n := uvarint(b.body[off:])
	off += n
	vl, n := uvarint(b.body[off:])
	off += n
	k := off + int(kl)
	v := k + int(vl)
	return Entry{Key: b.body[off:k:k], Value: b.body[k:v:v]}, v
}

// uvarint is binary.Uvarint with the one-byte case (lengths under 128,
// most keys and values) inlined. b is verified: it holds a whole varint.
func uvarint(b []byte) (uint64, int) {
	if b[0] < 0x80 {
		return uint64(b[0]), 1
	}
	return binary.Uvarint(b)
}

// end is the offset just past the last entry.
func (b *Block) end() int { return len(b.body) }

// seek returns the offset of the first entry with a key >= key (end() if
// none): a binary search over the seek points, then a walk of at most
// RestartInterval entries.
func (b *Block) seek(key []byte) int {
	// The first seek point whose key is >= key; the answer lies after the
	// seek point before it.
	i := sort.Search(len(b.restarts), func(i int) bool {
		e, _ := b.entry(int(b.restarts[i]))
		return bytes.Compare(e.Key, key) >= 0
	})
	if i == 0 {
		return 0
	}
	off := int(b.restarts[i-1])
	for off < len(b.body) {
		e, next := b.entry(off)
		if bytes.Compare(e.Key, key) >= 0 {
			return off
		}
		off = next
	}
	return off
}

// VerifyBlock checks a data block against its handle (see the format
// comment for the checks; keys and values must also respect MaxKeyLen and
// MaxValueLen) and returns it ready for seeking. Any failure wraps
// ErrCorrupt. The Block aliases data: do not modify data afterwards.
// Empty FirstKey/LastKey in h are not checked (a handle decoded from an
// index always has them).
func VerifyBlock(data []byte, h BlockHandle) (*Block, error) {
	if uint64(len(data)) != uint64(h.Len) {
		return nil, fmt.Errorf("%w: block is %d bytes, index says %d", ErrCorrupt, len(data), h.Len)
	}
	if len(data) < trailerLen+minEntryLen {
		return nil, fmt.Errorf("%w: block of %d bytes is too short", ErrCorrupt, len(data))
	}
	body := data[: len(data)-trailerLen : len(data)-trailerLen]
	count := binary.LittleEndian.Uint32(data[len(body):])
	crc := binary.LittleEndian.Uint32(data[len(body)+4:])
	if crc != h.Checksum {
		return nil, fmt.Errorf("%w: block trailer checksum %08x, index says %08x", ErrCorrupt, crc, h.Checksum)
	}
	if got := checksum(body); got != crc {
		return nil, fmt.Errorf("%w: block checksum %08x, trailer says %08x", ErrCorrupt, got, crc)
	}
	if count != h.Entries {
		return nil, fmt.Errorf("%w: block trailer has %d entries, index says %d", ErrCorrupt, count, h.Entries)
	}
	if count == 0 || uint64(count) > uint64(len(body)/minEntryLen) {
		return nil, fmt.Errorf("%w: impossible entry count %d for a %d-byte block", ErrCorrupt, count, len(data))
	}
	b := &Block{body: body, entries: count, crc: crc,
		restarts: make([]uint32, 0, (count+RestartInterval-1)/RestartInterval)}
	r := reader{b: body}
	var prev []byte
	for i := 0; i < int(count); i++ {
		off := r.off
		kl := r.uvarint("key length")
		vl := r.uvarint("value length")
		key := r.bytes(kl, "key")
		val := r.bytes(vl, "value")
		if r.err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, r.err)
		}
		if len(key) == 0 || len(key) > MaxKeyLen || len(val) > MaxValueLen {
			return nil, fmt.Errorf("%w: entry %d has a bad key or value length (%d, %d)", ErrCorrupt, i, len(key), len(val))
		}
		if prev != nil && bytes.Compare(prev, key) >= 0 {
			return nil, fmt.Errorf("%w: entry %d key %s not after %s", ErrCorrupt, i, FormatKey(key), FormatKey(prev))
		}
		if i%RestartInterval == 0 {
			b.restarts = append(b.restarts, uint32(off))
		}
		if i == 0 {
			b.first = key
		}
		prev = key
	}
	if r.off != len(body) {
		return nil, fmt.Errorf("%w: %d trailing bytes after %d entries", ErrCorrupt, len(body)-r.off, count)
	}
	b.last = prev
	if len(h.FirstKey) > 0 && !bytes.Equal(h.FirstKey, b.first) {
		return nil, fmt.Errorf("%w: block first key %s, index says %s", ErrCorrupt, FormatKey(b.first), FormatKey(h.FirstKey))
	}
	if len(h.LastKey) > 0 && !bytes.Equal(h.LastKey, prev) {
		return nil, fmt.Errorf("%w: block last key %s, index says %s", ErrCorrupt, FormatKey(prev), FormatKey(h.LastKey))
	}
	return b, nil
}

// DecodeBlock verifies a data block against its handle (VerifyBlock) and
// returns all its entries. Any failure wraps ErrCorrupt. The returned
// entries alias data: do not modify data while they are in use. Readers
// use VerifyBlock and seek instead; DecodeBlock is for tools and tests.
func DecodeBlock(data []byte, h BlockHandle) ([]Entry, error) {
	b, err := VerifyBlock(data, h)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, b.entries)
	for off := 0; off < b.end(); {
		var e Entry
		e, off = b.entry(off)
		out = append(out, e)
	}
	return out, nil
}

// indexOverhead approximates the memory of a decoded index besides its
// data, per block handle.
const handleOverhead = int64(unsafe.Sizeof(BlockHandle{}))

// IndexCost is the memory a decoded index holds in bytes, its encoded
// data (which its keys alias) included: the cost the host cache charges
// for it.
func IndexCost(ix *FileIndex, data []byte) int64 {
	return int64(len(data)) + int64(len(ix.FileID)) + handleOverhead*int64(cap(ix.Blocks)) + int64(unsafe.Sizeof(FileIndex{}))
}

// DecodingFetcher is a BlockFetcher that also caches what readers decode
// from the objects it fetches. FetchDecoded returns the value cached under
// key, or fetches the object, calls decode on it and offers the value to
// the cache (cost in bytes) only if decode succeeded: a value that fails
// decode is returned as an error and never cached, so the cache holds
// verified values only. Concurrent misses of one key may share one fetch
// and one decode. The value is shared: never modify it. cached reports a
// cache hit, as for FetchBlock. decode must be a pure function of the
// object's bytes (readers pass the same decode for the same key).
//
// The host cache implements it; readers fall back to FetchBlock and decode
// every fetch for fetchers that do not.
type DecodingFetcher interface {
	BlockFetcher
	FetchDecoded(ctx context.Context, key string, decode func(data []byte) (v any, cost int64, err error)) (v any, cached bool, err error)
}

// FetchDecoded fetches key through f and decodes it: through f's decoded
// cache if f is a DecodingFetcher, else with FetchBlock and decode on
// every call. Wrappers of fetchers (timing, fault injection) use it to
// pass decoded fetches through.
func FetchDecoded(ctx context.Context, f BlockFetcher, key string, decode func([]byte) (any, int64, error)) (any, bool, error) {
	if df, ok := f.(DecodingFetcher); ok {
		return df.FetchDecoded(ctx, key, decode)
	}
	data, cached, err := f.FetchBlock(ctx, key)
	if err != nil {
		return nil, cached, err
	}
	v, _, err := decode(data)
	return v, cached, err
}
