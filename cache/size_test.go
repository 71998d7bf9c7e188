package cache

import (
	"os"
	"path/filepath"
	"testing"
)

func TestAutoMaxBytes(t *testing.T) {
	for _, c := range []struct {
		mem   int64
		hosts int
		want  int64
	}{
		{24 << 30, 1, 3 << 30},
		{24 << 30, 3, 1 << 30},
		{24 << 30, 0, 3 << 30},
		{1 << 30, 4, MinAutoBytes},
	} {
		if got := AutoMaxBytes(c.mem, c.hosts); got != c.want {
			t.Errorf("AutoMaxBytes(%d, %d) = %d, want %d", c.mem, c.hosts, got, c.want)
		}
	}
}

func TestMemTotal(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "meminfo")
	if err := os.WriteFile(p, []byte("MemTotal:       24684312 kB\nMemFree:         1 kB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := memTotal(p); err != nil || got != 24684312<<10 {
		t.Fatalf("memTotal = %d, %v", got, err)
	}
	if err := os.WriteFile(p, []byte("MemFree: 1 kB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := memTotal(p); err == nil {
		t.Fatal("no MemTotal: no error")
	}
	if m, err := MachineMemory(); err != nil || m <= 0 {
		t.Fatalf("MachineMemory = %d, %v", m, err)
	}
}
