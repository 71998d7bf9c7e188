package testutil

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
)

func TestPollSeesAConditionThatComesTrue(t *testing.T) {
	n := 0
	if !Poll(5*time.Second, func() bool { n++; return n == 3 }) {
		t.Fatal("Poll gave up on a condition true at the third try")
	}
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}

func TestPollGivesUpAfterTimeout(t *testing.T) {
	start := time.Now()
	if Poll(30*time.Millisecond, func() bool { return false }) {
		t.Fatal("Poll reported a condition that never holds")
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("Poll returned after %v, before its 30ms timeout", d)
	}
}

// A try that began before the timeout and failed after it does not end
// the wait: the next try, begun after the timeout, decides.
func TestPollTriesOnceMoreAfterASlowFailure(t *testing.T) {
	const timeout = 20 * time.Millisecond
	n := 0
	ok := Poll(timeout, func() bool {
		n++
		if n == 1 {
			time.Sleep(2 * timeout) // a slow look that saw the old state
			return false
		}
		return true
	})
	if !ok || n != 2 {
		t.Fatalf("Poll = %v after %d tries, want true after 2", ok, n)
	}
}

func TestPollErrReturnsTheLastError(t *testing.T) {
	n := 0
	err := PollErr(30*time.Millisecond, func() error { n++; return fmt.Errorf("try %d", n) })
	if err == nil || err.Error() != fmt.Sprintf("try %d", n) {
		t.Fatalf("PollErr = %v after %d tries, want the last try's error", err, n)
	}
	n = 0
	if err := PollErr(5*time.Second, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("PollErr = %v after %d tries, want nil after 3", err, n)
	}
}

// EventuallyErr's failure names what it waited for and the last error.
func TestEventuallyErrNamesTheLastError(t *testing.T) {
	ft := &fatalT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		EventuallyErr(ft, 10*time.Millisecond, "the thing", func() error { return errors.New("3 of 4 ready") })
	}()
	<-done
	if want := "timed out after 10ms waiting for the thing: 3 of 4 ready"; ft.msg != want {
		t.Fatalf("failure %q, want %q", ft.msg, want)
	}
}

// fatalT records a Fatalf and ends its goroutine, as testing.T does.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}

func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
