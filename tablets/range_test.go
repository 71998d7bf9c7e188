package tablets

import (
	"bytes"
	"errors"
	"testing"
)

func k(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

func rg(start, end string) Range { return Range{Start: k(start), End: k(end)} }

func TestRangeContains(t *testing.T) {
	tests := []struct {
		r    Range
		key  string
		want bool
	}{
		{rg("", ""), "a", true},
		{rg("", ""), "\x00", true},
		{rg("b", ""), "a", false},
		{rg("b", ""), "b", true},
		{rg("b", ""), "b\x00", true},
		{rg("", "b"), "b", false},
		{rg("", "b"), "a\xff", true},
		{rg("b", "d"), "c", true},
		{rg("b", "d"), "d", false},
		{rg("b", "b"), "b", false},
		{rg("d", "b"), "c", false},
		{Range{Start: []byte{}, End: []byte{}}, "x", true}, // empty slices are open
		{Range{Start: []byte{0x00}, End: []byte{0xff}}, "\x00", true},
		{Range{Start: []byte{0x00}, End: []byte{0xff}}, "\xff", false},
		{Range{Start: []byte{0x00}, End: []byte{0xff}}, "\xfe\xff", true},
	}
	for _, tt := range tests {
		if got := tt.r.Contains([]byte(tt.key)); got != tt.want {
			t.Errorf("%v.Contains(%q) = %v, want %v", tt.r, tt.key, got, tt.want)
		}
	}
}

func TestRangeEmptyValidate(t *testing.T) {
	tests := []struct {
		r       Range
		empty   bool
		invalid bool
	}{
		{rg("", ""), false, false},
		{rg("a", ""), false, false},
		{rg("", "a"), false, false},
		{rg("a", "b"), false, false},
		{rg("a", "a"), true, false},
		{rg("b", "a"), true, true},
		{rg("a", "a\x00"), false, false},
		{Range{Start: []byte{0xff}, End: []byte{0x00}}, true, true},
	}
	for _, tt := range tests {
		if got := tt.r.Empty(); got != tt.empty {
			t.Errorf("%v.Empty() = %v, want %v", tt.r, got, tt.empty)
		}
		err := tt.r.Validate()
		if (err != nil) != tt.invalid {
			t.Errorf("%v.Validate() = %v, want invalid=%v", tt.r, err, tt.invalid)
		}
		if err != nil && !errors.Is(err, ErrBadRange) {
			t.Errorf("%v.Validate() = %v, want ErrBadRange", tt.r, err)
		}
	}
}

func TestRangeIntersect(t *testing.T) {
	tests := []struct {
		a, b, want Range
		empty      bool
	}{
		{rg("", ""), rg("", ""), rg("", ""), false},
		{rg("", ""), rg("b", "d"), rg("b", "d"), false},
		{rg("b", "d"), rg("", ""), rg("b", "d"), false},
		{rg("a", "c"), rg("b", "d"), rg("b", "c"), false},
		{rg("b", "d"), rg("a", "c"), rg("b", "c"), false},
		{rg("a", ""), rg("", "c"), rg("a", "c"), false},
		{rg("a", "b"), rg("c", "d"), rg("c", "b"), true},
		{rg("a", "b"), rg("b", "c"), rg("b", "b"), true},
		{rg("a", "z"), rg("m", "m"), rg("m", "m"), true},
	}
	for _, tt := range tests {
		got := tt.a.Intersect(tt.b)
		if !bytes.Equal(got.Start, tt.want.Start) || !bytes.Equal(got.End, tt.want.End) {
			t.Errorf("%v ∩ %v = %v, want %v", tt.a, tt.b, got, tt.want)
		}
		if got.Empty() != tt.empty {
			t.Errorf("%v ∩ %v empty = %v, want %v", tt.a, tt.b, got.Empty(), tt.empty)
		}
	}
}

func TestRangeAfter(t *testing.T) {
	tests := []struct {
		r    Range
		key  string
		want Range
	}{
		{rg("", ""), "", rg("", "")},
		{rg("b", "d"), "", rg("b", "d")},
		{rg("", ""), "a", rg("a\x00", "")},
		{rg("b", "d"), "a", rg("b", "d")},
		{rg("b", "d"), "b", rg("b\x00", "d")},
		{rg("b", "d"), "c", rg("c\x00", "d")},
		{rg("b", "d"), "d", rg("d\x00", "d")}, // empty
		{rg("b", "d"), "e", rg("e\x00", "d")}, // empty
		{rg("b", ""), "b\xff", rg("b\xff\x00", "")},
	}
	for _, tt := range tests {
		got := tt.r.After(k(tt.key))
		if !bytes.Equal(got.Start, tt.want.Start) || !bytes.Equal(got.End, tt.want.End) {
			t.Errorf("%v.After(%q) = %v, want %v", tt.r, tt.key, got, tt.want)
		}
		// Property: got contains exactly the keys of r greater than key.
		for _, probe := range []string{"a", "b", "b\x00", "b\xff", "c", "c\x00", "d", "e", "e\x00"} {
			want := tt.r.Contains([]byte(probe)) && (tt.key == "" || probe > tt.key)
			if got.Contains([]byte(probe)) != want {
				t.Errorf("%v.After(%q).Contains(%q) = %v, want %v", tt.r, tt.key, probe, !want, want)
			}
		}
	}
	// After must not alias the caller's key.
	key := []byte("k")
	r := Range{}.After(key)
	key[0] = 'z'
	if string(r.Start) != "k\x00" {
		t.Errorf("After aliases its key: %q", r.Start)
	}
}

func TestRangeString(t *testing.T) {
	tests := []struct {
		r    Range
		want string
	}{
		{rg("", ""), "[-inf, +inf)"},
		{rg("a", "b"), "[a, b)"},
		{rg("a", ""), "[a, +inf)"},
		{Range{End: []byte{0x00, '\\', 0xff}}, `[-inf, \x00\\\xff)`},
	}
	for _, tt := range tests {
		if got := tt.r.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

func TestParseKey(t *testing.T) {
	tests := []struct {
		in   string
		want []byte
		bad  bool
	}{
		{"abc", []byte("abc"), false},
		{`a\\b`, []byte(`a\b`), false},
		{`\x00`, []byte{0}, false},
		{`\xff\xFE`, []byte{0xff, 0xfe}, false},
		{`row\x2f1`, []byte("row/1"), false},
		{"héllo", []byte("héllo"), false},
		{"a b~", []byte("a b~"), false},
		{"", nil, true},
		{`\`, nil, true},
		{`a\`, nil, true},
		{`\x`, nil, true},
		{`\x0`, nil, true},
		{`\xg0`, nil, true},
		{`\n`, nil, true},
		{"a\tb", nil, true},
		{"a\x7f", nil, true},
	}
	for _, tt := range tests {
		got, err := ParseKey(tt.in)
		if tt.bad {
			if !errors.Is(err, ErrBadKey) {
				t.Errorf("ParseKey(%q) = %q, %v; want ErrBadKey", tt.in, got, err)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, tt.want) {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestFormatKeyRoundTrip(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	keys := [][]byte{[]byte("a"), []byte(`\`), []byte(`\x00`), {0}, {0xff}, all, []byte("héllo\r\n")}
	for _, key := range keys {
		s := FormatKey(key)
		for i := 0; i < len(s); i++ {
			if s[i] < 0x20 || s[i] >= 0x7f {
				t.Errorf("FormatKey(%q) = %q contains byte 0x%02x", key, s, s[i])
			}
		}
		back, err := ParseKey(s)
		if err != nil || !bytes.Equal(back, key) {
			t.Errorf("ParseKey(FormatKey(%q)) = %q, %v", key, back, err)
		}
	}
	if got := FormatKey([]byte{0x00, 'a', '\\', 0xff}); got != `\x00a\\\xff` {
		t.Errorf("FormatKey = %q", got)
	}
}

func TestParseRange(t *testing.T) {
	r, err := ParseRange("", "")
	if err != nil || len(r.Start) != 0 || len(r.End) != 0 {
		t.Fatalf("ParseRange open = %v, %v", r, err)
	}
	r, err = ParseRange(`a\x00`, "b")
	if err != nil || string(r.Start) != "a\x00" || string(r.End) != "b" {
		t.Fatalf("ParseRange = %v, %v", r, err)
	}
	if r, err = ParseRange("b", "b"); err != nil || !r.Empty() {
		t.Fatalf("ParseRange(b, b) = %v, %v; want valid empty", r, err)
	}
	if _, err := ParseRange("c", "b"); !errors.Is(err, ErrBadRange) {
		t.Errorf("ParseRange(c, b) err = %v, want ErrBadRange", err)
	}
	if _, err := ParseRange(`\q`, ""); !errors.Is(err, ErrBadKey) {
		t.Errorf("bad start err = %v, want ErrBadKey", err)
	}
	if _, err := ParseRange("", `\x`); !errors.Is(err, ErrBadKey) {
		t.Errorf("bad end err = %v, want ErrBadKey", err)
	}
}

func TestValidateTableName(t *testing.T) {
	good := []string{"a", "T_1-x", "0", string(bytes.Repeat([]byte("z"), 64))}
	bad := []string{"", "a.b", "a/b", "a b", "ü", string(bytes.Repeat([]byte("z"), 65)), "..", "a*"}
	for _, n := range good {
		if err := ValidateTableName(n); err != nil {
			t.Errorf("ValidateTableName(%q) = %v", n, err)
		}
	}
	for _, n := range bad {
		if err := ValidateTableName(n); !errors.Is(err, ErrBadName) {
			t.Errorf("ValidateTableName(%q) = %v, want ErrBadName", n, err)
		}
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"", "a", `\\`, `\x00`, `\xFF`, `\x`, `\x0`, `\`, `a\qb`, "h\xc3\xa9", "\x00", "\t", `row\x2f000000001`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		key, err := ParseKey(s)
		if err != nil {
			if !errors.Is(err, ErrBadKey) {
				t.Fatalf("ParseKey(%q) error %v does not wrap ErrBadKey", s, err)
			}
			return
		}
		if len(key) == 0 {
			t.Fatalf("ParseKey(%q) returned an empty key", s)
		}
		f := FormatKey(key)
		back, err := ParseKey(f)
		if err != nil || !bytes.Equal(back, key) {
			t.Fatalf("ParseKey(FormatKey(ParseKey(%q))) = %q, %v; want %q", s, back, err, key)
		}
		if FormatKey(back) != f {
			t.Fatalf("FormatKey not canonical for %q", s)
		}
		// Formatting raw bytes must always parse back.
		if raw := []byte(s); len(raw) > 0 {
			back, err := ParseKey(FormatKey(raw))
			if err != nil || !bytes.Equal(back, raw) {
				t.Fatalf("ParseKey(FormatKey(%q)) = %q, %v", raw, back, err)
			}
		}
	})
}

func FuzzParseRange(f *testing.F) {
	f.Add("", "")
	f.Add("a", "b")
	f.Add("b", "a")
	f.Add("a", "a")
	f.Add(`\x00`, `\xff`)
	f.Add(`\x`, "")
	f.Add("", `\\`)
	f.Fuzz(func(t *testing.T, start, end string) {
		r, err := ParseRange(start, end)
		if err != nil {
			if !errors.Is(err, ErrBadKey) && !errors.Is(err, ErrBadRange) {
				t.Fatalf("ParseRange(%q, %q) error %v wraps neither ErrBadKey nor ErrBadRange", start, end, err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("ParseRange returned an invalid range %v: %v", r, err)
		}
		_ = r.String()
		var s, e string
		if len(r.Start) > 0 {
			s = FormatKey(r.Start)
		}
		if len(r.End) > 0 {
			e = FormatKey(r.End)
		}
		r2, err := ParseRange(s, e)
		if err != nil || !bytes.Equal(r2.Start, r.Start) || !bytes.Equal(r2.End, r.End) {
			t.Fatalf("round trip of %v = %v, %v", r, r2, err)
		}
	})
}
