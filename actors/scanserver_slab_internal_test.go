package actors

import "testing"

func TestSlabRows(t *testing.T) {
	for _, c := range []struct {
		have, batchRows int
		limit, read     uint64
		want            int
	}{
		{0, 500, 0, 0, 8},       // first slab of a batch
		{8, 500, 0, 8, 8},       // doubles: 8 rows held, 8 more
		{64, 500, 0, 64, 64},    // 64 held, 64 more
		{256, 500, 0, 256, 244}, // never past the batch
		{0, 3, 0, 0, 3},         // small batches
		{0, 500, 1, 0, 1},       // a limit of one row
		{8, 500, 10, 8, 2},      // two rows left of the limit
		{0, 500, 5, 5, 1},       // the limit reached (the loop stops first)
	} {
		if got := slabRows(c.have, c.batchRows, c.limit, c.read); got != c.want {
			t.Errorf("slabRows(%d, %d, %d, %d) = %d, want %d", c.have, c.batchRows, c.limit, c.read, got, c.want)
		}
	}
}
