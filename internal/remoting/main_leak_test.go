package remoting

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: a
// remote stopped with Tracker.Stop must leave nothing running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
