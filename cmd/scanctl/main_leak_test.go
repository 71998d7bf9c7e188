package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them:
// every command must stop what it starts on every exit path, errors included.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
