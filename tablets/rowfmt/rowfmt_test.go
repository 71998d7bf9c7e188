package rowfmt

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scanplane/scanplane/tablets"
)

// awkward are rows with every byte value, separators, quotes, escapes,
// newlines and text that looks like a header.
func awkward() []tablets.Entry {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	return []tablets.Entry{
		{Key: []byte("key"), Value: []byte("value")},
		{Key: []byte("a,b"), Value: []byte(`say "hi", then leave`)},
		{Key: []byte("tab\there"), Value: []byte("line1\nline2\r\nline3\\n not an escape")},
		{Key: []byte("bin\x00\xff"), Value: all},
		{Key: []byte("utf8 é 😀"), Value: []byte("<&> \u2028 \"q\" \\x41")},
		{Key: []byte(" lead"), Value: nil},
		{Key: []byte("\\"), Value: []byte("\\\\")},
	}
}

func roundTrip(t *testing.T, cfg Config, rows []tablets.Entry) []tablets.Entry {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := w.Write(r.Key, r.Value); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return readAll(t, bytes.NewReader(buf.Bytes()), cfg)
}

func readAll(t *testing.T, r io.Reader, cfg Config) []tablets.Entry {
	t.Helper()
	src, err := NewReader(r, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out []tablets.Entry
	for {
		row, err := src.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tablets.Entry{Key: bytes.Clone(row.Key), Value: bytes.Clone(row.Value)})
	}
}

func same(t *testing.T, got, want []tablets.Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d: %q", len(got), len(want), got)
	}
	for i := range want {
		if !bytes.Equal(got[i].Key, want[i].Key) || !bytes.Equal(got[i].Value, want[i].Value) {
			t.Errorf("row %d = %q=%q, want %q=%q", i, got[i].Key, got[i].Value, want[i].Key, want[i].Value)
		}
	}
}

// TestRoundTrip: what a writer writes its reader reads back byte for
// byte. CSV cannot hold "\r\n" in a field (encoding/csv reads it as
// "\n"), so its rows have none.
func TestRoundTrip(t *testing.T) {
	for _, f := range Formats {
		t.Run(string(f), func(t *testing.T) {
			rows := awkward()
			if f == CSV {
				rows[2].Value = bytes.ReplaceAll(rows[2].Value, []byte("\r\n"), []byte("\n"))
			}
			same(t, roundTrip(t, Config{Format: f}, rows), rows)
			if f == CSV || f == Parquet {
				same(t, roundTrip(t, Config{Format: f, KeyColumn: "id", ValueColumn: "doc"}, rows), rows)
				same(t, roundTrip(t, Config{Format: f, KeyColumn: "z", ValueColumn: "a"}, rows), rows)
			}
		})
	}
}

func TestTSVEscapes(t *testing.T) {
	in := "plain\tvalue\twith raw tab\r\n" +
		`k\tx` + "\t" + `a\nb\\c\x00\xFF\r` + "\n" +
		"last\t"
	same(t, readAll(t, strings.NewReader(in), Config{Format: TSV}), []tablets.Entry{
		{Key: []byte("plain"), Value: []byte("value\twith raw tab")},
		{Key: []byte("k\tx"), Value: []byte("a\nb\\c\x00\xff\r")},
		{Key: []byte("last"), Value: []byte{}},
	})
	var buf bytes.Buffer
	w := NewTSVWriter(&buf)
	_ = w.Write([]byte("k\tx"), []byte("a\nb\\c\x00\xff\r\x7f"))
	_ = w.Close()
	if got, want := buf.String(), `k\tx`+"\t"+`a\nb\\c\x00`+"\xff"+`\r\x7f`+"\n"; got != want {
		t.Fatalf("wrote %q, want %q", got, want)
	}
}

func TestCSV(t *testing.T) {
	in := "key,value\n" +
		"a,\"x, \"\"quoted\"\"\nand a newline\"\n" +
		"b,plain\n"
	same(t, readAll(t, strings.NewReader(in), Config{Format: CSV}), []tablets.Entry{
		{Key: []byte("a"), Value: []byte("x, \"quoted\"\nand a newline")},
		{Key: []byte("b"), Value: []byte("plain")},
	})
	// No header: the first record is a row.
	same(t, readAll(t, strings.NewReader("k,v\n"), Config{Format: CSV}), []tablets.Entry{{Key: []byte("k"), Value: []byte("v")}})
	// Columns by name.
	in = "n,doc,id\n1,\"d,1\",x\n2,d2,y\n"
	same(t, readAll(t, strings.NewReader(in), Config{Format: CSV, KeyColumn: "id", ValueColumn: "doc"}), []tablets.Entry{
		{Key: []byte("x"), Value: []byte("d,1")},
		{Key: []byte("y"), Value: []byte("d2")},
	})
}

func TestJSONL(t *testing.T) {
	in := `{"key":"a","value":"text \u00e9 \"q\""}` + "\n" +
		`{"key_b64":"AP8=","value_b64":""}` + "\n" +
		`{"value":"v","key":"k"}`
	same(t, readAll(t, strings.NewReader(in), Config{Format: JSONL}), []tablets.Entry{
		{Key: []byte("a"), Value: []byte("text é \"q\"")},
		{Key: []byte{0, 0xff}, Value: []byte{}},
		{Key: []byte("k"), Value: []byte("v")},
	})
}

// TestBadInput: every bad row is an ErrBadInput naming its line.
func TestBadInput(t *testing.T) {
	cases := []struct {
		f    Format
		in   string
		want string
	}{
		{TSV, "a\tb\n\nc\td\n", "line 2: empty line"},
		{TSV, "a\tb\nno tab\n", "line 2: no tab"},
		{TSV, "a\tb\n\tx\n", "line 2: empty key"},
		{TSV, "a\tb\nk\tbad \\q\n", `line 2: value: unknown escape \q at byte 4`},
		{TSV, "a\tb\nk\\x4\tv\n", `line 2: key: \x at byte 1 needs two hex digits`},
		{TSV, "k\\\tv\n", "line 1: key: backslash at the end"},
		{CSV, "a,b\nc,d,e\n", "line 2: 3 fields, want 2"},
		{CSV, "a,b\n\"c,d\n", "line 2: extraneous or missing \" in quoted-field"},
		{CSV, "x,y\n", `key column "key" is not in the header ["x" "y"]`},
		{JSONL, "{\"key\":\"a\",\"value\":\"b\"}\n{\"key\":\"a\"}\n", "line 2: no value"},
		{JSONL, "{\"key\":\"a\",\"key_b64\":\"YQ==\",\"value\":\"\"}\n", `line 1: both "key" and "key_b64"`},
		{JSONL, "{\"key\":\"a\",\"value\":\"b\",\"extra\":1}\n", `line 1: json: unknown field "extra"`},
		{JSONL, "{\"key\":\"\xff\",\"value\":\"b\"}\n", "line 1: not valid UTF-8"},
		{JSONL, "{\"key_b64\":\"!!\",\"value\":\"b\"}\n", "line 1: key_b64: illegal base64"},
	}
	for _, tc := range cases {
		cfg := Config{Format: tc.f}
		if strings.HasPrefix(tc.in, "x,y") {
			cfg.KeyColumn = "key"
		}
		src, err := NewReader(strings.NewReader(tc.in), cfg)
		if err != nil {
			t.Fatal(err)
		}
		for err == nil {
			_, err = src.Next()
		}
		if !errors.Is(err, tablets.ErrBadInput) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: err = %v, want ErrBadInput with %q", tc.f, tc.in, err, tc.want)
		}
	}
}

func TestParquetFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rows.parquet")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := NewWriter(f, Config{Format: Parquet})
	want := tablets.GenerateRows(5000)
	for _, r := range want {
		if err := w.Write(r.Key, r.Value); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if ForPath(path) != Parquet {
		t.Fatalf("ForPath(%s) = %s", path, ForPath(path))
	}
	in, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	same(t, readAll(t, in, Config{Format: ForPath(path)}), want)
	if _, err := NewReader(strings.NewReader("x"), Config{Format: Parquet, KeyColumn: "nope"}); err == nil {
		t.Fatal("a stream of no parquet file was accepted")
	}
	in2, _ := os.Open(path)
	defer in2.Close()
	if _, err := NewReader(in2, Config{Format: Parquet, KeyColumn: "nope"}); !errors.Is(err, tablets.ErrBadInput) || !strings.Contains(err.Error(), `no column "nope"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestParseAndValidate(t *testing.T) {
	for path, want := range map[string]Format{"-": TSV, "a.tsv": TSV, "a.CSV": CSV, "a.jsonl": JSONL, "x.ndjson": JSONL, "d.parquet": Parquet, "noext": TSV} {
		if got := ForPath(path); got != want {
			t.Errorf("ForPath(%q) = %s, want %s", path, got, want)
		}
	}
	for _, c := range []Config{{Format: "xml"}, {Format: TSV, KeyColumn: "k"}, {Format: CSV, KeyColumn: "value"}} {
		if err := c.Validate(); !errors.Is(err, ErrBadFormat) {
			t.Errorf("%+v: err = %v", c, err)
		}
	}
}
