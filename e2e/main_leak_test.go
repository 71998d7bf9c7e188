package e2e

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: every
// cluster and client a test starts must be closed by it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
