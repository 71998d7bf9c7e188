package localcluster

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestLogModes: the logs of a local cluster (which may hold keys'
// paths, table names, addresses and errors) are the user's only:
// DATA/logs is 0700 and each log 0600, also when an earlier run left
// them open to others.
func TestLogModes(t *testing.T) {
	old := syscall.Umask(0) // the modes must not depend on the umask
	defer syscall.Umask(old)
	for _, earlier := range []bool{false, true} {
		data := t.TempDir()
		logs := filepath.Join(data, "logs")
		if earlier {
			if err := os.MkdirAll(logs, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(logFile(data, "c1"), []byte("old\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := makeLogDir(data); err != nil {
			t.Fatal(err)
		}
		f, err := openLog(logFile(data, "c1"))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if st, err := os.Stat(logs); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("earlier run %v: %s mode %v (%v), want 0700", earlier, logs, st.Mode().Perm(), err)
		}
		if st, err := os.Stat(logFile(data, "c1")); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("earlier run %v: c1.log mode %v (%v), want 0600", earlier, st.Mode().Perm(), err)
		}
	}
}
