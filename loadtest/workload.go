package loadtest

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/scanplane/scanplane/tablets"
)

// Op is one scan of the workload: rows [Lo, Hi) of the generated table,
// all inside tablet Tablet.
type Op struct {
	// Seq is the op's sequence number (the k of its schedule slot).
	Seq uint64
	// Tablet is the tablet index the scan reads.
	Tablet int
	// Lo, Hi: row indexes (tablets.RowKey) of the half-open range.
	Lo, Hi int
	// Full: the scan reads the whole tablet.
	Full bool
	// Hot: the op was redirected to the hot tablet (hot-tablet fault).
	Hot bool
}

// Range is the op's key range.
func (o Op) Range() tablets.Range {
	return tablets.Range{Start: tablets.RowKey(o.Lo), End: tablets.RowKey(o.Hi)}
}

// Workload turns sequence numbers into scans: a tablet by popularity
// (uniform, or Zipfian over a seeded permutation of the tablets so that the
// popular tablets are spread over the hosts, like YCSB's scrambled
// Zipfian), then either the whole tablet (FullTablet fraction) or a short
// scan of 1..ScanRows rows (at most the tablet's) at a uniformly chosen
// start among those where it fits in the tablet (YCSB workload E). Op(k) depends only on the seed and k, so every policy
// sees the same sequence of scans. A Workload is immutable and safe for
// concurrent use.
type Workload struct {
	bounds     []int // bounds[t] = first row of tablet t; bounds[len-1] = rows
	zipf       *Zipf
	perm       []int // popularity rank → tablet
	scanRows   int
	fullTablet float64
	hotTablet  int
	hotShare   float64
	seed       uint64
}

// WorkloadConfig configures NewWorkload.
type WorkloadConfig struct {
	// Rows in the table (rows are tablets.RowKey(0..Rows-1)).
	Rows int
	// Bounds: first row index of each tablet, ascending, Bounds[0] = 0,
	// plus Rows at the end (len = tablets + 1).
	Bounds []int
	// Zipf theta over tablets; 0 = uniform.
	Zipf float64
	// ScanRows: maximum rows of a short scan (uniform in 1..ScanRows).
	ScanRows int
	// FullTablet: fraction of scans that read a whole tablet.
	FullTablet float64
	// HotTablet and HotShare: during a hot-tablet fault, this share of
	// scans goes to this tablet.
	HotTablet int
	HotShare  float64
	// Seed of the op sequence and of the popularity permutation.
	Seed uint64
}

// NewWorkload builds a workload.
func NewWorkload(c WorkloadConfig) (*Workload, error) {
	nt := len(c.Bounds) - 1
	if c.Rows < 1 || nt < 1 || c.Bounds[0] != 0 || c.Bounds[nt] != c.Rows {
		return nil, fmt.Errorf("loadtest: workload bounds %v do not cover %d rows", c.Bounds, c.Rows)
	}
	for t := 0; t < nt; t++ {
		if c.Bounds[t+1] <= c.Bounds[t] {
			return nil, fmt.Errorf("loadtest: workload tablet %d is empty (bounds %d..%d)", t, c.Bounds[t], c.Bounds[t+1])
		}
	}
	if c.ScanRows < 1 {
		return nil, fmt.Errorf("loadtest: workload ScanRows %d must be >= 1", c.ScanRows)
	}
	if c.HotTablet < 0 || c.HotTablet >= nt {
		return nil, fmt.Errorf("loadtest: workload HotTablet %d out of [0, %d)", c.HotTablet, nt)
	}
	w := &Workload{bounds: append([]int(nil), c.Bounds...), scanRows: c.ScanRows, fullTablet: c.FullTablet,
		hotTablet: c.HotTablet, hotShare: c.HotShare, seed: c.Seed}
	if c.Zipf > 0 {
		z, err := NewZipf(nt, c.Zipf)
		if err != nil {
			return nil, err
		}
		w.zipf = z
	}
	w.perm = rand.New(rand.NewPCG(c.Seed, 0x5ca1ab1e)).Perm(nt)
	return w, nil
}

// Tablets is the number of tablets.
func (w *Workload) Tablets() int { return len(w.bounds) - 1 }

// TabletByRank is the tablet of popularity rank r (0 = most popular).
func (w *Workload) TabletByRank(r int) int { return w.perm[r] }

// Op returns scan number k; hot says whether a hot-tablet fault is active.
func (w *Workload) Op(k uint64, hot bool) Op {
	r := rand.New(rand.NewPCG(w.seed, k))
	op := Op{Seq: k}
	switch {
	case hot && r.Float64() < w.hotShare:
		op.Tablet, op.Hot = w.hotTablet, true
	case w.zipf != nil:
		op.Tablet = w.perm[w.zipf.Next(r)]
	default:
		op.Tablet = r.IntN(w.Tablets())
	}
	lo, hi := w.bounds[op.Tablet], w.bounds[op.Tablet+1]
	if r.Float64() < w.fullTablet {
		op.Lo, op.Hi, op.Full = lo, hi, true
		return op
	}
	n := 1 + r.IntN(w.scanRows)
	if n > hi-lo {
		n = hi - lo
	}
	op.Lo = lo + r.IntN(hi-lo-n+1)
	op.Hi = op.Lo + n
	return op
}

// TabletBounds converts a table's split points into Bounds for rows
// tablets.RowKey(0..rows-1): tablet t holds rows [b[t], b[t+1]).
func TabletBounds(splits [][]byte, rows int) []int {
	b := make([]int, 0, len(splits)+2)
	b = append(b, 0)
	for _, s := range splits {
		i := sort.Search(rows, func(i int) bool { return string(tablets.RowKey(i)) >= string(s) })
		b = append(b, i)
	}
	return append(b, rows)
}

// Schedule is an open-loop arrival schedule: op k is due at Start +
// k/Rate. Latency counts from the due time, not from when a client got
// round to sending it, so a stalled system is charged for every op it
// delayed (no coordinated omission). Closed loop (Config.Rate 0) has no
// schedule.
type Schedule struct {
	Start time.Time
	Rate  float64 // ops per second, > 0
}

// At is op k's due time.
func (s Schedule) At(k uint64) time.Time {
	return s.Start.Add(time.Duration(float64(k) / s.Rate * float64(time.Second)))
}

// Count is how many ops are due before t.
func (s Schedule) Count(t time.Time) uint64 {
	d := t.Sub(s.Start)
	if d <= 0 {
		return 0
	}
	n := uint64(d.Seconds() * s.Rate)
	for s.At(n).Before(t) {
		n++
	}
	for n > 0 && !s.At(n-1).Before(t) {
		n--
	}
	return n
}
