package loadtest

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The antagonist fault (Prequal's antagonist load, NSDI'24 §5: CPU-hungry
// jobs sharing a server's machine) runs a CPU-burning child process beside
// the fault host's scanserver for the fault window, both pinned to the
// same single CPU (Config.AntagonistCPU; by default the lowest-numbered CPU
// the scanserver may run on, read with sched_getaffinity). Pinning both to
// one CPU is what makes the fault belong to one host: on a machine where
// every process may use every CPU, a burner pinned to the scanserver's own
// (full) affinity mask would slow the whole machine alike. At the window's
// end the antagonist is killed and the scanserver gets its own affinity
// mask back.
//
// The antagonist is the harness's own executable (os.Executable)
// re-executed with the hidden argument --burn (BurnArgs): a program that
// calls Run with the antagonist fault must hand such an invocation to
// BurnMain first thing in main (cmd/loadtest does, and so does this
// package's TestMain); one that does not gets a clear error when the fault
// starts. The antagonist cannot outlive its window or the harness: it
// stops burning after its --burn duration, exits when its stdin (a pipe
// from the harness) closes, and is started with Pdeathsig SIGKILL.

// burnFlag is the hidden argument that turns the harness binary into an
// antagonist.
const burnFlag = "--burn"

// BurnArgs reports whether args (os.Args[1:]) ask for the antagonist mode
// (hidden; the harness starts it): --burn DURATION --burn-cpus LIST
// --burn-threads N.
func BurnArgs(args []string) bool {
	return len(args) > 0 && (args[0] == burnFlag || strings.HasPrefix(args[0], burnFlag+"="))
}

// burnSink keeps the busy loop's arithmetic alive.
var burnSink atomic.Uint64

// BurnMain runs the antagonist mode: it pins itself (every thread) to the
// CPUs of --burn-cpus, keeps --burn-threads threads busy on them for the
// --burn duration, writes one "burning" line to stdout once every thread
// is pinned and spinning, and exits early when stdin closes. It returns
// the exit status: 0, or 2 on bad arguments (with the reason on stderr).
func BurnMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loadtest --burn", flag.ContinueOnError)
	fs.SetOutput(stderr)
	d := fs.Duration("burn", 0, "burn CPU this long")
	cpus := fs.String("burn-cpus", "", "pin to these CPUs (comma separated; default: as inherited)")
	threads := fs.Int("burn-threads", 1, "busy threads")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var set unix.CPUSet
	var err error
	switch {
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected arguments %q", fs.Args())
	case *d <= 0:
		err = fmt.Errorf("--burn %v must be > 0", *d)
	case *threads < 1 || *threads > 64:
		err = fmt.Errorf("--burn-threads %d must be in [1, 64]", *threads)
	case *cpus == "":
		err = unix.SchedGetaffinity(0, &set)
	default:
		set, err = parseCPUList(*cpus)
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadtest --burn:", err)
		return 2
	}
	deadline := time.Now().Add(*d)
	// The threads that exist now, then each burning thread itself; threads
	// made later inherit their creator's (pinned) mask.
	if err := pinTasks(os.Getpid(), set); err != nil {
		fmt.Fprintln(stderr, "loadtest --burn:", err)
		return 1
	}
	var stop atomic.Bool
	go func() { // the harness closed the pipe (or died): stop
		_, _ = io.Copy(io.Discard, stdin)
		stop.Store(true)
	}()
	var pinned, done sync.WaitGroup
	errs := make([]error, *threads)
	for i := range *threads {
		pinned.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
			errs[i] = unix.SchedSetaffinity(0, &set)
			pinned.Done()
			if errs[i] != nil {
				return
			}
			x := uint64(i) + 1
			for !stop.Load() && time.Now().Before(deadline) {
				for range 1 << 16 {
					x = x*6364136223846793005 + 1442695040888963407
				}
			}
			burnSink.Add(x)
		}()
	}
	pinned.Wait()
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(stderr, "loadtest --burn: pin a thread:", err)
		return 1
	}
	fmt.Fprintf(stdout, "burning pid %d cpus %s threads %d for %v\n", os.Getpid(), formatCPUSet(set), *threads, *d)
	done.Wait()
	return 0
}

// parseCPUList parses "0", "0,2" or "0-3,6" into a CPU set.
func parseCPUList(s string) (unix.CPUSet, error) {
	var set unix.CPUSet
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a || b >= 1024 {
			return set, fmt.Errorf("CPU list %q: want CPU numbers in [0, 1024) like 0 or 0,2 or 0-3", s)
		}
		for c := a; c <= b; c++ {
			set.Set(c)
		}
	}
	return set, nil
}

// cpusOf lists a CPU set's CPUs, ascending.
func cpusOf(set unix.CPUSet) []int {
	var out []int
	for c := 0; c < 1024 && len(out) < set.Count(); c++ {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}

// formatCPUSet writes a CPU set as a comma-separated list ("0,1").
func formatCPUSet(set unix.CPUSet) string {
	var parts []string
	for _, c := range cpusOf(set) {
		parts = append(parts, strconv.Itoa(c))
	}
	return strings.Join(parts, ",")
}

// tasks lists the thread ids of process pid.
func tasks(pid int) ([]int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out, nil
}

const (
	// pinSettle is how long the threads of a process must stay as pinned
	// (the same threads, all on the set) before pinTasks believes it.
	pinSettle = 50 * time.Millisecond
	// pinConvergeWithin bounds how long pinTasks waits for them to settle.
	pinConvergeWithin = 5 * time.Second
)

// pinTasks sets the affinity of every thread of process pid to set. A
// thread that one not yet pinned is making meanwhile inherits the old mask,
// and it shows in /proc only once made, which on a loaded machine can be
// several scheduler slices later. So pinTasks passes over the threads until
// they have stayed the same threads, all on set, for pinSettle, rather than
// a fixed number of passes, which can miss a thread made late. A thread
// that exits meanwhile is skipped.
func pinTasks(pid int, set unix.CPUSet) error {
	start := time.Now()
	var prev []int
	var lastChange time.Time // when the threads were last seen changing
	for {
		tids, err := tasks(pid)
		if err != nil {
			return fmt.Errorf("threads of pid %d: %w", pid, err)
		}
		changed := !slices.Equal(tids, prev)
		for _, tid := range tids {
			var cur unix.CPUSet
			if err := unix.SchedGetaffinity(tid, &cur); err != nil {
				if errors.Is(err, unix.ESRCH) {
					continue
				}
				return fmt.Errorf("sched_getaffinity(%d): %w", tid, err)
			}
			if cur == set {
				continue
			}
			changed = true
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("sched_setaffinity(%d, %s): %w", tid, formatCPUSet(set), err)
			}
		}
		now := time.Now()
		if changed {
			lastChange = now
		} else if now.Sub(lastChange) >= pinSettle {
			return nil
		}
		if now.Sub(start) > pinConvergeWithin {
			return fmt.Errorf("threads of pid %d: still changing after %v of pinning them to %s", pid, pinConvergeWithin, formatCPUSet(set))
		}
		prev = tids
		time.Sleep(pinSettle / 10)
	}
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// procCPUTime is the CPU time (user + system) process pid has used so far,
// from /proc/PID/stat.
func procCPUTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 { // fields 3.. start at f[0]; utime is field 14, stime 15
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// antagonist is a running antagonist process.
type antagonist struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	done   chan struct{}
	stderr bytes.Buffer // safe to read after done
	cpus   unix.CPUSet
	once   sync.Once
	cpu    time.Duration // CPU time it used, set by stop
}

// startAntagonist starts exe in antagonist mode pinned to cpus, with
// threads busy threads, burning for at most d, and waits (up to 10 s) until
// it burns.
func startAntagonist(exe string, cpus unix.CPUSet, threads int, d time.Duration) (*antagonist, error) {
	a := &antagonist{cpus: cpus, done: make(chan struct{})}
	a.cmd = exec.Command(exe, burnFlag, d.String(), "--burn-cpus", formatCPUSet(cpus), "--burn-threads", strconv.Itoa(threads))
	a.cmd.Stderr = &a.stderr
	// Own process group (a terminal's Ctrl-C reaches the harness, which
	// stops it); SIGKILLed if the harness dies.
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var err error
	if a.stdin, err = a.cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("loadtest: antagonist: %w", err)
	}
	out, err := a.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("loadtest: antagonist: %w", err)
	}
	if err := a.cmd.Start(); err != nil {
		return nil, fmt.Errorf("loadtest: antagonist: start %s: %w", exe, err)
	}
	ready := make(chan bool, 1)
	read := make(chan struct{})
	go func() {
		defer close(read)
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- strings.HasPrefix(line, "burning ")
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() {
		<-read // Wait closes the pipe: only after the reads
		_ = a.cmd.Wait()
		close(a.done)
	}()
	select {
	case ok := <-ready:
		if ok {
			return a, nil
		}
	case <-time.After(10 * time.Second):
	}
	a.stop()
	return nil, fmt.Errorf("loadtest: antagonist: %s %s did not start burning (does its main hand loadtest.BurnArgs to loadtest.BurnMain?): %s",
		exe, burnFlag, strings.TrimSpace(a.stderr.String()))
}

// pid is the antagonist's process id.
func (a *antagonist) pid() int { return a.cmd.Process.Pid }

// stop kills the antagonist (if it still runs), waits for it and returns
// the CPU time it used. Safe to call more than once.
func (a *antagonist) stop() time.Duration {
	a.once.Do(func() {
		_ = a.cmd.Process.Kill()
		_ = a.stdin.Close()
		<-a.done
		if st := a.cmd.ProcessState; st != nil {
			a.cpu = st.UserTime() + st.SystemTime()
		}
	})
	return a.cpu
}

// hostPin is a process pinned for the fault window, with the mask to give
// it back.
type hostPin struct {
	pid  int
	orig unix.CPUSet
}

// pinProcess pins every thread of pid to set and returns how to undo it.
func pinProcess(pid int, set unix.CPUSet) (*hostPin, error) {
	h := &hostPin{pid: pid}
	if err := unix.SchedGetaffinity(pid, &h.orig); err != nil {
		return nil, fmt.Errorf("sched_getaffinity(%d): %w", pid, err)
	}
	if err := pinTasks(pid, set); err != nil {
		_ = h.restore()
		return nil, err
	}
	return h, nil
}

// restore gives the process its mask back; a process that is gone needs
// nothing.
func (h *hostPin) restore() error {
	err := pinTasks(h.pid, h.orig)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// antagonistCPUs is the CPU set the antagonist fault pins the scanserver
// of process pid and the antagonist to: cpu if >= 0 (it must be in the
// process's affinity), else the lowest-numbered CPU of its affinity.
func antagonistCPUs(pid, cpu int) (unix.CPUSet, error) {
	var aff, set unix.CPUSet
	if err := unix.SchedGetaffinity(pid, &aff); err != nil {
		return set, fmt.Errorf("sched_getaffinity(%d): %w", pid, err)
	}
	cpus := cpusOf(aff)
	if len(cpus) == 0 {
		return set, fmt.Errorf("pid %d has an empty affinity mask", pid)
	}
	if cpu < 0 {
		cpu = cpus[0]
	} else if !slices.Contains(cpus, cpu) {
		return set, fmt.Errorf("%w: AntagonistCPU %d is not one the scanserver (pid %d) may run on (%s)", ErrBadConfig, cpu, pid, formatCPUSet(aff))
	}
	set.Set(cpu)
	return set, nil
}
