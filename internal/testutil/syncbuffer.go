package testutil

import (
	"bytes"
	"strings"
	"sync"
)

// SyncBuffer is a bytes.Buffer that writers on other goroutines (a
// child process's output, a supervisor) and a polling test may share.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines returns everything written so far split after each newline (a
// slog handler writes one record a line); a last line without its
// newline is included.
func (b *SyncBuffer) Lines() []string {
	lines := strings.SplitAfter(b.String(), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}
