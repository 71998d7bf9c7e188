package tablets

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rowSlice is a RowSource over entries; row i is on line i+1 unless
// noLines.
type rowSlice struct {
	rows    []Entry
	i       int
	noLines bool
}

func (s *rowSlice) Next() (Row, error) {
	if s.i >= len(s.rows) {
		return Row{}, io.EOF
	}
	s.i++
	line := int64(s.i)
	if s.noLines {
		line = 0
	}
	return Row{Key: s.rows[s.i-1].Key, Value: s.rows[s.i-1].Value, Line: line}, nil
}

func shuffled(rows []Entry, seed uint64) []Entry {
	out := append([]Entry(nil), rows...)
	rand.New(rand.NewPCG(seed, seed)).Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// TestIngestRowsSpillsAndMerges ingests unsorted rows through a sort
// buffer far smaller than the input: more runs than one merge takes, so
// runs are merged in two levels. The table reads back exactly, the runs
// were on disk while the tablets were written, and none is left.
func TestIngestRowsSpillsAndMerges(t *testing.T) {
	ctx := context.Background()
	store, ms := newDirStores(t)
	truth := GenerateRows(20000)
	tmp := t.TempDir()
	cfg := testIngestConfig(3)
	cfg.Tablets = 5
	cfg.BlockSize = 2048
	cfg.SortBuffer = 8 << 10 // about 75 rows a run: 267 runs
	cfg.TempDir = tmp
	runs := -1
	cfg.Progress = func(stage string, done, total int64) {
		if stage == "write" && runs < 0 {
			dirs, _ := filepath.Glob(filepath.Join(tmp, "scanplane-ingest-*", "run*"))
			runs = len(dirs)
		}
	}
	tm, err := IngestRows(ctx, store, ms, "big", &rowSlice{rows: shuffled(truth, 1)}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if runs < 2 {
		t.Fatalf("%d runs on disk while writing, want the input spilled", runs)
	}
	checkMeta(t, tm, "big", 1, len(truth))
	for i, tab := range tm.GetTablets() {
		if tab.GetRows() != 4000 {
			t.Errorf("tablet %d has %d rows, want 4000", i, tab.GetRows())
		}
	}
	sameEntries(t, readTable(t, store, tm), truth)
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("left in TempDir: %v", left)
	}
}

// TestIngestRowsInMemory: input that fits the buffer never touches the
// temp directory; sorted and unsorted input read back alike.
func TestIngestRowsInMemory(t *testing.T) {
	ctx := context.Background()
	truth := GenerateRows(3000)
	for name, in := range map[string][]Entry{"sorted": truth, "unsorted": shuffled(truth, 2)} {
		t.Run(name, func(t *testing.T) {
			store, ms := newDirStores(t)
			tmp := t.TempDir()
			cfg := testIngestConfig(4)
			cfg.Tablets = 3
			cfg.TempDir = tmp
			spilled := false
			cfg.Progress = func(stage string, _, _ int64) {
				if stage == "write" {
					d, _ := os.ReadDir(tmp)
					spilled = spilled || len(d) > 0
				}
			}
			tm, err := IngestRows(ctx, store, ms, "t", &rowSlice{rows: in}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if spilled {
				t.Error("rows that fit the buffer were spilled")
			}
			sameEntries(t, readTable(t, store, tm), truth)
		})
	}
}

// TestIngestRowsBadInput: bad rows are named by line, both lines for a
// duplicate, whether it is found while reading (sorted input), in the
// sort of a buffer, or in the merge of runs; nothing is written.
func TestIngestRowsBadInput(t *testing.T) {
	ctx := context.Background()
	rows := GenerateRows(2000)
	dupSorted := append(append(append([]Entry(nil), rows[:1001]...), rows[1000]), rows[1001:]...)
	dupShuffled := shuffled(rows, 5)
	// Row 1500's key again on line 1: it is on lines 1 and 1501.
	dupShuffled = append([]Entry{{Key: dupShuffled[1499].Key, Value: []byte("again")}}, dupShuffled...)
	long := append([]Entry(nil), rows[:10]...)
	long[6] = Entry{Key: make([]byte, MaxKeyLen+1)}
	empty := append([]Entry(nil), rows[:10]...)
	empty[3] = Entry{Value: []byte("v")}
	cases := []struct {
		name    string
		rows    []Entry
		buffer  int64
		noLines bool
		want    string
	}{
		{"duplicate in sorted input", dupSorted, 0, false, "line 1002 repeats key row000001000 of line 1001"},
		{"duplicate in one buffer", dupShuffled, 0, false, "line 1501 repeats key " + string(dupShuffled[0].Key) + " of line 1"},
		{"duplicate across runs", dupShuffled, 4 << 10, false, "line 1501 repeats key " + string(dupShuffled[0].Key) + " of line 1"},
		{"no lines", dupSorted, 0, true, "row 1002 repeats key row000001000 of row 1001"},
		{"long key", long, 0, false, "line 7: key is 16385 bytes"},
		{"empty key", empty, 0, false, "line 4 has an empty key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store, ms := newDirStores(t)
			cfg := testIngestConfig(6)
			cfg.SortBuffer = tc.buffer
			cfg.TempDir = t.TempDir()
			_, err := IngestRows(ctx, store, ms, "bad", &rowSlice{rows: tc.rows, noLines: tc.noLines}, cfg)
			if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrBadInput with %q", err, tc.want)
			}
			if keys := objectsOf(t, store, ""); len(keys) != 0 {
				t.Fatalf("objects written: %d", len(keys))
			}
			if left, _ := os.ReadDir(cfg.TempDir); len(left) != 0 {
				t.Fatalf("left in TempDir: %v", left)
			}
		})
	}
}

// errAfter fails after n rows.
type errAfter struct {
	rowSlice
	n int
}

func (e *errAfter) Next() (Row, error) {
	if e.i == e.n {
		return Row{}, errors.New("input broke")
	}
	return e.rowSlice.Next()
}

func TestIngestRowsSourceError(t *testing.T) {
	store, ms := newDirStores(t)
	cfg := testIngestConfig(8)
	cfg.TempDir = t.TempDir()
	_, err := IngestRows(context.Background(), store, ms, "t", &errAfter{rowSlice{rows: GenerateRows(100)}, 40}, cfg)
	if err == nil || !strings.Contains(err.Error(), "reading row 41: input broke") {
		t.Fatalf("err = %v", err)
	}
	if cur, _ := ms.Current(context.Background(), "t"); cur != 0 {
		t.Fatalf("current = %d", cur)
	}
}

func TestIngestSorted(t *testing.T) {
	ctx := context.Background()
	store, ms := newDirStores(t)
	cfg := testIngestConfig(9)
	cfg.Tablets = 4
	cfg.BlockSize = 1024
	tm, err := IngestSorted(ctx, store, ms, "s", &GeneratedRows{N: 5000}, 5000, cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkMeta(t, tm, "s", 1, 5000)
	sameEntries(t, readTable(t, store, tm), GenerateRows(5000))
	before := len(objectsOf(t, store, ""))

	unsorted := GenerateRows(3000)
	unsorted[2000], unsorted[2001] = unsorted[2001], unsorted[2000]
	for _, tc := range []struct {
		src  RowSource
		n    int64
		want string
	}{
		{&rowSlice{rows: unsorted}, 3000, "line 2002: key row000002000 is not after key row000002001 of line 2001 (input not sorted)"},
		{&GeneratedRows{N: 3000}, 3001, "input ended after 3000 rows, 3001 expected"},
		{&GeneratedRows{N: 3000}, 2999, "line 3000 is more than the 2999 rows expected"},
	} {
		_, err := IngestSorted(ctx, store, ms, "s", tc.src, tc.n, cfg)
		if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v, want %q", err, tc.want)
		}
		if n := len(objectsOf(t, store, "")); n != before {
			t.Errorf("%d objects after a failed ingest, want %d", n, before)
		}
	}
}
