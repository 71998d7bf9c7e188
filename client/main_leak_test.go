package client

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: the
// client's watches, probes and waits must end with Close. The test
// binary's one actor system (sharedSystem) is stopped first. With
// fakeCoordEnv set the binary is a fake coordinator (leases_test.go).
func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeCoordEnv); mode != "" {
		os.Exit(fakeCoordinatorMain(mode))
	}
	code := m.Run()
	if testRem != nil {
		testRem.Shutdown(false)
		testSys.Shutdown()
	}
	if code == 0 {
		if err := goleak.Find(
			// protoactor-go remote: a failed connect leaves gRPC ClientConns
			// reconnecting that nothing holds a handle to (see
			// coordinator/main_leak_test.go).
			goleak.IgnoreAnyFunction("google.golang.org/grpc.(*addrConn).resetTransportAndUnlock"),
			goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
			// protoactor-go: the dead-letter throttle's one-period timer.
			goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
