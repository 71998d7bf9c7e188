package testutil

import (
	"fmt"
	"os/exec"
	"testing"
)

// Tmpfs mounts a tmpfs of size bytes (a small disk that fills) on a
// directory of the test's and unmounts it lazily when the test ends; it
// skips the test where mounting is not permitted (it needs root).
func Tmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("cannot mount a tmpfs (%v: %s): needs root", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}
