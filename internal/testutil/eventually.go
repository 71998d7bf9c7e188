// Package testutil holds what tests share: waiting for a condition with a
// deadline instead of sleeping a fixed time, a goroutine-safe buffer for
// captured output, and a small disk (Tmpfs).
// Only tests and test harnesses import it (internal/archtest). Its
// functions are safe to call from any goroutine; cond and try run on the
// caller's, so they may call tb.Fatal.
package testutil

import (
	"errors"
	"testing"
	"time"
)

// Poll calls cond until it returns true (Poll returns true) or timeout
// has passed (false). It waits 1 ms after the first try, doubling up to
// 20 ms, so a condition that holds soon is seen soon and one that takes
// long costs little CPU. Poll returns false only when a try that began
// after the timeout failed: a slow cond never loses its last chance.
func Poll(timeout time.Duration, cond func() bool) bool {
	return PollErr(timeout, func() error {
		if cond() {
			return nil
		}
		return errFalse
	}) == nil
}

// errFalse is Poll's cond returning false.
var errFalse = errors.New("condition false")

// PollErr calls try until it returns nil (PollErr returns nil) or
// timeout has passed; then it returns try's last error, which says what
// was seen instead. It waits between tries as Poll does.
func PollErr(timeout time.Duration, try func() error) error {
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for {
		began := time.Now()
		err := try()
		if err == nil || began.After(deadline) {
			return err
		}
		time.Sleep(wait)
		wait = min(2*wait, 20*time.Millisecond)
	}
}

// Eventually is Poll that fails tb, naming what it waited for, when the
// timeout passes first.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !Poll(timeout, cond) {
		tb.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// EventuallyErr is PollErr that fails tb, naming what it waited for and
// try's last error, when the timeout passes first.
func EventuallyErr(tb testing.TB, timeout time.Duration, what string, try func() error) {
	tb.Helper()
	if err := PollErr(timeout, try); err != nil {
		tb.Fatalf("timed out after %v waiting for %s: %v", timeout, what, err)
	}
}
