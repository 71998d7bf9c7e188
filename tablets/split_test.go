package tablets

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func splitsOf(s ...string) [][]byte {
	out := make([][]byte, len(s))
	for i, x := range s {
		out[i] = []byte(x)
	}
	return out
}

func TestValidateSplits(t *testing.T) {
	good := [][][]byte{nil, splitsOf("a"), splitsOf("a", "b", "c"), {{0x00}, {0x00, 0x00}, {0xff}}}
	for _, s := range good {
		if err := ValidateSplits(s); err != nil {
			t.Errorf("ValidateSplits(%q) = %v", s, err)
		}
	}
	bad := [][][]byte{{{}}, splitsOf("b", "a"), splitsOf("a", "a"), {[]byte("a"), nil}, {make([]byte, MaxKeyLen+1)}}
	for _, s := range bad {
		if err := ValidateSplits(s); !errors.Is(err, ErrBadSplits) {
			t.Errorf("ValidateSplits(%q) = %v, want ErrBadSplits", s, err)
		}
	}
}

func TestTabletRangeAndFor(t *testing.T) {
	splits := splitsOf("d", "m", "t")
	if n := TabletCount(splits); n != 4 {
		t.Fatalf("TabletCount = %d", n)
	}
	if n := TabletCount(nil); n != 1 {
		t.Fatalf("TabletCount(nil) = %d", n)
	}
	ranges := []Range{rg("", "d"), rg("d", "m"), rg("m", "t"), rg("t", "")}
	for i, want := range ranges {
		got := TabletRange(splits, i)
		if !bytes.Equal(got.Start, want.Start) || !bytes.Equal(got.End, want.End) {
			t.Errorf("TabletRange(%d) = %v, want %v", i, got, want)
		}
	}
	for _, i := range []int{-1, 4, 100} {
		if r := TabletRange(splits, i); !r.Empty() {
			t.Errorf("TabletRange(%d) = %v, want empty", i, r)
		}
	}
	if r := TabletRange(nil, 0); len(r.Start) != 0 || len(r.End) != 0 {
		t.Errorf("single tablet range = %v", r)
	}
	tests := []struct {
		key  string
		want int
	}{
		{"\x00", 0}, {"a", 0}, {"c\xff", 0}, {"d", 1}, {"d\x00", 1}, {"l", 1},
		{"m", 2}, {"s", 2}, {"t", 3}, {"zzz", 3}, {"\xff\xff", 3},
	}
	for _, tt := range tests {
		if got := TabletFor(splits, []byte(tt.key)); got != tt.want {
			t.Errorf("TabletFor(%q) = %d, want %d", tt.key, got, tt.want)
		}
		if !TabletRange(splits, tt.want).Contains([]byte(tt.key)) {
			t.Errorf("TabletRange(%d) does not contain %q", tt.want, tt.key)
		}
	}
	if got := TabletFor(nil, []byte("x")); got != 0 {
		t.Errorf("TabletFor(no splits) = %d", got)
	}
	bin := [][]byte{{0x00}, {0x7f}, {0xff}}
	binTests := []struct {
		key  []byte
		want int
	}{
		{[]byte{0x00}, 1}, {[]byte{0x00, 0x00}, 1}, {[]byte{0x7e, 0xff}, 1},
		{[]byte{0x7f}, 2}, {[]byte{0xfe}, 2}, {[]byte{0xff}, 3}, {[]byte{0xff, 0x00}, 3},
	}
	for _, tt := range binTests {
		if got := TabletFor(bin, tt.key); got != tt.want {
			t.Errorf("TabletFor(bin, %x) = %d, want %d", tt.key, got, tt.want)
		}
	}
}

type wantPiece struct {
	tablet     int
	start, end string
}

func TestSplitRange(t *testing.T) {
	splits := splitsOf("d", "m", "t")
	tests := []struct {
		name   string
		splits [][]byte
		r      Range
		want   []wantPiece
	}{
		{"all", splits, rg("", ""), []wantPiece{{0, "", "d"}, {1, "d", "m"}, {2, "m", "t"}, {3, "t", ""}}},
		{"open start", splits, rg("", "e"), []wantPiece{{0, "", "d"}, {1, "d", "e"}}},
		{"open end", splits, rg("n", ""), []wantPiece{{2, "n", "t"}, {3, "t", ""}}},
		{"within one", splits, rg("e", "f"), []wantPiece{{1, "e", "f"}}},
		{"within first", splits, rg("a", "b"), []wantPiece{{0, "a", "b"}}},
		{"within last", splits, rg("u", "v"), []wantPiece{{3, "u", "v"}}},
		{"start at split", splits, rg("d", "e"), []wantPiece{{1, "d", "e"}}},
		{"end at split", splits, rg("e", "m"), []wantPiece{{1, "e", "m"}}},
		{"exactly a tablet", splits, rg("d", "m"), []wantPiece{{1, "d", "m"}}},
		{"split to split", splits, rg("d", "t"), []wantPiece{{1, "d", "m"}, {2, "m", "t"}}},
		{"end just after split", splits, rg("a", "d\x00"), []wantPiece{{0, "a", "d"}, {1, "d", "d\x00"}}},
		{"end at first split", splits, rg("", "d"), []wantPiece{{0, "", "d"}}},
		{"start at last split", splits, rg("t", ""), []wantPiece{{3, "t", ""}}},
		{"spanning all bounded", splits, rg("a", "z"), []wantPiece{{0, "a", "d"}, {1, "d", "m"}, {2, "m", "t"}, {3, "t", "z"}}},
		{"empty start==end", splits, rg("e", "e"), nil},
		{"empty start==end at split", splits, rg("m", "m"), nil},
		{"inverted", splits, rg("z", "a"), nil},
		{"single tablet open", nil, rg("", ""), []wantPiece{{0, "", ""}}},
		{"single tablet bounded", nil, rg("a", "b"), []wantPiece{{0, "a", "b"}}},
		{"single tablet empty", nil, rg("b", "b"), nil},
		{"binary", [][]byte{{0x00}, {0xff}}, Range{Start: []byte{0x00}, End: []byte{0xff, 0x00}},
			[]wantPiece{{1, "\x00", "\xff"}, {2, "\xff", "\xff\x00"}}},
		{"binary below first", [][]byte{{0x00, 0x01}, {0xff}}, Range{End: []byte{0x00, 0x01}},
			[]wantPiece{{0, "", "\x00\x01"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SplitRange(tt.splits, tt.r)
			if len(got) != len(tt.want) {
				t.Fatalf("SplitRange(%v) = %v, want %v", tt.r, got, tt.want)
			}
			for i, w := range tt.want {
				g := got[i]
				if g.Tablet != w.tablet || !bytes.Equal(g.Range.Start, k(w.start)) || !bytes.Equal(g.Range.End, k(w.end)) {
					t.Errorf("piece %d = {%d %v}, want {%d %v}", i, g.Tablet, g.Range, w.tablet, rg(w.start, w.end))
				}
			}
		})
	}
}

// TestSplitRangeProperty checks SplitRange against brute force over a small
// binary alphabet: every key of the range is in exactly one piece, that
// piece's tablet is TabletFor(key), and pieces are non-empty and ordered.
func TestSplitRangeProperty(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte{0x00, 0x01, 'a', 0xff}
	var universe [][]byte
	var gen func(prefix []byte, depth int)
	gen = func(prefix []byte, depth int) {
		if len(prefix) > 0 {
			universe = append(universe, bytes.Clone(prefix))
		}
		if depth == 0 {
			return
		}
		for _, c := range alphabet {
			gen(append(prefix, c), depth-1)
		}
	}
	gen(nil, 3)
	pick := func() []byte {
		if rnd.IntN(5) == 0 {
			return nil
		}
		return universe[rnd.IntN(len(universe))]
	}
	for iter := 0; iter < 2000; iter++ {
		// Random valid splits.
		set := map[string]bool{}
		for n := rnd.IntN(5); n > 0; n-- {
			set[string(universe[rnd.IntN(len(universe))])] = true
		}
		var splits [][]byte
		for s := range set {
			splits = append(splits, []byte(s))
		}
		slices.SortFunc(splits, bytes.Compare)
		r := Range{Start: pick(), End: pick()}
		pieces := SplitRange(splits, r)
		for i, p := range pieces {
			if p.Range.Empty() {
				t.Fatalf("empty piece %v", p)
			}
			if i > 0 && p.Tablet <= pieces[i-1].Tablet {
				t.Fatalf("pieces out of order: %v", pieces)
			}
		}
		for _, key := range universe {
			var in []int
			for _, p := range pieces {
				if p.Range.Contains(key) {
					in = append(in, p.Tablet)
				}
			}
			want := r.Contains(key) && !r.Empty()
			if want {
				if len(in) != 1 || in[0] != TabletFor(splits, key) {
					t.Fatalf("splits %q range %v key %x: in pieces %v, want tablet %d", splits, r, key, in, TabletFor(splits, key))
				}
			} else if len(in) != 0 {
				t.Fatalf("splits %q range %v key %x: outside range but in pieces %v", splits, r, key, in)
			}
		}
	}
}

func ExampleSplitRange() {
	splits := [][]byte{[]byte("d"), []byte("m")}
	for _, p := range SplitRange(splits, Range{Start: []byte("b"), End: []byte("m")}) {
		fmt.Println(p.Tablet, p.Range)
	}
	// Output:
	// 0 [b, d)
	// 1 [d, m)
}
