package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil/clustertest"
)

// checkPprof takes a one-second CPU profile and a heap
// profile from the /debug/pprof/ handlers of the HTTP endpoint at base
// (http://host:port or https://host:port) with client c, adding the
// bearer token if not empty, and checks that go tool pprof, the tool
// docs/operations.md names, parses both as profiles of their kind.
func checkPprof(t *testing.T, who, base string, c *http.Client, bearer string) {
	t.Helper()
	for _, p := range []struct{ path, period string }{
		{"/debug/pprof/profile?seconds=1", "PeriodType: cpu nanoseconds"},
		{"/debug/pprof/heap", "PeriodType: space bytes"},
	} {
		code, body, err := clustertest.Get(context.Background(), c, base+p.path, bearer)
		if err != nil || code != http.StatusOK {
			t.Fatalf("%s GET %s: %d, %v; body %.200q", who, p.path, code, err, body)
		}
		file := filepath.Join(t.TempDir(), "profile.pb.gz")
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-raw", file).CombinedOutput()
		cancel()
		if err != nil || !strings.HasPrefix(string(out), p.period+"\n") {
			t.Fatalf("%s GET %s: go tool pprof -raw on its %d bytes: %v, output %.300q; want a profile starting %q", who, p.path, len(body), err, out, p.period)
		}
	}
}
