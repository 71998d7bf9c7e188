package client

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them:
// every Client a test starts must be closed, and so must its scans.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
