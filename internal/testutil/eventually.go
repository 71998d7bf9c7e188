// Package testutil holds what tests share: waiting for a condition with a
// deadline instead of sleeping a fixed time, and a small disk (Tmpfs).
// Only tests and test harnesses import it (internal/archtest). Its
// functions are safe to call from any goroutine; cond runs on the
// caller's.
package testutil

import (
	"testing"
	"time"
)

// Poll calls cond until it returns true (Poll returns true) or timeout
// has passed (false). It waits 1 ms after the first try, doubling up to
// 20 ms, so a condition that holds soon is seen soon and one that takes
// long costs little CPU.
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(wait)
		wait = min(2*wait, 20*time.Millisecond)
	}
	return true
}

// Eventually is Poll that fails tb, naming what it waited for, when the
// timeout passes first.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !Poll(timeout, cond) {
		tb.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}
