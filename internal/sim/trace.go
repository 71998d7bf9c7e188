package sim

import (
	"fmt"
	"hash"
	"strings"
	"time"
)

// tracer records what happened, one line per event, when enabled. A run
// is traced only when asked (-sim.seed) or when it failed: the
// failing seed is run again with the tracer on, which also checks that
// the run is deterministic.
type tracer struct {
	on    bool
	lines []string
	clock *scheduler
	hash  hash.Hash64 // over every line, when on
}

func (t *tracer) printf(format string, args ...any) {
	if !t.on {
		return
	}
	at := t.clock.now.Sub(epoch)
	line := fmt.Sprintf("%12s  ", fmtDur(at)) + fmt.Sprintf(format, args...)
	t.lines = append(t.lines, line)
	t.hash.Write([]byte(line))
	t.hash.Write([]byte{'\n'})
}

func (t *tracer) String() string { return strings.Join(t.lines, "\n") }

// fmtDur prints a fake-clock offset with microsecond resolution.
func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%d.%06ds", d/time.Second, (d%time.Second)/time.Microsecond)
}
