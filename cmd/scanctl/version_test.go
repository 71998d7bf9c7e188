package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/testutil/clustertest"
)

// versionLine is what --version prints: the program, its version, the
// VCS commit ("-dirty" when modified, "unknown" when not recorded) and
// the Go version.
func versionLine(prog string) *regexp.Regexp {
	return regexp.MustCompile(`^` + prog + ` \S+ \(commit ([0-9a-f]{40}(-dirty)?|unknown), go\d[^)]*\)\n$`)
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errOut := runCapture(args...)
		if code != 0 || !versionLine("scanctl").MatchString(out) {
			t.Errorf("scanctl %v: exit %d, out %q, err %q; want a line matching %s", args, code, out, errOut, versionLine("scanctl"))
		}
	}
	if code, _, errOut := runCapture("version", "extra"); code != 2 || errOut == "" {
		t.Errorf("scanctl version extra: exit %d, err %q; want a usage error", code, errOut)
	}
}

// TestBinariesVersion: the coordinator and scanserver print the same
// line for --version and exit 0.
func TestBinariesVersion(t *testing.T) {
	clustertest.SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bins := clustertest.Binaries(t, ctx)
	for _, prog := range []string{"coordinator", "scanserver"} {
		out, err := exec.CommandContext(ctx, filepath.Join(bins, prog), "--version").Output()
		if err != nil || !versionLine(prog).Match(out) {
			t.Errorf("%s --version: %v, out %q; want a line matching %s", prog, err, out, versionLine(prog))
		}
	}
}
