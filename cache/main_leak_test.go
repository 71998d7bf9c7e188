package cache

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them:
// every cache a test opens must be closed (ristretto's workers stop in Close).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
