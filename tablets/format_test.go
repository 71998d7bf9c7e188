package tablets

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
)

// randomEntries returns n sorted entries with unique random keys of
// 1..maxKey bytes (binary) and values of 0..maxVal bytes.
func randomEntries(rnd *rand.Rand, n, maxKey, maxVal int) []Entry {
	seen := make(map[string]bool, n)
	out := make([]Entry, 0, n)
	for len(out) < n {
		kb := make([]byte, 1+rnd.IntN(maxKey))
		for i := range kb {
			kb[i] = byte(rnd.IntN(256))
		}
		if seen[string(kb)] {
			continue
		}
		seen[string(kb)] = true
		vb := make([]byte, rnd.IntN(maxVal+1))
		for i := range vb {
			vb[i] = byte(rnd.IntN(256))
		}
		out = append(out, Entry{Key: kb, Value: vb})
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].Key, out[j].Key) < 0 })
	return out
}

func encodeEntries(t testing.TB, id string, blockSize int, entries []Entry) *EncodedFile {
	t.Helper()
	w := NewFileWriter(id, blockSize)
	for _, e := range entries {
		if err := w.Add(e.Key, e.Value); err != nil {
			t.Fatalf("Add(%s): %v", FormatKey(e.Key), err)
		}
	}
	f, err := w.Finish()
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if w.IndexBytes() != len(f.Index) || w.Entries() != uint64(len(entries)) {
		t.Fatalf("IndexBytes = %d, index is %d bytes; Entries = %d", w.IndexBytes(), len(f.Index), w.Entries())
	}
	return f
}

func decodeFile(t testing.TB, f *EncodedFile) (*FileIndex, []Entry) {
	t.Helper()
	ix, err := DecodeIndex(f.Index)
	if err != nil {
		t.Fatalf("DecodeIndex: %v", err)
	}
	if ix.FileID != f.ID || len(ix.Blocks) != len(f.Blocks) || ix.Entries != f.Entries {
		t.Fatalf("index = {%q %d blocks %d entries}, want {%q %d %d}", ix.FileID, len(ix.Blocks), ix.Entries, f.ID, len(f.Blocks), f.Entries)
	}
	var all []Entry
	for i, b := range f.Blocks {
		es, err := DecodeBlock(b, ix.Blocks[i])
		if err != nil {
			t.Fatalf("DecodeBlock(%d): %v", i, err)
		}
		all = append(all, es...)
	}
	return ix, all
}

func sameEntries(t testing.TB, got, want []Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i].Key, want[i].Key) || !bytes.Equal(got[i].Value, want[i].Value) {
			t.Fatalf("entry %d = %s=%q, want %s=%q", i, FormatKey(got[i].Key), got[i].Value, FormatKey(want[i].Key), want[i].Value)
		}
	}
}

func TestFileRoundTrip(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	tests := []struct {
		n, maxKey, maxVal, blockSize int
	}{
		{1, 8, 8, 0},
		{1, 8, 1000, 64},        // entry larger than the block size
		{2, 8, 0, 0},            // empty values
		{10, 3, 20, 1},          // one entry per block
		{1000, 16, 100, 256},    // many blocks
		{1000, 16, 100, 0},      // few blocks
		{50, 64, 5000, 4096},    // mixed large entries
		{100000, 12, 40, 0},     // 100k entries
		{3, MaxKeyLen, 10, 100}, // maximal keys
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("n=%d,block=%d", tt.n, tt.blockSize), func(t *testing.T) {
			entries := randomEntries(rnd, tt.n, tt.maxKey, tt.maxVal)
			f := encodeEntries(t, "t.g1.t0", tt.blockSize, entries)
			if f.Entries != uint64(tt.n) {
				t.Fatalf("Entries = %d", f.Entries)
			}
			bs := tt.blockSize
			if bs <= 0 {
				bs = DefaultBlockSize
			}
			var total uint64
			ix, got := decodeFile(t, f)
			for i, b := range f.Blocks {
				total += uint64(len(b))
				if len(b) > bs && ix.Blocks[i].Entries != 1 {
					t.Errorf("block %d is %d bytes > block size %d with %d entries", i, len(b), bs, ix.Blocks[i].Entries)
				}
			}
			if f.Bytes != total+uint64(len(f.Index)) {
				t.Errorf("Bytes = %d, want %d", f.Bytes, total+uint64(len(f.Index)))
			}
			ref := f.Ref()
			if ref.Id != f.ID || ref.Blocks != uint32(len(f.Blocks)) || ref.Entries != f.Entries || ref.Bytes != f.Bytes {
				t.Errorf("Ref = %v", ref)
			}
			sameEntries(t, got, entries)
		})
	}
}

func TestFileWriterErrors(t *testing.T) {
	w := NewFileWriter("f", 0)
	if err := w.Add(nil, []byte("v")); !errors.Is(err, ErrBadInput) {
		t.Errorf("empty key: %v", err)
	}
	if err := w.Add(make([]byte, MaxKeyLen+1), nil); !errors.Is(err, ErrBadInput) {
		t.Errorf("long key: %v", err)
	}
	if err := w.Add([]byte("k"), make([]byte, MaxValueLen+1)); !errors.Is(err, ErrBadInput) {
		t.Errorf("long value: %v", err)
	}
	if err := w.Add([]byte("b"), nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Add([]byte("b"), nil); !errors.Is(err, ErrUnsorted) {
		t.Errorf("equal key: %v", err)
	}
	if err := w.Add([]byte("a"), nil); !errors.Is(err, ErrUnsorted) {
		t.Errorf("smaller key: %v", err)
	}
	if err := w.Add([]byte("c"), nil); err != nil {
		t.Errorf("writer unusable after a rejected entry: %v", err)
	}
	f, err := w.Finish()
	if err != nil || f.Entries != 2 {
		t.Fatalf("Finish = %v, %v", f, err)
	}
	if _, err := w.Finish(); !errors.Is(err, ErrBadInput) {
		t.Errorf("second Finish: %v", err)
	}
	if err := w.Add([]byte("d"), nil); !errors.Is(err, ErrBadInput) {
		t.Errorf("Add after Finish: %v", err)
	}
	if _, err := NewFileWriter("empty", 0).Finish(); !errors.Is(err, ErrBadInput) {
		t.Errorf("empty file: %v", err)
	}
	w = NewFileWriter("../x", 0)
	_ = w.Add([]byte("a"), nil)
	if _, err := w.Finish(); !errors.Is(err, ErrBadName) {
		t.Errorf("bad id: %v", err)
	}
	// Add copies its arguments.
	w = NewFileWriter("copy", 0)
	key, val := []byte("k1"), []byte("v1")
	_ = w.Add(key, val)
	key[1], val[1] = '9', '9'
	f, _ = w.Finish()
	_, got := decodeFile(t, f)
	if string(got[0].Key) != "k1" || string(got[0].Value) != "v1" {
		t.Errorf("Add aliases its arguments: %q=%q", got[0].Key, got[0].Value)
	}
}

func TestBlockAndIndexKeys(t *testing.T) {
	if got := BlockKey("t.g1.t0", 12); got != "t.g1.t0.b12" {
		t.Errorf("BlockKey = %q", got)
	}
	if got := IndexKey("t.g1.t0"); got != "t.g1.t0.idx" {
		t.Errorf("IndexKey = %q", got)
	}
}

func TestSeek(t *testing.T) {
	rnd := rand.New(rand.NewPCG(5, 6))
	entries := randomEntries(rnd, 5000, 6, 30)
	f := encodeEntries(t, "seek", 512, entries)
	ix, _ := decodeFile(t, f)
	if len(ix.Blocks) < 50 {
		t.Fatalf("only %d blocks", len(ix.Blocks))
	}
	linear := func(key []byte) int {
		if len(key) == 0 {
			return 0
		}
		for i, h := range ix.Blocks {
			if bytes.Compare(h.LastKey, key) >= 0 {
				return i
			}
		}
		return len(ix.Blocks)
	}
	probes := [][]byte{nil, {0x00}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	for _, h := range ix.Blocks {
		probes = append(probes, h.FirstKey, h.LastKey, append(bytes.Clone(h.LastKey), 0))
	}
	for range 2000 {
		probes = append(probes, randomEntries(rnd, 1, 7, 0)[0].Key)
	}
	for _, p := range probes {
		got, want := ix.Seek(p), linear(p)
		if got != want {
			t.Fatalf("Seek(%x) = %d, want %d", p, got, want)
		}
		// The sought block holds the first key >= p.
		first := sort.Search(len(entries), func(i int) bool { return bytes.Compare(entries[i].Key, p) >= 0 })
		if first < len(entries) {
			es, err := DecodeBlock(f.Blocks[got], ix.Blocks[got])
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, e := range es {
				if bytes.Equal(e.Key, entries[first].Key) {
					found = true
				}
			}
			if !found {
				t.Fatalf("Seek(%x) = block %d, which lacks the first key >= it", p, got)
			}
		} else if got != len(ix.Blocks) {
			t.Fatalf("Seek(%x) past the end = %d", p, got)
		}
	}
}

func smallFile(t testing.TB) (*EncodedFile, *FileIndex) {
	entries := []Entry{
		{[]byte("alpha"), []byte("1")},
		{[]byte("beta"), []byte("")},
		{[]byte("gamma"), []byte("three")},
		{[]byte{0x00 + 'h', 0xff}, []byte{0x00, 0x01}},
		{[]byte("zeta"), []byte("last value")},
		{[]byte("zz"), []byte("x")},
	}
	f := encodeEntries(t, "small.g1.t0", 40, entries)
	ix, _ := decodeFile(t, f)
	if len(f.Blocks) < 2 {
		t.Fatalf("want several blocks, got %d", len(f.Blocks))
	}
	return f, ix
}

func TestBlockCorruption(t *testing.T) {
	f, ix := smallFile(t)
	for bi, block := range f.Blocks {
		h := ix.Blocks[bi]
		for pos := range block {
			for _, mask := range []byte{0x01, 0x80, 0xff} {
				bad := bytes.Clone(block)
				bad[pos] ^= mask
				es, err := DecodeBlock(bad, h)
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("block %d byte %d ^%02x: DecodeBlock = %d entries, %v; want ErrCorrupt", bi, pos, mask, len(es), err)
				}
			}
		}
		// Truncation, with the handle as stored and with a handle that
		// agrees on the length.
		for n := 0; n < len(block); n++ {
			if _, err := DecodeBlock(block[:n], h); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("block %d truncated to %d: %v", bi, n, err)
			}
			h2 := h
			h2.Len = uint32(n)
			if _, err := DecodeBlock(block[:n], h2); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("block %d truncated to %d (handle agrees): %v", bi, n, err)
			}
		}
		// Extension.
		if _, err := DecodeBlock(append(bytes.Clone(block), 0), h); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("block %d extended: %v", bi, err)
		}
		// A handle of another block.
		other := ix.Blocks[(bi+1)%len(ix.Blocks)]
		if _, err := DecodeBlock(block, other); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("block %d with handle of another block: %v", bi, err)
		}
		// Mismatched keys in the handle.
		h3 := h
		h3.FirstKey = []byte("other")
		if _, err := DecodeBlock(block, h3); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("block %d with wrong first key: %v", bi, err)
		}
		h3 = h
		h3.LastKey = []byte("other")
		if _, err := DecodeBlock(block, h3); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("block %d with wrong last key: %v", bi, err)
		}
	}
}

func TestIndexCorruption(t *testing.T) {
	f, _ := smallFile(t)
	for pos := range f.Index {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			bad := bytes.Clone(f.Index)
			bad[pos] ^= mask
			ix, err := DecodeIndex(bad)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("index byte %d ^%02x: DecodeIndex = %+v, %v; want ErrCorrupt", pos, mask, ix, err)
			}
		}
	}
	for n := 0; n < len(f.Index); n++ {
		if _, err := DecodeIndex(f.Index[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("index truncated to %d: %v", n, err)
		}
	}
	if _, err := DecodeIndex(append([]byte{0}, f.Index...)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("index with a leading byte: %v", err)
	}
	if _, err := DecodeIndex(nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("nil index: %v", err)
	}
}

func FuzzDecodeBlock(f *testing.F) {
	file, _ := smallFile(f)
	for _, b := range file.Blocks {
		f.Add(b)
	}
	one := encodeEntries(f, "one", 0, []Entry{{[]byte("k"), []byte("v")}})
	f.Add(one.Blocks[0])
	f.Add([]byte{})
	f.Add(make([]byte, 8))
	f.Add([]byte{1, 0, 'a', 1, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		// Derive a handle from the data itself, so that the checksum and
		// count checks pass and the parser proper gets exercised.
		h := BlockHandle{Len: uint32(len(data))}
		if len(data) >= 8 {
			h.Entries = uint32(data[len(data)-8]) | uint32(data[len(data)-7])<<8 | uint32(data[len(data)-6])<<16 | uint32(data[len(data)-5])<<24
			h.Checksum = checksum(data[:len(data)-8])
			data = append(data[:len(data)-4:len(data)-4], byte(h.Checksum), byte(h.Checksum>>8), byte(h.Checksum>>16), byte(h.Checksum>>24))
		}
		for _, hh := range []BlockHandle{h, {Len: uint32(len(data))}} {
			es, err := DecodeBlock(data, hh)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("error %v does not wrap ErrCorrupt", err)
				}
				continue
			}
			if uint32(len(es)) != hh.Entries || len(es) == 0 {
				t.Fatalf("%d entries, handle says %d", len(es), hh.Entries)
			}
			for i, e := range es {
				if len(e.Key) == 0 || (i > 0 && bytes.Compare(es[i-1].Key, e.Key) >= 0) {
					t.Fatalf("entry %d key %x out of order or empty", i, e.Key)
				}
			}
			// The encoding is canonical: re-encoding gives the same bytes.
			w := NewFileWriter("fuzz", len(data))
			for _, e := range es {
				if err := w.Add(e.Key, e.Value); err != nil {
					t.Fatalf("re-encode: %v", err)
				}
			}
			file, err := w.Finish()
			if err != nil || len(file.Blocks) != 1 || !bytes.Equal(file.Blocks[0], data) {
				t.Fatalf("re-encoding differs (err %v)", err)
			}
		}
	})
}

func FuzzDecodeIndex(f *testing.F) {
	file, _ := smallFile(f)
	f.Add(file.Index)
	one := encodeEntries(f, "one", 0, []Entry{{[]byte("k"), []byte("v")}})
	f.Add(one.Index)
	f.Add([]byte{})
	f.Add([]byte(IndexMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		// Also try the data with a repaired footer checksum.
		variants := [][]byte{data}
		if len(data) >= footerLen {
			fixed := bytes.Clone(data)
			body := len(fixed) - footerLen
			c := checksum(fixed[:body])
			fixed[body+16], fixed[body+17], fixed[body+18], fixed[body+19] = byte(c), byte(c>>8), byte(c>>16), byte(c>>24)
			variants = append(variants, fixed)
		}
		for _, d := range variants {
			ix, err := DecodeIndex(d)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("error %v does not wrap ErrCorrupt", err)
				}
				continue
			}
			var sum uint64
			for i, h := range ix.Blocks {
				if len(h.FirstKey) == 0 || bytes.Compare(h.FirstKey, h.LastKey) > 0 || h.Entries == 0 {
					t.Fatalf("bad handle %d: %+v", i, h)
				}
				if i > 0 && bytes.Compare(ix.Blocks[i-1].LastKey, h.FirstKey) >= 0 {
					t.Fatalf("handles out of order at %d", i)
				}
				sum += uint64(h.Entries)
				_ = ix.Seek(h.FirstKey)
			}
			if sum != ix.Entries || len(ix.Blocks) == 0 {
				t.Fatalf("entries %d, handles sum to %d", ix.Entries, sum)
			}
			if !bytes.Equal(encodeIndex(ix.FileID, ix.Blocks, ix.Entries), d) {
				t.Fatalf("re-encoding the index differs")
			}
		}
	})
}

func BenchmarkDecodeBlock(b *testing.B) {
	entries := GenerateRows(5000)
	f := encodeEntries(b, "bench", 0, entries)
	ix, err := DecodeIndex(f.Index)
	if err != nil {
		b.Fatal(err)
	}
	block, h := f.Blocks[0], ix.Blocks[0]
	b.SetBytes(int64(len(block)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeBlock(block, h); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(h.Entries)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}
