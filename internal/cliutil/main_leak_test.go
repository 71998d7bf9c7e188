package cliutil

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them:
// helpers that start goroutines must stop them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
