package loadtest

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them:
// every cluster, client and runner a test starts must be closed. Run as
// an antagonist (the antagonist fault re-executes the test binary with
// BurnArgs), it burns CPU instead.
func TestMain(m *testing.M) {
	if BurnArgs(os.Args[1:]) {
		os.Exit(BurnMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}
