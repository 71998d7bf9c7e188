package tablets

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/scanplane/scanplane/messages"
)

func TestPackedRowsRoundTrip(t *testing.T) {
	rows := [][2][]byte{{[]byte("a"), []byte("1")}, {[]byte(""), []byte("")}, {bytes.Repeat([]byte("k"), 300), bytes.Repeat([]byte("v"), 70000)}, {[]byte("z"), nil}}
	var b []byte
	for _, r := range rows {
		before := len(b)
		b = AppendPackedRow(b, r[0], r[1])
		if got, want := len(b)-before, PackedRowSize(len(r[0]), len(r[1])); got != want {
			t.Fatalf("row of %d+%d bytes took %d bytes, PackedRowSize says %d", len(r[0]), len(r[1]), got, want)
		}
		if at := PackedKeyAt(before, len(r[0]), len(r[1])); !bytes.Equal(b[at:at+len(r[0])], r[0]) {
			t.Fatalf("PackedKeyAt(%d, %d, %d) = %d: %q is not the key", before, len(r[0]), len(r[1]), at, b[at:at+len(r[0])])
		}
	}
	// The capacity hint changes nothing but the slab's first size; a
	// hostile one is bounded by the batch's length.
	var got []Entry
	for _, hint := range []int{0, len(rows), 1, -5, 1 << 40} {
		var err error
		got, err = UnpackRows(b, hint)
		if err != nil {
			t.Fatalf("hint %d: %v", hint, err)
		}
		if len(got) != len(rows) || cap(got) > max(len(rows), len(b)/2) {
			t.Fatalf("hint %d: %d rows in a slab of %d, want %d", hint, len(got), cap(got), len(rows))
		}
		for i, r := range rows {
			if !bytes.Equal(got[i].Key, r[0]) || !bytes.Equal(got[i].Value, r[1]) {
				t.Fatalf("hint %d: row %d: %q=%q", hint, i, got[i].Key, got[i].Value)
			}
		}
	}
	// Appending to a key must not overwrite what follows it.
	_ = append(got[0].Key, 'X')
	if got[0].Value[0] != '1' {
		t.Fatal("a key aliases the value after it beyond its length")
	}
	if rs, err := UnpackRows(nil, 3); err != nil || len(rs) != 0 {
		t.Fatalf("empty: %v %v", rs, err)
	}
}

func TestUnpackRowsRefusesCorrupt(t *testing.T) {
	good := AppendPackedRow(AppendPackedRow(nil, []byte("key1"), []byte("value1")), []byte("key2"), []byte("value2"))
	huge := binary.AppendUvarint(nil, MaxKeyLen+1)
	huge = append(huge, make([]byte, MaxKeyLen+1)...)
	for name, tc := range map[string]struct {
		b    []byte
		want string
	}{
		"truncated value":    {good[:len(good)-1], "packed row 1: key and value of 4+6 bytes"},
		"truncated length":   {append(good[:len(good):len(good)], 0x80), "packed row 2: bad key length"},
		"no value":           {append(good[:len(good):len(good)], 1), "packed row 2: bad value length"},
		"length overflows":   {binary.AppendUvarint(nil, 1<<62), "packed row 0: key of 4611686018427387904 bytes"},
		"key beyond limit":   {huge, "at most 16384"},
		"varint too long":    {bytes.Repeat([]byte{0xff}, 11), "packed row 0: bad key length at byte 0"},
		"non-minimal length": {[]byte{0x81, 0x00, 'k', 0x00}, "packed row 0: bad key length at byte 0"},
	} {
		rs, err := UnpackRows(tc.b, 2)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) || rs != nil {
			t.Errorf("%s: %v (%d rows), want ErrCorrupt with %q", name, err, len(rs), tc.want)
		}
	}
}

func FuzzUnpackRows(f *testing.F) {
	f.Add(AppendPackedRow(nil, []byte("k"), []byte("v")))
	f.Add([]byte{0x80})
	f.Add([]byte{}) // no rows: the digest stays 0
	f.Fuzz(func(t *testing.T, b []byte) {
		rows, err := UnpackRows(b, len(b)/8)
		if err != nil {
			return
		}
		var again []byte
		for _, r := range rows {
			again = AppendPackedRow(again, r.Key, r.Value)
		}
		// Only shortest-form lengths are accepted: what decodes
		// re-encodes to the same bytes, and digests alike both ways.
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoded %x from %x", again, b)
		}
		var one, each RowDigest
		one.AddPacked(b, len(rows))
		for _, r := range rows {
			each.Add(r.Key, r.Value)
		}
		if one.Sum() != each.Sum() || one.Rows() != each.Rows() {
			t.Fatalf("AddPacked %x/%d, Add per row %x/%d", one.Sum(), one.Rows(), each.Sum(), each.Rows())
		}
	})
}

// TestDigestAddPacked: folding a packed batch equals folding its rows one
// by one, across batches of any size.
func TestDigestAddPacked(t *testing.T) {
	rows := GenerateRows(300)
	rows = append(rows, Entry{Key: []byte("zz"), Value: bytes.Repeat([]byte("v"), 200)}, Entry{Key: []byte("zzz")})
	for _, size := range []int{1, 7, 128, len(rows)} {
		var each, packed RowDigest
		for i := 0; i < len(rows); i += size {
			batch := rows[i:min(i+size, len(rows))]
			var b []byte
			for _, e := range batch {
				each.Add(e.Key, e.Value)
				b = AppendPackedRow(b, e.Key, e.Value)
			}
			packed.AddPacked(b, len(batch))
			if packed.Sum() != each.Sum() || packed.Rows() != each.Rows() {
				t.Fatalf("batches of %d, after row %d: AddPacked %x/%d, Add %x/%d", size, i+len(batch), packed.Sum(), packed.Rows(), each.Sum(), each.Rows())
			}
		}
	}
}

// BenchmarkDigestBatch: the checksum of one 500-row batch of generated
// rows (12-byte keys, 64-byte values), folded row by row (RowDigest.Add,
// what a batch of Row messages needs) and as one packed buffer
// (RowDigest.AddPacked, what packed_rows allows).
func BenchmarkDigestBatch(b *testing.B) {
	rows := GenerateRows(500)
	var packed []byte
	for _, e := range rows {
		packed = AppendPackedRow(packed, e.Key, e.Value)
	}
	b.Run("per-row", func(b *testing.B) {
		b.SetBytes(int64(len(packed)))
		for b.Loop() {
			var d RowDigest
			for _, e := range rows {
				d.Add(e.Key, e.Value)
			}
			_ = d.Sum()
		}
	})
	b.Run("packed", func(b *testing.B) {
		b.SetBytes(int64(len(packed)))
		for b.Loop() {
			var d RowDigest
			d.AddPacked(packed, len(rows))
			_ = d.Sum()
		}
	})
}

// TestBatchRows: a RowBatch's rows come from packed_rows or rows; both, or
// packed rows that do not decode, are refused naming the batch.
func TestBatchRows(t *testing.T) {
	row := &messages.Row{Key: []byte("k"), Value: []byte("v")}
	packed := AppendPackedRow(nil, row.Key, row.Value)
	for name, tc := range map[string]struct {
		b    *messages.RowBatch
		want string // error text; "" = the one row
	}{
		"rows":        {&messages.RowBatch{Seq: 1, Rows: []*messages.Row{row}}, ""},
		"packed":      {&messages.RowBatch{Seq: 2, PackedRows: packed}, ""},
		"both":        {&messages.RowBatch{Seq: 3, Rows: []*messages.Row{row}, PackedRows: packed}, "batch 3 has both"},
		"undecodable": {&messages.RowBatch{Seq: 4, PackedRows: packed[:len(packed)-1]}, "batch 4: "},
	} {
		rows, err := BatchRows(tc.b, 1)
		if tc.want == "" {
			if err != nil || len(rows) != 1 || !bytes.Equal(rows[0].Key, row.Key) || !bytes.Equal(rows[0].Value, row.Value) {
				t.Errorf("%s: %v, %v", name, rows, err)
			}
			continue
		}
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) || rows != nil {
			t.Errorf("%s: %v (%d rows), want ErrCorrupt with %q", name, err, len(rows), tc.want)
		}
	}
}

// TestAppendUnpacked: decoding into a recycled slab gives UnpackRows's
// rows after what the slab holds, allocates nothing while the slab is
// large enough, and names rows from the batch's first in errors.
func TestAppendUnpacked(t *testing.T) {
	rows := GenerateRows(200)
	var b []byte
	for _, e := range rows {
		b = AppendPackedRow(b, e.Key, e.Value)
	}
	want, err := UnpackRows(b, len(rows))
	if err != nil {
		t.Fatal(err)
	}
	head := Entry{Key: []byte("head")}
	slab := make([]Entry, 0, len(rows)+1)
	got, err := AppendUnpacked(append(slab, head), b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(rows)+1 || &got[0] != &slab[:1][0] || !bytes.Equal(got[0].Key, head.Key) {
		t.Fatalf("%d rows (want %d), slab reused: %v", len(got), len(rows)+1, &got[0] == &slab[:1][0])
	}
	for i, e := range want {
		if !bytes.Equal(got[i+1].Key, e.Key) || !bytes.Equal(got[i+1].Value, e.Value) {
			t.Fatalf("row %d: %q=%q, want %q=%q", i, got[i+1].Key, got[i+1].Value, e.Key, e.Value)
		}
	}
	if n := testing.AllocsPerRun(20, func() {
		if _, err := AppendUnpacked(slab[:0], b); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("AppendUnpacked into a large enough slab: %v allocations per batch, want 0", n)
	}
	bad := append(AppendPackedRow(nil, []byte("k"), []byte("v")), 0x80)
	if rs, err := AppendUnpacked(append(slab[:0], head, head), bad); !errors.Is(err, ErrCorrupt) || rs != nil ||
		!strings.Contains(err.Error(), "packed row 1: bad key length at byte 4") {
		t.Fatalf("corrupt: %v (%d rows), want ErrCorrupt naming packed row 1 at byte 4", err, len(rs))
	}
	batch := &messages.RowBatch{Seq: 9, PackedRows: b}
	if got, err := AppendBatchRows(slab[:0], batch); err != nil || len(got) != len(rows) || &got[0] != &slab[:1][0] {
		t.Fatalf("AppendBatchRows: %d rows, %v", len(got), err)
	}
}
