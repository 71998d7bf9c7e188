package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them:
// run() must stop what it starts on every exit path.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
