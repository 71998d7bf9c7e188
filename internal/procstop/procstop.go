// Package procstop pauses a process with SIGSTOP and returns once it is
// paused.
//
// kill(2) only queues a stop: each thread of the target stops when the
// kernel next runs it, which on a loaded machine can be milliseconds
// later, and until then it keeps serving. A test or fault injector that
// acts on "paused" right after the signal then sees a live process.
// Stop waits until every thread of the process is stopped (Linux /proc);
// where /proc does not list the process's threads it returns after the
// signal. It holds no state and is safe for concurrent use.
package procstop

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// ErrNotStopped: the process was signalled but some thread of it was
// still not stopped when the wait ended.
var ErrNotStopped = errors.New("procstop: the process did not stop")

// poll is the pause between two looks at the threads' states.
const poll = time.Millisecond

// Stop sends SIGSTOP to pid and waits up to wait for every thread of it
// to be stopped. An error wraps ErrNotStopped when the wait ended first,
// or is the signal's error.
func Stop(pid int, wait time.Duration) error {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("procstop: SIGSTOP %d: %w", pid, err)
	}
	deadline := time.Now().Add(wait)
	for {
		running, ok := runningThread(pid)
		if !ok || running == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: thread %s of process %d runs %s after SIGSTOP", ErrNotStopped, running, pid, wait)
		}
		time.Sleep(poll)
	}
}

// runningThread returns a thread of pid that is not stopped, or "" when
// every thread is; ok is false when /proc does not list pid's threads.
func runningThread(pid int) (tid string, ok bool) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) == 0 {
		return "", false
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "stat"))
		if err != nil {
			continue // the thread exited
		}
		if s := state(b); s != 'T' && s != 't' && s != 'Z' && s != 'X' {
			return e.Name(), true
		}
	}
	return "", true
}

// state returns the state letter of a /proc/<pid>/stat line: the field
// after the command name, which is in parentheses and may hold spaces and
// parentheses itself.
func state(stat []byte) byte {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return 0
	}
	return stat[i+2]
}
