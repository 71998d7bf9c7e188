package loadtest

import (
	"os"

	"github.com/prometheus/procfs"
)

// Process kinds whose CPU time a phase reports.
const (
	KindCoordinator = "coordinator"
	KindScanServer  = "scanserver"
	// KindClient is this process: the harness and the client library its
	// scanning goroutines share (the client side of every scan).
	KindClient = "client"
)

// cpuMark is the CPU time (user + system, seconds) each process had used
// at one instant, by pid, with the kind of each.
type cpuMark struct {
	secs map[int]float64
	kind map[int]string
}

// cpuPIDs lists the processes of the cluster under test by kind: the
// local cluster's coordinators and scan-server hosts (none when the
// harness talks to a running cluster), and this process.
func (t *target) cpuPIDs() map[int]string {
	pids := map[int]string{os.Getpid(): KindClient}
	if t.local == nil {
		return pids
	}
	for i := 0; i < t.local.Coordinators(); i++ {
		if p := t.local.CoordinatorProc(i); p != nil && p.Alive() {
			pids[p.PID()] = KindCoordinator
		}
	}
	for i := 0; i < t.local.Hosts(); i++ {
		if p := t.local.Host(i); p != nil && p.Alive() {
			pids[p.PID()] = KindScanServer
		}
	}
	return pids
}

// markCPU reads /proc/PID/stat of every process (10 ms ticks). A process
// that cannot be read (gone) is left out.
func markCPU(pids map[int]string) cpuMark {
	m := cpuMark{secs: map[int]float64{}, kind: map[int]string{}}
	for pid, kind := range pids {
		p, err := procfs.NewProc(pid)
		if err != nil {
			continue
		}
		st, err := p.Stat()
		if err != nil {
			continue
		}
		m.secs[pid], m.kind[pid] = st.CPUTime(), kind
	}
	return m
}

// cpuDelta is the CPU seconds each kind used between two marks, over the
// processes present in both: a process killed or restarted inside the
// window (crash faults) is not counted, so such phases undercount.
func cpuDelta(a, b cpuMark) map[string]float64 {
	out := map[string]float64{}
	for pid, s1 := range b.secs {
		s0, ok := a.secs[pid]
		if !ok || s1 < s0 {
			continue
		}
		out[b.kind[pid]] += s1 - s0
	}
	return out
}
