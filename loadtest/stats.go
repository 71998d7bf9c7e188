package loadtest

import (
	"slices"
	"sort"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in microseconds from 1µs to 10 minutes with 3
// significant digits.
const (
	histMin     = 1
	histMax     = int64(10 * time.Minute / time.Microsecond)
	histSigFigs = 3
	// maxErrorSamples: distinct error messages kept per phase.
	maxErrorSamples = 8
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, histSigFigs) }

func recordLatency(h *hdrhistogram.Histogram, d time.Duration) {
	us := d.Microseconds()
	if us < histMin {
		us = histMin
	}
	if us > histMax {
		us = histMax
	}
	_ = h.RecordValue(us)
}

// ms converts a histogram value (µs) to milliseconds.
func ms(us int64) float64 { return float64(us) / 1000 }

// recorder collects the scans of one phase's measurement window: an HDR histogram of
// latencies, one histogram per second of the window (by scheduled start)
// for p99 over time, counts, a sample of error messages, and when in the
// window scans completed (for the longest gap). Safe for concurrent use.
type recorder struct {
	mu       sync.Mutex
	start    time.Time     // measurement window start
	window   time.Duration // its length
	bucket   time.Duration
	hist     *hdrhistogram.Histogram
	full     *hdrhistogram.Histogram // whole-tablet scans only
	timeline []*hdrhistogram.Histogram
	scans    int64 // completed, correct or wrong
	rows     int64
	errors   int64
	wrong    int64
	missed   int64
	errs     map[string]int64
	wrongs   []string
	// completed: offsets from start of the completions in the window of
	// every scan with the right rows (whenever it was due).
	completed []time.Duration
	// warm-up: not in the figures, but wrong rows and errors are reported.
	wScans, wErrors, wWrong int64
}

func newRecorder(start time.Time, window, bucket time.Duration) *recorder {
	n := int((window + bucket - 1) / bucket)
	r := &recorder{start: start, window: window, bucket: bucket, hist: newHist(), full: newHist(), errs: map[string]int64{}}
	for i := 0; i < n; i++ {
		r.timeline = append(r.timeline, newHist())
	}
	return r
}

// outcome of one scan.
type outcome struct {
	sched   time.Time // when it was due (open loop) or started (closed)
	latency time.Duration
	done    time.Time // when it completed (zero: unknown)
	rows    int
	full    bool  // a whole-tablet scan
	err     error // scan error
	wrong   error // verification failure (ErrWrong)
}

func (r *recorder) add(o outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if o.err == nil && o.wrong == nil && !o.done.IsZero() {
		if at := o.done.Sub(r.start); at >= 0 && at <= r.window {
			r.completed = append(r.completed, at)
		}
	}
	if o.sched.Before(r.start) {
		r.wScans++
		switch {
		case o.err != nil:
			r.wErrors++
			r.sampleErr("warm-up: " + o.err.Error())
		case o.wrong != nil:
			r.wWrong++
			r.sampleWrong("warm-up: " + o.wrong.Error())
		}
		return
	}
	if o.err != nil {
		r.errors++
		r.sampleErr(o.err.Error())
		return
	}
	r.scans++
	r.rows += int64(o.rows)
	if o.wrong != nil {
		r.wrong++
		r.sampleWrong(o.wrong.Error())
	}
	recordLatency(r.hist, o.latency)
	if o.full {
		recordLatency(r.full, o.latency)
	}
	if i := int(o.sched.Sub(r.start) / r.bucket); i >= 0 && i < len(r.timeline) {
		recordLatency(r.timeline[i], o.latency)
	}
}

func (r *recorder) sampleErr(msg string) {
	if _, ok := r.errs[msg]; ok || len(r.errs) < maxErrorSamples {
		r.errs[msg]++
	}
}

func (r *recorder) sampleWrong(msg string) {
	if len(r.wrongs) < maxErrorSamples {
		r.wrongs = append(r.wrongs, msg)
	}
}

func (r *recorder) addMissed(n int64) {
	r.mu.Lock()
	r.missed += n
	r.mu.Unlock()
}

// longestGap is the longest stretch of the measurement window in which no
// scan completed with the right rows, and where it began (offset from the
// window's start); the window's edges bound the first and the last
// stretch, so a window without any completion is one gap of its length.
func (r *recorder) longestGap() (gap, at time.Duration) {
	r.mu.Lock()
	done := slices.Clone(r.completed)
	r.mu.Unlock()
	slices.Sort(done)
	prev := time.Duration(0)
	for _, d := range append(done, r.window) {
		if d-prev > gap {
			gap, at = d-prev, prev
		}
		prev = d
	}
	return gap, at
}

// live is a snapshot for the progress line.
type live struct {
	scans, errors, wrong int64
	p99                  time.Duration
}

func (r *recorder) live() live {
	r.mu.Lock()
	defer r.mu.Unlock()
	return live{scans: r.scans + r.wScans, errors: r.errors + r.wErrors, wrong: r.wrong + r.wWrong,
		p99: time.Duration(r.hist.ValueAtQuantile(99)) * time.Microsecond}
}

// errorSamples returns the sampled error messages, most frequent first.
func (r *recorder) errorSamples() []ErrorSample {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]ErrorSample, 0, len(r.errs))
	for m, n := range r.errs {
		out = append(out, ErrorSample{Message: m, Count: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Message < out[j].Message
	})
	return out
}
