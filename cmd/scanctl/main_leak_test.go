package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/scanplane/scanplane/client"
)

// TestMain fails the package's tests when a goroutine outlives them:
// every command must stop what it starts on every exit path, errors included.
// The tests, and the scanctl processes they start, run without
// $SCANPLANE_API: scan would dial it rather than the cluster their flags
// name.
func TestMain(m *testing.M) {
	if err := os.Unsetenv(client.APIEnv); err != nil {
		panic(err)
	}
	goleak.VerifyTestMain(m)
}
