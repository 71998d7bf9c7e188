package backoff

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

const ms = time.Millisecond

// fixed returns a Rand that always answers r.
func fixed(r float64) func() float64 { return func() float64 { return r } }

func TestNext(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []time.Duration
	}{
		{"doubles to the cap", Config{Initial: 100 * ms, Max: time.Second},
			[]time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second}},
		{"multiplier 3", Config{Initial: 10 * ms, Max: time.Second, Multiplier: 3},
			[]time.Duration{10 * ms, 30 * ms, 90 * ms, 270 * ms, 810 * ms, time.Second}},
		{"multiplier 1: constant", Config{Initial: 50 * ms, Max: time.Second, Multiplier: 1},
			[]time.Duration{50 * ms, 50 * ms, 50 * ms}},
		{"max = initial", Config{Initial: time.Second, Max: time.Second},
			[]time.Duration{time.Second, time.Second}},
		{"zero", Config{}, []time.Duration{0, 0, 0}},
		{"jitter 0.5 at the top of its range", Config{Initial: 100 * ms, Max: 300 * ms, Jitter: 0.5, Rand: fixed(0)},
			[]time.Duration{100 * ms, 200 * ms, 300 * ms, 300 * ms}},
		{"jitter 0.5 at the bottom of its range", Config{Initial: 100 * ms, Max: 300 * ms, Jitter: 0.5, Rand: fixed(1)},
			[]time.Duration{50 * ms, 100 * ms, 150 * ms, 150 * ms}},
		{"jitter 0.2, rand 0.5", Config{Initial: 100 * ms, Max: time.Second, Jitter: 0.2, Rand: fixed(0.5)},
			[]time.Duration{90 * ms, 180 * ms, 360 * ms}},
		{"jitter 1, rand 0.25", Config{Initial: 100 * ms, Max: time.Second, Jitter: 1, Rand: fixed(0.25)},
			[]time.Duration{75 * ms, 150 * ms}},
		{"clamped: max below initial", Config{Initial: time.Second, Max: 10 * ms},
			[]time.Duration{time.Second, time.Second}},
		{"clamped: negative initial, multiplier < 1, jitter > 1",
			Config{Initial: -time.Second, Max: 100 * ms, Multiplier: 0.5, Jitter: 2, Rand: fixed(0.5)},
			[]time.Duration{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(tc.cfg)
			for i, want := range tc.want {
				if got := b.Next(); got != want {
					t.Fatalf("delay %d: %v, want %v", i, got, want)
				}
			}
		})
	}
}

// With the default source every jittered delay lies in [(1−J)·d, d].
func TestNextJitterBounds(t *testing.T) {
	b := New(Config{Initial: 100 * ms, Max: 800 * ms, Jitter: 0.3})
	d := 100 * ms
	for i := range 200 {
		got := b.Next()
		if lo := time.Duration(0.7 * float64(d)); got < lo || got > d {
			t.Fatalf("delay %d: %v outside [%v, %v]", i, got, lo, d)
		}
		d = min(2*d, 800*ms)
	}
}

func TestReset(t *testing.T) {
	b := New(Config{Initial: 10 * ms, Max: time.Second})
	b.Next()
	b.Next()
	b.Reset()
	if got := b.Next(); got != 10*ms {
		t.Fatalf("after Reset: %v, want 10ms", got)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string // "" = valid
	}{
		{DefaultConfig(), ""},
		{Config{}, ""},
		{Config{Initial: ms, Max: ms, Multiplier: 1, Jitter: 1}, ""},
		{Config{Initial: -1}, "Config.Initial"},
		{Config{Initial: time.Second, Max: ms}, "Config.Max"},
		{Config{Max: ms, Multiplier: 0.5}, "Config.Multiplier"},
		{Config{Max: ms, Jitter: -0.1}, "Config.Jitter"},
		{Config{Max: ms, Jitter: 1.5}, "Config.Jitter"},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v, want valid", tc.cfg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

func TestSleep(t *testing.T) {
	errStop := errors.New("stopped")
	for _, tc := range []struct {
		name    string
		d       time.Duration
		cancel  time.Duration // cancel ctx after this long; 0 = never
		wake    time.Duration // close wake after this long; 0 = never
		done    bool          // ctx already cancelled
		want    error
		elapsed time.Duration
	}{
		{name: "waits d", d: 300 * ms, elapsed: 300 * ms},
		{name: "zero", d: 0, elapsed: 0},
		{name: "ctx ends first", d: time.Second, cancel: 100 * ms, want: errStop, elapsed: 100 * ms},
		{name: "ctx ended already", d: time.Second, done: true, want: errStop, elapsed: 0},
		{name: "woken first", d: time.Second, wake: 200 * ms, elapsed: 200 * ms},
		{name: "d before wake", d: 100 * ms, wake: 200 * ms, elapsed: 100 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancelCause(t.Context())
				defer cancel(nil)
				if tc.done {
					cancel(errStop)
				}
				if tc.cancel > 0 {
					time.AfterFunc(tc.cancel, func() { cancel(errStop) })
				}
				var wake chan struct{}
				if tc.wake > 0 {
					wake = make(chan struct{})
					time.AfterFunc(tc.wake, func() { close(wake) })
				}
				start := time.Now()
				err := Sleep(ctx, tc.d, wake)
				if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
					t.Errorf("err %v, want %v", err, tc.want)
				}
				if got := time.Since(start); got != tc.elapsed {
					t.Errorf("returned after %v, want %v", got, tc.elapsed)
				}
			})
		})
	}
}

func TestWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(Config{Initial: 100 * ms, Max: 250 * ms})
		start := time.Now()
		for _, want := range []time.Duration{100 * ms, 300 * ms, 550 * ms} {
			if err := b.Wait(t.Context()); err != nil {
				t.Fatal(err)
			}
			if got := time.Since(start); got != want {
				t.Fatalf("after %v, want %v", got, want)
			}
		}
	})
}

func TestRetry(t *testing.T) {
	errRetry := errors.New("retry me")
	errFatal := errors.New("fatal")
	retryable := func(err error) bool { return errors.Is(err, errRetry) }
	for _, tc := range []struct {
		name    string
		results []error       // op's answers in turn; the last repeats
		limit   time.Duration // Retry's limit
		ctxEnd  time.Duration // ctx ends after this long; 0 = never
		want    error
		calls   int
		elapsed time.Duration
	}{
		{name: "success at once", results: []error{nil}, want: nil, calls: 1},
		{name: "two retries then success", results: []error{errRetry, errRetry, nil}, want: nil, calls: 3, elapsed: 300 * ms},
		{name: "a rejected error stops at once", results: []error{errRetry, errFatal}, want: errFatal, calls: 2, elapsed: 100 * ms},
		// waits 100, 200, 400: the third call starts at 300 ms, the next
		// would start at 700 ms > 500 ms.
		{name: "limit", results: []error{errRetry}, limit: 500 * ms, want: errRetry, calls: 3, elapsed: 300 * ms},
		{name: "limit exactly reached", results: []error{errRetry}, limit: 300 * ms, want: errRetry, calls: 3, elapsed: 300 * ms},
		{name: "ctx ends while waiting", results: []error{errRetry}, ctxEnd: 250 * ms, want: errRetry, calls: 2, elapsed: 250 * ms},
		{name: "cap", results: []error{errRetry, errRetry, errRetry, errRetry, errRetry, nil}, want: nil, calls: 6,
			elapsed: (100 + 200 + 400 + 800 + 800) * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				if tc.ctxEnd > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.ctxEnd)
					defer cancel()
				}
				b := New(Config{Initial: 100 * ms, Max: 800 * ms})
				calls := 0
				start := time.Now()
				err := b.Retry(ctx, tc.limit, retryable, func() error {
					r := tc.results[min(calls, len(tc.results)-1)]
					calls++
					return r
				})
				if err != tc.want {
					t.Errorf("err %v, want %v", err, tc.want)
				}
				if calls != tc.calls {
					t.Errorf("%d calls, want %d", calls, tc.calls)
				}
				if got := time.Since(start); got != tc.elapsed {
					t.Errorf("returned after %v, want %v", got, tc.elapsed)
				}
			})
		})
	}
}
