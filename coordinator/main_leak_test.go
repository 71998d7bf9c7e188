package coordinator_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them. The
// test process's one actor system (actorSystem, shared by every test
// because protoactor remote may be started once per process) is closed
// first; everything else a test starts — clusters, clients, probes, timers
// — must be gone by then.
func TestMain(m *testing.M) {
	code := m.Run()
	if sys != nil {
		// Not sys.Close: protoactor's graceful remote shutdown
		// (endpointManager.stop) writes its connection map unsynchronised
		// while endpoint-terminated events read it, which the race detector
		// reports. The abrupt stop ends the gRPC server without that path.
		sys.Remote.Shutdown(false)
		sys.Actors.Shutdown()
	}
	if code == 0 {
		if err := goleak.Find(leakOptions()...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// leakOptions lists third-party goroutines that stay after everything of
// ours is closed, each with whose it is and why it cannot be stopped.
func leakOptions() []goleak.Option {
	return []goleak.Option{
		// protoactor-go actor: the dead-letter throttle starts a goroutine
		// at the first dead letter of a period that waits one
		// DeadLetterThrottleInterval (1s) on a ticker and ends. A message
		// that reaches a client after it closed (a scan server's late
		// ScanFinished as the last test ends) starts one; it cannot be
		// stopped, only waited for.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
	}
}
