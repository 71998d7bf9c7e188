package loadtest

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them:
// every cluster, client and runner a test starts must be closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
