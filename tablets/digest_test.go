package tablets

import "testing"

func TestRowDigestDetectsChanges(t *testing.T) {
	rows := [][2]string{{"a", "1"}, {"b", "2"}, {"c", "3"}}
	sum := func(rs [][2]string) uint64 {
		var d RowDigest
		for _, r := range rs {
			d.Add([]byte(r[0]), []byte(r[1]))
		}
		return d.Sum()
	}
	base := sum(rows)
	var zero RowDigest
	if zero.Sum() != 0 || zero.Rows() != 0 {
		t.Fatalf("zero digest = %x/%d, want 0/0", zero.Sum(), zero.Rows())
	}
	for name, rs := range map[string][][2]string{
		"missing row":    {{"a", "1"}, {"c", "3"}},
		"repeated row":   {{"a", "1"}, {"b", "2"}, {"b", "2"}, {"c", "3"}},
		"swapped rows":   {{"b", "2"}, {"a", "1"}, {"c", "3"}},
		"changed value":  {{"a", "1"}, {"b", "X"}, {"c", "3"}},
		"moved boundary": {{"a", "1b"}, {"", "2"}, {"c", "3"}},
	} {
		if sum(rs) == base {
			t.Errorf("%s: same digest %x as the original stream", name, base)
		}
	}
	// The running sum after a prefix is the sum of that prefix: a batch's
	// checksum is comparable mid-stream.
	var d RowDigest
	d.Add([]byte("a"), []byte("1"))
	if d.Sum() != sum(rows[:1]) || d.Rows() != 1 {
		t.Fatalf("prefix sum differs")
	}
	d.Add([]byte("b"), []byte("2"))
	d.Add([]byte("c"), []byte("3"))
	if d.Sum() != base || d.Rows() != 3 {
		t.Fatalf("sum after all rows = %x, want %x", d.Sum(), base)
	}
}

func BenchmarkRowDigestAdd100B(b *testing.B) {
	key, value := make([]byte, 20), make([]byte, 80)
	var d RowDigest
	b.SetBytes(100)
	for b.Loop() {
		d.Add(key, value)
	}
}
