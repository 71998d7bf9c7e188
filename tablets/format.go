// The tablet file format.
//
// A tablet file is written once by ingest and never modified. It is stored
// as separate objects in a BlockStore: its data blocks under
// BlockKey(id, i) = "<id>.b<i>" (i = 0, 1, ...) and its index under
// IndexKey(id) = "<id>.idx". Ingest stores the blocks first and the index
// last, so an index that exists names blocks that exist. A file always has
// at least one entry: a file with zero entries is never written (Finish
// refuses it; a tablet without rows simply has no files).
//
// All fixed-width integers are little-endian; uvarint is
// encoding/binary's unsigned varint and must be minimally encoded; CRC is
// CRC-32C (Castagnoli).
//
// Data block:
//
//	entry*   : uvarint keyLen | uvarint valueLen | key | value
//	trailer  : uint32 entry count | uint32 CRC of every byte before the trailer
//
// Keys are non-empty and strictly increasing within a block and across the
// blocks of a file. Blocks are cut at about the writer's block size: an
// entry that would push the block (with its trailer) past the block size
// starts a new block, and a block holds at least one entry, so a block is
// larger than the block size only when it holds a single large entry.
//
// Index object:
//
//	header   : uvarint len(fileID) | fileID
//	handle*  : uvarint len(firstKey) | uvarint len(lastKey) | firstKey | lastKey |
//	           uvarint entries | uvarint block length | uint32 block CRC
//	footer   : uint64 block count | uint64 total entries |
//	           uint32 CRC of header and handles | uint32 version (1) | "SCANPLN1"
//
// A handle's block CRC equals the CRC in that block's trailer. The file id
// in the header lets a reader check that an index belongs to the file it
// asked for.
//
// Verification: VerifyBlock (and DecodeBlock, which uses it) checks the length against the handle, the CRC
// against both the trailer and the handle, the entry count against both,
// minimal varints, that the entries exactly fill the block, that keys are
// non-empty and strictly increasing, and that the first and last keys
// equal the handle's. DecodeIndex checks the magic, version, CRC, block
// count, entry total, and the order and sanity of every handle. Every
// byte of a block or an index is covered by some check, so a corrupted or
// truncated object yields ErrCorrupt, never wrong rows and never a panic.

package tablets

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sort"
	"strconv"

	"github.com/scanplane/scanplane/messages"
)

// DefaultBlockSize is the default target size of a data block in bytes.
const DefaultBlockSize = 64 << 10

// Format constants of the index footer.
const (
	FormatVersion = 1
	IndexMagic    = "SCANPLN1"
	footerLen     = 8 + 8 + 4 + 4 + len(IndexMagic)
	trailerLen    = 4 + 4
	minEntryLen   = 1 + 1 + 1 // two one-byte varints and a one-byte key
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func checksum(b []byte) uint32 { return crc32.Checksum(b, crcTable) }

// BlockKey is the BlockStore object key of block i of file fileID.
func BlockKey(fileID string, block int) string {
	return fileID + ".b" + strconv.Itoa(block)
}

// IndexKey is the BlockStore object key of the index of file fileID.
func IndexKey(fileID string) string { return fileID + ".idx" }

// Entry is one row.
type Entry struct {
	Key, Value []byte
}

// BlockHandle describes one data block of a file, as recorded in its index.
type BlockHandle struct {
	FirstKey []byte
	LastKey  []byte
	Entries  uint32 // number of entries, >= 1
	Len      uint32 // encoded length in bytes, trailer included
	Checksum uint32 // CRC-32C of the block without its trailer
}

// FileIndex is a decoded index object.
type FileIndex struct {
	FileID  string
	Blocks  []BlockHandle
	Entries uint64
}

// Seek returns the first block that may contain keys >= key: the first
// block whose last key is >= key. It returns 0 for a nil key and
// len(ix.Blocks) when every key of the file is < key.
func (ix *FileIndex) Seek(key []byte) int {
	if len(key) == 0 {
		return 0
	}
	return sort.Search(len(ix.Blocks), func(i int) bool {
		return bytes.Compare(ix.Blocks[i].LastKey, key) >= 0
	})
}

// EncodedFile is a finished tablet file, ready to be stored.
type EncodedFile struct {
	ID      string
	Blocks  [][]byte // block i is stored under BlockKey(ID, i)
	Index   []byte   // stored under IndexKey(ID)
	Entries uint64
	Bytes   uint64 // encoded bytes of blocks and index
	// Roots: the block roots of the row digest tree (merkle.go),
	// DigestSize bytes per block, as FileRef.block_roots.
	Roots []byte
}

// Ref is the metadata reference to f.
func (f *EncodedFile) Ref() *messages.FileRef {
	return &messages.FileRef{Id: f.ID, Blocks: uint32(len(f.Blocks)), Entries: f.Entries, Bytes: f.Bytes, BlockRoots: f.Roots}
}

// FileWriter encodes a tablet file from entries added in strictly
// increasing key order. It keeps the whole file in memory. A FileWriter
// belongs to one goroutine.
type FileWriter struct {
	id        string
	blockSize int

	buf      []byte // the block being built
	n        uint32 // entries in buf
	firstOff int    // offset of the first key in buf
	firstLen int
	last     []byte // last key added (aliases buf or an encoded block)
	lastOff  int    // offset of the last key in buf

	blocks     [][]byte
	handles    []BlockHandle
	indexBytes int // encoded size of the index of the flushed blocks
	entries    uint64
	bytes      uint64
	done       bool

	mh     MerkleHasher
	starts []uint32 // offset in buf of each chunk of the row digest tree
	roots  []byte   // block roots of the flushed blocks
}

// NewFileWriter returns a writer for file fileID with the given target
// block size in bytes (<= 0 means DefaultBlockSize). fileID must be a valid
// object key (ValidateObjectKey); Finish reports it otherwise.
func NewFileWriter(fileID string, blockSize int) *FileWriter {
	if blockSize <= 0 {
		blockSize = DefaultBlockSize
	}
	return &FileWriter{id: fileID, blockSize: blockSize,
		indexBytes: uvarintLen(uint64(len(fileID))) + len(fileID) + footerLen}
}

// Entries is the number of entries added so far.
func (w *FileWriter) Entries() uint64 { return w.entries }

// IndexBytes is the size the index would have if the file ended with the
// last completed block. Ingest starts a new file when it passes
// MaxIndexBytes, which keeps index objects well under the NATS payload
// limit.
func (w *FileWriter) IndexBytes() int { return w.indexBytes }

// Add appends an entry. The key must be non-empty and at most MaxKeyLen
// bytes, the value at most MaxValueLen bytes (else ErrBadInput), and the
// key must be greater than the previous key (else ErrUnsorted). A rejected
// entry is not added; the writer stays usable. Add copies key and value.
func (w *FileWriter) Add(key, value []byte) error {
	if w.done {
		return fmt.Errorf("%w: file %s: Add after Finish", ErrBadInput, w.id)
	}
	if len(key) == 0 {
		return fmt.Errorf("%w: empty key", ErrBadInput)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key %.40s... is %d bytes, at most %d allowed", ErrBadInput, FormatKey(key), len(key), MaxKeyLen)
	}
	if len(value) > MaxValueLen {
		return fmt.Errorf("%w: value of key %s is %d bytes, at most %d allowed", ErrBadInput, FormatKey(key), len(value), MaxValueLen)
	}
	if w.last != nil && bytes.Compare(key, w.last) <= 0 {
		return fmt.Errorf("%w: key %s after %s", ErrUnsorted, FormatKey(key), FormatKey(w.last))
	}
	need := uvarintLen(uint64(len(key))) + uvarintLen(uint64(len(value))) + len(key) + len(value)
	if w.n > 0 && len(w.buf)+need+trailerLen > w.blockSize {
		w.flush()
	}
	if w.buf == nil {
		w.buf = make([]byte, 0, max(w.blockSize, need+trailerLen))
	}
	if w.n%ChunkRows == 0 {
		w.starts = append(w.starts, uint32(len(w.buf)))
	}
	w.buf = binary.AppendUvarint(w.buf, uint64(len(key)))
	w.buf = binary.AppendUvarint(w.buf, uint64(len(value)))
	off := len(w.buf)
	w.buf = append(w.buf, key...)
	w.buf = append(w.buf, value...)
	if w.n == 0 {
		w.firstOff, w.firstLen = off, len(key)
	}
	w.last = w.buf[off : off+len(key) : off+len(key)]
	w.lastOff = off
	w.n++
	w.entries++
	return nil
}

func (w *FileWriter) flush() {
	if w.n == 0 {
		return
	}
	root := w.mh.BodyRoot(w.buf, int(w.n), w.starts)
	w.roots = append(w.roots, root[:]...)
	w.starts = w.starts[:0]
	crc := checksum(w.buf)
	block := binary.LittleEndian.AppendUint32(w.buf, w.n)
	block = binary.LittleEndian.AppendUint32(block, crc)
	w.handles = append(w.handles, BlockHandle{
		FirstKey: block[w.firstOff : w.firstOff+w.firstLen : w.firstOff+w.firstLen],
		LastKey:  block[w.lastOff : w.lastOff+len(w.last) : w.lastOff+len(w.last)],
		Entries:  w.n,
		Len:      uint32(len(block)),
		Checksum: crc,
	})
	h := &w.handles[len(w.handles)-1]
	w.last = h.LastKey
	w.indexBytes += handleLen(h)
	w.blocks = append(w.blocks, block)
	w.bytes += uint64(len(block))
	w.buf, w.n = nil, 0
}

// Finish encodes the index and returns the file. A file with zero entries
// is refused (ErrBadInput): empty files are never written. An invalid file
// id is refused with ErrBadName. The writer cannot be used afterwards.
func (w *FileWriter) Finish() (*EncodedFile, error) {
	if w.done {
		return nil, fmt.Errorf("%w: file %s: Finish called twice", ErrBadInput, w.id)
	}
	w.done = true
	if err := ValidateObjectKey(w.id); err != nil {
		return nil, fmt.Errorf("file id: %w", err)
	}
	w.flush()
	if w.entries == 0 {
		return nil, fmt.Errorf("%w: file %s has no entries (empty files are not written)", ErrBadInput, w.id)
	}
	index := encodeIndex(w.id, w.handles, w.entries)
	f := &EncodedFile{
		ID:      w.id,
		Blocks:  w.blocks,
		Index:   index,
		Entries: w.entries,
		Bytes:   w.bytes + uint64(len(index)),
		Roots:   w.roots,
	}
	return f, nil
}

func encodeIndex(id string, hs []BlockHandle, entries uint64) []byte {
	size := uvarintLen(uint64(len(id))) + len(id) + footerLen
	for i := range hs {
		size += handleLen(&hs[i])
	}
	b := make([]byte, 0, size)
	b = binary.AppendUvarint(b, uint64(len(id)))
	b = append(b, id...)
	for _, h := range hs {
		b = binary.AppendUvarint(b, uint64(len(h.FirstKey)))
		b = binary.AppendUvarint(b, uint64(len(h.LastKey)))
		b = append(b, h.FirstKey...)
		b = append(b, h.LastKey...)
		b = binary.AppendUvarint(b, uint64(h.Entries))
		b = binary.AppendUvarint(b, uint64(h.Len))
		b = binary.LittleEndian.AppendUint32(b, h.Checksum)
	}
	crc := checksum(b)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(hs)))
	b = binary.LittleEndian.AppendUint64(b, entries)
	b = binary.LittleEndian.AppendUint32(b, crc)
	b = binary.LittleEndian.AppendUint32(b, FormatVersion)
	b = append(b, IndexMagic...)
	return b
}

func handleLen(h *BlockHandle) int {
	return uvarintLen(uint64(len(h.FirstKey))) + uvarintLen(uint64(len(h.LastKey))) + len(h.FirstKey) + len(h.LastKey) +
		uvarintLen(uint64(h.Entries)) + uvarintLen(uint64(h.Len)) + 4
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// reader is a bounds-checked decoder over a byte slice.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
	}
}

func (r *reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.fail("bad %s varint at offset %d", what, r.off)
		return 0
	}
	if n != uvarintLen(v) {
		r.fail("non-minimal %s varint at offset %d", what, r.off)
		return 0
	}
	r.off += n
	return v
}

func (r *reader) bytes(n uint64, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.off) {
		r.fail("%s of %d bytes at offset %d overruns %d bytes", what, n, r.off, len(r.b))
		return nil
	}
	out := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return out
}

func (r *reader) uint32(what string) uint32 {
	b := r.bytes(4, what)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

// DecodeIndex decodes and verifies an index object (see the format
// comment for the checks). Any failure wraps ErrCorrupt. The handles'
// keys alias data.
func DecodeIndex(data []byte) (*FileIndex, error) {
	if len(data) < footerLen {
		return nil, fmt.Errorf("%w: index of %d bytes is shorter than its footer", ErrCorrupt, len(data))
	}
	body := data[:len(data)-footerLen]
	foot := data[len(body):]
	nblocks := binary.LittleEndian.Uint64(foot[0:])
	total := binary.LittleEndian.Uint64(foot[8:])
	crc := binary.LittleEndian.Uint32(foot[16:])
	version := binary.LittleEndian.Uint32(foot[20:])
	if string(foot[24:]) != IndexMagic {
		return nil, fmt.Errorf("%w: bad index magic %q", ErrCorrupt, foot[24:])
	}
	if version != FormatVersion {
		return nil, fmt.Errorf("%w: index format version %d, want %d", ErrCorrupt, version, FormatVersion)
	}
	if got := checksum(body); got != crc {
		return nil, fmt.Errorf("%w: index checksum %08x, footer says %08x", ErrCorrupt, got, crc)
	}
	// The smallest handle: four one-byte varints, two one-byte keys, a CRC.
	const minHandle = 4 + 2 + 4
	if nblocks == 0 || nblocks > uint64(len(body)/minHandle) {
		return nil, fmt.Errorf("%w: impossible block count %d for a %d-byte index", ErrCorrupt, nblocks, len(data))
	}
	r := reader{b: body}
	idLen := r.uvarint("file id length")
	id := r.bytes(idLen, "file id")
	if r.err != nil {
		return nil, r.err
	}
	ix := &FileIndex{FileID: string(id), Blocks: make([]BlockHandle, nblocks)}
	var sum uint64
	for i := range ix.Blocks {
		fl := r.uvarint("first key length")
		ll := r.uvarint("last key length")
		first := r.bytes(fl, "first key")
		last := r.bytes(ll, "last key")
		n := r.uvarint("entry count")
		blen := r.uvarint("block length")
		bcrc := r.uint32("block checksum")
		if r.err != nil {
			return nil, fmt.Errorf("block handle %d: %w", i, r.err)
		}
		switch {
		case len(first) == 0 || len(last) == 0 || len(first) > MaxKeyLen || len(last) > MaxKeyLen:
			return nil, fmt.Errorf("%w: block handle %d: bad key lengths %d, %d", ErrCorrupt, i, len(first), len(last))
		case n == 0 || n > 1<<32-1 || blen > 1<<32-1:
			return nil, fmt.Errorf("%w: block handle %d: bad entries %d or length %d", ErrCorrupt, i, n, blen)
		case blen < trailerLen+n*minEntryLen:
			return nil, fmt.Errorf("%w: block handle %d: %d entries cannot fit %d bytes", ErrCorrupt, i, n, blen)
		}
		switch c := bytes.Compare(first, last); {
		case c > 0, c == 0 && n != 1, c < 0 && n < 2:
			return nil, fmt.Errorf("%w: block handle %d: first key %s, last key %s, %d entries", ErrCorrupt, i, FormatKey(first), FormatKey(last), n)
		}
		if i > 0 && bytes.Compare(ix.Blocks[i-1].LastKey, first) >= 0 {
			return nil, fmt.Errorf("%w: block handle %d starts at %s, not after the previous block's last key %s",
				ErrCorrupt, i, FormatKey(first), FormatKey(ix.Blocks[i-1].LastKey))
		}
		ix.Blocks[i] = BlockHandle{FirstKey: first, LastKey: last, Entries: uint32(n), Len: uint32(blen), Checksum: bcrc}
		sum += n
	}
	if r.off != len(body) {
		return nil, fmt.Errorf("%w: %d trailing bytes in index", ErrCorrupt, len(body)-r.off)
	}
	if sum != total {
		return nil, fmt.Errorf("%w: index blocks hold %d entries, footer says %d", ErrCorrupt, sum, total)
	}
	ix.Entries = total
	return ix, nil
}
