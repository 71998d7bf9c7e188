package bus

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: every
// embedded server, connection and subscription a test starts must be
// closed by it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
