package loadtest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scanplane/scanplane/internal/testutil"
)

// ownCPUs is the test process's CPU affinity.
func ownCPUs(t *testing.T) unix.CPUSet {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	return set
}

// oneCPU is the lowest CPU of set, as a set.
func oneCPU(set unix.CPUSet) unix.CPUSet {
	var one unix.CPUSet
	one.Set(cpusOf(set)[0])
	return one
}

// taskMasks is the CPU affinity of every thread of pid.
func taskMasks(t *testing.T, pid int) map[int]unix.CPUSet {
	t.Helper()
	tids, err := tasks(pid)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]unix.CPUSet{}
	for _, tid := range tids {
		var m unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &m); err == nil {
			out[tid] = m
		}
	}
	if len(out) == 0 {
		t.Fatalf("pid %d: no threads", pid)
	}
	return out
}

func testExe(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// TestAntagonistBurnsPinned starts the real antagonist process (this test
// binary re-executed with --burn, see TestMain): every one of its threads
// is pinned to the one CPU asked for, its CPU time in /proc/PID/stat grows
// as a busy loop's does, and after stop the process is gone.
func TestAntagonistBurnsPinned(t *testing.T) {
	cpu := oneCPU(ownCPUs(t))
	// It burns until stopped (at most a minute): the wait below is
	// bounded by that, not by how many cycles a shared machine gives it.
	a, err := startAntagonist(testExe(t), cpu, 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer a.stop()
	pid := a.pid()
	for tid, m := range taskMasks(t, pid) {
		if m != cpu {
			t.Errorf("antagonist thread %d runs on CPUs %s, want %s", tid, formatCPUSet(m), formatCPUSet(cpu))
		}
	}
	// A busy thread's CPU time grows to 300ms, however small its share of
	// a shared machine; a sleeping process's stays at ~0.
	const want = 300 * time.Millisecond
	t0 := time.Now()
	var used time.Duration
	testutil.EventuallyErr(t, 50*time.Second, fmt.Sprintf("the antagonist to use %v of CPU", want), func() error {
		if used, err = procCPUTime(pid); err != nil {
			t.Fatal(err)
		}
		if used < want {
			return fmt.Errorf("%v used", used)
		}
		return nil
	})
	t.Logf("antagonist pid %d on CPU %s: %v of CPU in %v", pid, formatCPUSet(cpu), used, time.Since(t0))
	total := a.stop()
	if total < used {
		t.Errorf("stop reports %v of CPU, less than the %v /proc showed", total, used)
	}
	select {
	case <-a.done:
	default:
		t.Fatal("stop returned before the process was reaped")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("antagonist pid %d after stop: kill(0) = %v, want ESRCH", pid, err)
	}
	if a.stop() != total {
		t.Error("a second stop changed the CPU time")
	}
}

// TestAntagonistEndsByItself: the antagonist stops after its duration
// without being killed, and when the harness closes its stdin (the
// harness died), so it never outlives its window.
func TestAntagonistEndsByItself(t *testing.T) {
	cpu := oneCPU(ownCPUs(t))
	a, err := startAntagonist(testExe(t), cpu, 1, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer a.stop()
	b, err := startAntagonist(testExe(t), cpu, 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer b.stop()
	_ = b.stdin.Close()
	for name, p := range map[string]*antagonist{"after its duration": a, "on stdin EOF": b} {
		select {
		case <-p.done:
			if !p.cmd.ProcessState.Success() {
				t.Errorf("%s: exited %v, want 0", name, p.cmd.ProcessState)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("antagonist still running 10s later, want it to stop %s", name)
		}
	}
}

// TestPinProcessRestores pins every thread of a running multi-threaded Go
// process (an antagonist allowed on all of our CPUs) to one CPU, then
// gives it its mask back.
func TestPinProcessRestores(t *testing.T) {
	own := ownCPUs(t)
	a, err := startAntagonist(testExe(t), own, 1, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer a.stop()
	one, err := antagonistCPUs(a.pid(), -1)
	if err != nil {
		t.Fatal(err)
	}
	if one != oneCPU(own) {
		t.Fatalf("antagonistCPUs = %s, want the lowest of %s", formatCPUSet(one), formatCPUSet(own))
	}
	h, err := pinProcess(a.pid(), one)
	if err != nil {
		t.Fatal(err)
	}
	for tid, m := range taskMasks(t, a.pid()) {
		if m != one {
			t.Errorf("pinned: thread %d on %s, want %s", tid, formatCPUSet(m), formatCPUSet(one))
		}
	}
	if err := h.restore(); err != nil {
		t.Fatal(err)
	}
	for tid, m := range taskMasks(t, a.pid()) {
		if m != own {
			t.Errorf("restored: thread %d on %s, want %s", tid, formatCPUSet(m), formatCPUSet(own))
		}
	}
	a.stop()
	if err := h.restore(); err != nil {
		t.Errorf("restore of an exited process: %v, want nil", err)
	}
	if _, err := antagonistCPUs(os.Getpid(), 1023); !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "AntagonistCPU") {
		t.Errorf("antagonistCPUs(CPU 1023) = %v, want an ErrBadConfig naming AntagonistCPU", err)
	}
}

// TestStartAntagonistNotHooked: an executable without the --burn mode is
// reported clearly, not taken for a burner.
func TestStartAntagonistNotHooked(t *testing.T) {
	exe, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1)")
	}
	_, err = startAntagonist(exe, oneCPU(ownCPUs(t)), 1, time.Second)
	if err == nil || !strings.Contains(err.Error(), "BurnMain") {
		t.Fatalf("startAntagonist(true) = %v, want an error pointing at BurnMain", err)
	}
}

func TestBurnMainBadArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--burn", "0s"}, "--burn 0s must be > 0"},
		{[]string{"--burn", "-1s"}, "--burn"},
		{[]string{"--burn", "soon"}, "invalid value"},
		{[]string{"--burn", "1s", "--burn-threads", "0"}, "--burn-threads 0"},
		{[]string{"--burn", "1s", "--burn-cpus", "x"}, "CPU list \"x\""},
		{[]string{"--burn", "1s", "--burn-cpus", "3-1"}, "CPU list \"3-1\""},
		{[]string{"--burn", "1s", "extra"}, "unexpected arguments"},
	} {
		if !BurnArgs(tc.args) {
			t.Errorf("BurnArgs(%q) = false", tc.args)
		}
		var out, errb bytes.Buffer
		if code := BurnMain(tc.args, strings.NewReader(""), &out, &errb); code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("BurnMain(%q) = %d, stderr %q; want 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
	for _, args := range [][]string{nil, {"--quick"}, {"--burnt"}} {
		if BurnArgs(args) {
			t.Errorf("BurnArgs(%q) = true", args)
		}
	}
}

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string]string{"0": "0", "1,0": "0,1", "0-3,6": "0,1,2,3,6", " 2 ": "2"} {
		set, err := parseCPUList(in)
		if err != nil || formatCPUSet(set) != want {
			t.Errorf("parseCPUList(%q) = %s, %v; want %s", in, formatCPUSet(set), err, want)
		}
	}
	for _, in := range []string{"", "-1", "a", "1-", "1024", "0,,1"} {
		if _, err := parseCPUList(in); err == nil {
			t.Errorf("parseCPUList(%q): no error", in)
		}
	}
}

func TestProcCPUTime(t *testing.T) {
	before, err := procCPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Busy until /proc shows more CPU time (10 ms ticks), at most 5 s.
	x, after := uint64(1), before
	for t0 := time.Now(); after <= before && time.Since(t0) < 5*time.Second; {
		for range 1 << 16 {
			x = x*6364136223846793005 + 1
		}
		if after, err = procCPUTime(os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	burnSink.Add(x)
	if after <= before {
		t.Errorf("CPU time %v then %v after 5 s of busy loop", before, after)
	}
	if _, err := procCPUTime(1 << 30); err == nil {
		t.Error("procCPUTime of no process: no error")
	}
}
