package loadtest

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil"
)

// TestCPUDelta: a kind's CPU time is the growth of its processes present
// at both marks; a process that appeared or vanished in between counts
// for nothing, and a pid reused with less CPU is not a negative figure.
func TestCPUDelta(t *testing.T) {
	a := cpuMark{secs: map[int]float64{1: 1.0, 2: 2.0, 3: 5.0, 4: 9.0}, kind: map[int]string{1: KindCoordinator, 2: KindScanServer, 3: KindScanServer, 4: KindClient}}
	b := cpuMark{secs: map[int]float64{1: 1.5, 2: 2.25, 3: 5.5, 4: 1.0, 5: 7.0}, kind: map[int]string{1: KindCoordinator, 2: KindScanServer, 3: KindScanServer, 4: KindClient, 5: KindScanServer}}
	got := cpuDelta(a, b)
	want := map[string]float64{KindCoordinator: 0.5, KindScanServer: 0.75}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: %v, want %v (all %v)", k, got[k], v, got)
		}
	}
}

// TestMarkCPUReadsThisProcess: markCPU reads the real CPU time of this
// process, which grows while it spins; a pid that does not exist is left
// out.
func TestMarkCPUReadsThisProcess(t *testing.T) {
	pids := map[int]string{os.Getpid(): KindClient, 1 << 30: KindScanServer}
	a := markCPU(pids)
	if _, ok := a.secs[1<<30]; ok || len(a.secs) != 1 {
		t.Fatalf("mark %v: want only this process", a.secs)
	}
	x := 0
	if !testutil.Poll(30*time.Second, func() bool {
		for i := 0; i < 1e6; i++ {
			x += i
		}
		return cpuDelta(a, markCPU(pids))[KindClient] >= 0.05
	}) {
		t.Fatalf("no CPU time measured after 30s of spinning (%d)", x)
	}
	res := Result{Policy: "p", Fault: "f", Scans: 100, CPUSeconds: map[string]float64{KindClient: 0.5, KindCoordinator: 1}, CPUWindowS: 2}
	if l := cpuLine(res); !strings.HasPrefix(l, "coordinator 0.50 cores (1.00 s, 10000 µs/scan); client 0.25 cores") {
		t.Fatalf("cpu line %q", l)
	}
}
