package tablets

import "testing"

func TestKeyGeneration(t *testing.T) {
	for _, tc := range []struct {
		key, id string
		gen     uint64
		ok      bool
	}{
		{BlockKey(FileID("t", 7, 3, "ab12", 0), 5), "t.g7.t3.ab12", 7, true},
		{IndexKey(FileID("t", 12, 0, "ab12", 2)), "t.g12.t0.ab12.f2", 12, true},
		{BlockKey(FileID("t2", 1, 0, "ab12", 0), 0), "", 0, false}, // another table
		{"t.gx.t0.ab12.idx", "", 0, false},
		{"t.g5", "", 0, false},
	} {
		id, gen, ok := keyGeneration("t", tc.key)
		if id != tc.id || gen != tc.gen || ok != tc.ok {
			t.Errorf("keyGeneration(t, %q) = %q, %d, %v; want %q, %d, %v", tc.key, id, gen, ok, tc.id, tc.gen, tc.ok)
		}
	}
}
