package e2e

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: every
// cluster and client a test starts must be closed by it. Goroutines get
// up to leakGrace to end: a client's Close does not wait for protoactor's
// endpoint writer to a peer that died in the test, which sits out one
// bounded connect back-off (2 s) before it ends; goleak's own retries
// (about 1.3 s) are shorter than that.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		var err error
		if !testutil.Poll(leakGrace, func() bool { err = goleak.Find(leakOptions()...); return err == nil }) {
			fmt.Fprintf(os.Stderr, "goleak: goroutines outlived the tests by %v: %v\n", leakGrace, err)
			code = 1
		}
	}
	os.Exit(code)
}

const leakGrace = 10 * time.Second

func leakOptions() []goleak.Option {
	return []goleak.Option{
		// protoactor-go actor: the dead-letter throttle starts a goroutine
		// at the first dead letter of a period that waits one
		// DeadLetterThrottleInterval (1s) on a ticker and ends. A message
		// that reaches a client as it closes (a scan server's late
		// ScanFinished) starts one; it cannot be stopped, only waited for.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
	}
}
