package testutil

import (
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
