package tablets

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them:
// stores, readers and ingests a test starts must end with it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
