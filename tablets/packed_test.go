package tablets

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
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
	}
	got, err := UnpackRows(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(rows) {
		t.Fatalf("%d rows, want %d", len(got), len(rows))
	}
	for i, r := range rows {
		if !bytes.Equal(got[i].Key, r[0]) || !bytes.Equal(got[i].Value, r[1]) {
			t.Fatalf("row %d: %q=%q", i, got[i].Key, got[i].Value)
		}
	}
	// Appending to a key must not overwrite what follows it.
	_ = append(got[0].Key, 'X')
	if got[0].Value[0] != '1' {
		t.Fatal("a key aliases the value after it beyond its length")
	}
	if rs, err := UnpackRows(nil); err != nil || len(rs) != 0 {
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
		"truncated value":  {good[:len(good)-1], "packed row 1: value of 6 bytes"},
		"truncated length": {append(good[:len(good):len(good)], 0x80), "packed row 2: bad key length"},
		"no value":         {append(good[:len(good):len(good)], 1, 'k'), "packed row 2: bad value length"},
		"length overflows": {binary.AppendUvarint(nil, 1<<62), "packed row 0: key of 4611686018427387904 bytes"},
		"key beyond limit": {huge, "at most 16384"},
		"varint too long":  {bytes.Repeat([]byte{0xff}, 11), "packed row 0: bad key length at byte 0"},
	} {
		rs, err := UnpackRows(tc.b)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) || rs != nil {
			t.Errorf("%s: %v (%d rows), want ErrCorrupt with %q", name, err, len(rs), tc.want)
		}
	}
}

func FuzzUnpackRows(f *testing.F) {
	f.Add(AppendPackedRow(nil, []byte("k"), []byte("v")))
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		rows, err := UnpackRows(b)
		if err != nil {
			return
		}
		var again []byte
		for _, r := range rows {
			again = AppendPackedRow(again, r.Key, r.Value)
		}
		// Non-minimal varints decode but re-encode shorter.
		if len(again) > len(b) {
			t.Fatalf("re-encoded %d bytes from %d", len(again), len(b))
		}
	})
}
