package e2e

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: every
// cluster and client a test starts must be closed by it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// protoactor-go actor: the dead-letter throttle starts a goroutine
		// at the first dead letter of a period that waits one
		// DeadLetterThrottleInterval (1s) on a ticker and ends. A message
		// that reaches a client as it closes (a scan server's late
		// ScanFinished) starts one; it cannot be stopped, only waited for.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
	)
}
