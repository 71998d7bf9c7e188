package natsserver_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs one NATS node when the environment names one (nodeEnv),
// else the tests, and fails them when a goroutine outlives them: every
// server, connection, watch and child process a test starts must be
// closed by it.
func TestMain(m *testing.M) {
	if spec := os.Getenv(nodeEnv); spec != "" {
		runNode(spec)
		return
	}
	goleak.VerifyTestMain(m)
}
