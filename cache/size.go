package cache

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Bounds of AutoMaxBytes.
const (
	// MinAutoBytes is the smallest cache AutoMaxBytes gives a host.
	MinAutoBytes = 64 << 20
	// AutoShare: the host caches of a machine take 1/AutoShare of its
	// memory between them.
	AutoShare = 8
)

// AutoMaxBytes is the default capacity of each of hosts host caches (one
// per scanserver process) on a machine with mem bytes of memory: an
// equal part of mem/AutoShare, at least MinAutoBytes.
func AutoMaxBytes(mem int64, hosts int) int64 {
	return max(mem/AutoShare/int64(max(hosts, 1)), MinAutoBytes)
}

// MachineMemory returns the memory this process may use: the machine's
// (MemTotal of /proc/meminfo) or its cgroup's limit (cgroup v2
// memory.max, or v1 memory.limit_in_bytes) when that is lower.
func MachineMemory() (int64, error) {
	mem, err := memTotal("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if b, err := os.ReadFile(p); err == nil {
			if v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64); err == nil && v > 0 && v < mem {
				mem = v
			}
		}
	}
	return mem, nil
}

// memTotal reads MemTotal (in kB) from a meminfo file.
func memTotal(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("cache: machine memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil || kb <= 0 {
				return 0, fmt.Errorf("cache: machine memory: %s: bad MemTotal %q", path, rest)
			}
			return kb << 10, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("cache: machine memory: %s: %w", path, err)
	}
	return 0, fmt.Errorf("cache: machine memory: %s has no MemTotal", path)
}
