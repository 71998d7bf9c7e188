package loadtest

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/scanplane/scanplane/tablets"
)

func rowKey(i int) []byte   { return tablets.RowKey(i) }
func rowValue(i int) []byte { return tablets.RowValue(i) }

// TestVerifierCatchesWrongRows: the exact rows pass; a changed value, a
// changed key, a missing row, an extra row, a duplicated row in place of
// another, and two rows with swapped values are each caught.
func TestVerifierCatchesWrongRows(t *testing.T) {
	v := NewVerifier(1000)
	const lo, hi = 100, 200
	type row struct{ k, v []byte }
	exact := func() []row {
		var rs []row
		for i := lo; i < hi; i++ {
			rs = append(rs, row{rowKey(i), rowValue(i)})
		}
		return rs
	}
	tally := func(rs []row) Tally {
		var t Tally
		for _, r := range rs {
			t.Add(r.k, r.v)
		}
		return t
	}
	if err := v.Check(lo, hi, tally(exact())); err != nil {
		t.Fatalf("exact rows rejected: %v", err)
	}
	cases := map[string]func([]row) []row{
		"value changed": func(rs []row) []row {
			rs[17].v = bytes.Clone(rs[17].v)
			rs[17].v[3] ^= 1
			return rs
		},
		"key changed": func(rs []row) []row { rs[5].k = []byte("row000000105x"); return rs },
		"row missing": func(rs []row) []row { return append(rs[:40], rs[41:]...) },
		"row extra":   func(rs []row) []row { return append(rs, row{rowKey(hi), rowValue(hi)}) },
		"duplicate instead of another": func(rs []row) []row {
			rs[9] = rs[8]
			return rs
		},
		"values swapped": func(rs []row) []row {
			rs[2].v, rs[3].v = rs[3].v, rs[2].v
			return rs
		},
		"row from elsewhere": func(rs []row) []row { rs[0] = row{rowKey(700), rowValue(700)}; return rs },
		"empty":              func(rs []row) []row { return nil },
	}
	for name, mutate := range cases {
		err := v.Check(lo, hi, tally(mutate(exact())))
		if !errors.Is(err, ErrWrong) {
			t.Errorf("%s: Check = %v, want ErrWrong", name, err)
		}
	}
	if err := v.Check(990, 1001, Tally{}); !errors.Is(err, ErrWrong) {
		t.Errorf("range beyond the truth: %v", err)
	}
	if got := v.Expect(0, 0); got != (Tally{}) {
		t.Errorf("empty range expects %+v", got)
	}
}

// TestRecorderCountsWrong: a wrong scan counts in wrong (and is sampled),
// in the measurement window as in the warm-up; errors are counted and sampled.
func TestRecorderCountsWrong(t *testing.T) {
	v := NewVerifier(10)
	var bad Tally
	bad.Add(rowKey(0), []byte("not the value"))
	wrong := v.Check(0, 1, bad)
	if wrong == nil {
		t.Fatal("wrong row not caught")
	}
	r := newRecorder(fixedStart, 10e9, 1e9)
	r.add(outcome{sched: fixedStart.Add(1), latency: 1e6, rows: 1, wrong: wrong})
	r.add(outcome{sched: fixedStart.Add(-1), latency: 1e6, rows: 1, wrong: wrong})
	r.add(outcome{sched: fixedStart.Add(2), latency: 1e6, err: errors.New("boom")})
	r.add(outcome{sched: fixedStart.Add(3), latency: 1e6, rows: 1})
	if r.wrong != 1 || r.wWrong != 1 || r.scans != 2 || r.errors != 1 || len(r.wrongs) != 2 {
		t.Fatalf("wrong %d, warm-up wrong %d, scans %d, errors %d, samples %q", r.wrong, r.wWrong, r.scans, r.errors, r.wrongs)
	}
	if s := r.errorSamples(); len(s) != 1 || s[0].Message != "boom" || s[0].Count != 1 {
		t.Fatalf("error samples %+v", s)
	}
}

// TestRecorderLongestGap: the longest stretch of the window without a
// completed right scan, bounded by the window's edges; failed and wrong
// scans and completions outside the window do not close a gap, and the
// order in which outcomes arrive does not matter.
func TestRecorderLongestGap(t *testing.T) {
	ms := time.Millisecond
	at := func(d time.Duration) time.Time { return fixedStart.Add(d) }
	r := newRecorder(fixedStart, 10*time.Second, time.Second)
	if gap, from := r.longestGap(); gap != 10*time.Second || from != 0 {
		t.Fatalf("empty window: gap %v at %v, want the whole window", gap, from)
	}
	v := NewVerifier(10)
	var bad Tally
	bad.Add(rowKey(0), []byte("x"))
	wrong := v.Check(0, 1, bad)
	for _, o := range []outcome{
		{sched: at(0), done: at(500 * ms), rows: 1},
		{sched: at(0), done: at(4500 * ms), rows: 1}, // arrives before the 1 s one
		{sched: at(0), done: at(1000 * ms), rows: 1},
		{sched: at(0), done: at(2000 * ms), err: errors.New("failed")}, // no completion
		{sched: at(0), done: at(2500 * ms), rows: 1, wrong: wrong},     // no completion
		{sched: at(-ms), done: at(5000 * ms), rows: 1},                 // due in warm-up: counts
		{sched: at(0), done: at(11 * time.Second), rows: 1},            // after the window
		{sched: at(0), done: at(8000 * ms), rows: 1},
	} {
		r.add(o)
	}
	// Completions at 0.5, 1, 4.5, 5, 8 s; edges 0 and 10 s: the longest
	// gap is 1 → 4.5 s.
	if gap, from := r.longestGap(); gap != 3500*ms || from != time.Second {
		t.Fatalf("gap %v at %v, want 3.5s at 1s", gap, from)
	}
	r.add(outcome{sched: at(0), done: at(2 * time.Second), rows: 1})
	// Now 5 → 8 s is the longest; then 8 → 10 s, to the window's end.
	if gap, from := r.longestGap(); gap != 3*time.Second || from != 5*time.Second {
		t.Fatalf("gap %v at %v, want 3s at 5s", gap, from)
	}
	r.add(outcome{sched: at(0), done: at(6 * time.Second), rows: 1})
	r.add(outcome{sched: at(0), done: at(7 * time.Second), rows: 1})
	r.add(outcome{sched: at(0), done: at(3 * time.Second), rows: 1})
	if gap, from := r.longestGap(); gap != 2*time.Second || from != 8*time.Second {
		t.Fatalf("gap %v at %v, want 2s at 8s (to the window's end)", gap, from)
	}
}
