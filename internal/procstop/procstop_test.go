package procstop

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestStopWaitsForEveryThread: a busy child (a shell loop) is stopped
// when Stop returns: every thread of it is in state T, and it stays
// there until SIGCONT.
func TestStopWaitsForEveryThread(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs /proc")
	}
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if err := Stop(cmd.Process.Pid, time.Minute); err != nil {
		t.Fatal(err)
	}
	tid, ok := runningThread(cmd.Process.Pid)
	if !ok || tid != "" {
		t.Fatalf("after Stop: thread %q not stopped (threads listed: %v)", tid, ok)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// TestStopOfAMissingProcess names the process.
func TestStopOfAMissingProcess(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if err := Stop(cmd.Process.Pid, time.Second); err == nil {
		t.Fatalf("Stop of exited process %d: no error", cmd.Process.Pid)
	}
}

func TestState(t *testing.T) {
	for _, tc := range []struct {
		stat string
		want byte
	}{
		{"123 (sh) S 1 2 3", 'S'},
		{"123 (a) b) T 1 2", 'T'},
		{"123 (x", 0},
		{"", 0},
	} {
		if got := state([]byte(tc.stat)); got != tc.want {
			t.Errorf("state(%q) = %q, want %q", tc.stat, got, tc.want)
		}
	}
}
