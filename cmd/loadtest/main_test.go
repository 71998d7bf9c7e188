package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scanplane/scanplane/internal/cliutil"
)

// TestFlagsNewFaults: bad values for the heterogeneous and antagonist
// faults are refused with exit status 2 and a message naming the field,
// before anything starts; -h lists both faults.
func TestFlagsNewFaults(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--fault", "antagonsit"}, `unknown fault "antagonsit"`},
		{[]string{"--fault", "heterogeneous", "--workers", "1"}, "Workers"},
		{[]string{"--fault", "none", "--workers", "0"}, "Workers 0"},
		{[]string{"--fault", "antagonist", "--antagonist-threads", "0"}, "AntagonistThreads 0"},
		{[]string{"--fault", "antagonist", "--antagonist-cpu", "-5"}, "AntagonistCPU -5"},
		{[]string{"--fault", "antagonist", "--antagonist-cpu", "1023"}, "AntagonistCPU 1023"},
		{[]string{"--quick", "--fault", "heterogeneous", "--workers", "1"}, "Workers"},
		{[]string{"--fault", "antagonist", "--antagonist-threads", "many"}, "invalid value"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("loadtest %q: exit %d, stderr %q; want 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, &out, &errb); code != 0 {
		t.Fatalf("-h: exit %d", code)
	}
	for _, want := range []string{"heterogeneous", "antagonist", "-antagonist-threads", "-antagonist-cpu", "-workers"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-h does not mention %s", want)
		}
	}
}

// TestFlagsClosedLoop: --closed-loop takes a client count in [1, 4096]
// and excludes --rate.
func TestFlagsClosedLoop(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--closed-loop", "-1"}, "--closed-loop -1 must be in [1, 4096]"},
		{[]string{"--closed-loop", "5000"}, "--closed-loop 5000 must be in [1, 4096]"},
		{[]string{"--closed-loop", "8", "--rate", "100"}, "exclude each other"},
		{[]string{"--closed-loop", "x"}, "invalid value"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("loadtest %q: exit %d, stderr %q; want 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

// TestFlagsProfiles: --cpuprofile and --memprofile files that cannot be
// created are refused with exit status 2 naming the flag, before
// anything starts; the profiles written parse with go tool pprof as a
// CPU profile and an allocation profile that saw this test's allocations.
func TestFlagsProfiles(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no", "such", "dir", "p.pprof")
	for _, flag := range []string{"--cpuprofile", "--memprofile"} {
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"--fault", "none", flag, missing}, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), flag+": ") {
			t.Errorf("loadtest %s %s: exit %d, stderr %q; want 2 naming %s", flag, missing, code, errb.String(), flag)
		}
	}

	dir := t.TempDir()
	cpuFile, memFile := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "mem.pprof")
	stop, err := startProfiles(cpuFile, memFile)
	if err != nil {
		t.Fatal(err)
	}
	// Work until the process has spent 300ms of CPU time (about 30 CPU
	// samples at the profiler's 100 Hz), however few of the machine's
	// cycles it gets.
	var keep [][]byte
	for start := cpuTime(t); cpuTime(t)-start < 300*time.Millisecond; {
		keep = append(keep, make([]byte, 64<<10)) // 64 KiB each: sampled (512 KiB rate) many times over
		if len(keep) > 64 {
			keep = keep[:0]
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if testing.Short() {
		// go tool pprof is built on its first use: on a fresh machine that
		// is a large compile, left to the full suite. -short checks that
		// both files are gzip-compressed, as every pprof profile is.
		for _, f := range []string{cpuFile, memFile} {
			if data, err := os.ReadFile(f); err != nil || len(data) < 2 || data[0] != 0x1f || data[1] != 0x8b {
				t.Fatalf("%s: %v, %d bytes; want a gzip-compressed profile", f, err, len(data))
			}
		}
		runtime.KeepAlive(keep)
		return
	}
	for _, p := range []struct{ file, index, want string }{
		{cpuFile, "", "PeriodType: cpu nanoseconds\n"},
		{memFile, "alloc_space", "PeriodType: space bytes\n"},
	} {
		args := []string{"tool", "pprof", "-top"}
		if p.index != "" {
			args = append(args, "-sample_index="+p.index)
		}
		// The test's own deadline (go test -timeout) bounds the tool, which
		// a loaded machine may take minutes to build.
		ctx := t.Context()
		raw, err := exec.CommandContext(ctx, "go", append([]string{"tool", "pprof", "-raw"}, p.file)...).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(raw), p.want) {
			t.Fatalf("go tool pprof -raw %s: %v, %.300q; want a profile starting %q", p.file, err, raw, p.want)
		}
		top, err := exec.CommandContext(ctx, "go", append(args, p.file)...).CombinedOutput()
		if err != nil || !strings.Contains(string(top), "TestFlagsProfiles") {
			t.Errorf("go tool pprof %v %s: %v; no TestFlagsProfiles in\n%s", args[2:], p.file, err, top)
		}
	}
	runtime.KeepAlive(keep)
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// --version prints the build's version, commit and Go version and exits 0
// before anything starts.
func TestVersionFlag(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, &out, &errb); code != 0 {
		t.Fatalf("--version: exit %d, stderr %q", code, errb.String())
	}
	if !versionLine.MatchString(out.String()) {
		t.Fatalf("--version printed %q, want a line matching %s", out.String(), versionLine)
	}
}

var versionLine = regexp.MustCompile(`^loadtest \S+ \(commit \S+, go\d[^)]*\)\n$`)

// TestUsage: --help prints to stdout, exit 0, every flag with a one-word
// argument name and its default once; a bad flag is one line naming it
// and a line pointing at --help.
func TestUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, &out, &errb); code != 0 || errb.Len() > 0 {
		t.Fatalf("--help: exit %d, stderr %q", code, errb.String())
	}
	for _, p := range cliutil.UsageProblems(out.String()) {
		t.Error(p)
	}
	out.Reset()
	if code := run(context.Background(), []string{"--polcies", "adaptive"}, &out, &errb); code != 2 ||
		errb.String() != "loadtest: unknown flag --polcies (did you mean --policies?)\nrun 'loadtest --help'\n" {
		t.Errorf("--polcies: exit %d, stderr %q", code, errb.String())
	}
}
